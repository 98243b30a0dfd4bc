//! E2B's envd protocol (issue #30), so the unmodified E2B SDKs drive this daemon: Connect RPC
//! services `process.Process` and `filesystem.Filesystem`, `GET /health`, `GET`/`POST /files`
//! and `GET /metrics`, on each `--envd-listen` address (HTTP/1.1 and h2c on one port).
//!
//! Commands are processes of one session per listener, held by the daemon itself (never
//! attached, never expiring), so they outlive HTTP connections and a daemon restart like any
//! other. The layout: `connect` (the framing), `messages` (envd's messages in proto3 JSON),
//! `process`, `filesystem` and `watch` (the services), `entry` (how they describe a path),
//! `files` (`/files`), `users`
//! (Basic auth → account), `listen` (the listeners, auth and routes), `confine` (file
//! operations under `--envd-sandbox`).

mod confine;
mod connect;
mod entry;
mod files;
mod filesystem;
mod listen;
mod messages;
mod process;
mod users;
mod watch;

pub(crate) use listen::spawn;

use crate::server::Daemon;
use crate::session::Session;
use exec_server_protocol::sandbox::FileSystemSandboxContext;
use exec_server_protocol::PathUri;
use std::sync::Arc;

/// One envd listener's state: its session, its settings, its watchers.
pub(crate) struct Envd {
    daemon: Arc<Daemon>,
    session: Arc<Session>,
    watchers: watch::Watchers,
    accounts: users::Accounts,
}

impl Envd {
    /// The `--envd-sandbox` profile anchored at `cwd`; None without one.
    fn sandbox(&self, cwd: &PathUri) -> Option<FileSystemSandboxContext> {
        let (_, profile) = self.daemon.config.envd.sandbox.as_ref()?;
        crate::sandbox::profile::anchored(profile, cwd)
    }
}

/// The envd listener's parsers of untrusted bytes, for the fuzz targets (fuzz/).
#[doc(hidden)]
pub mod fuzz {
    use super::connect::EnvelopeDecoder;

    /// Decodes `data` as a stream body arriving in pieces of `split` bytes; returns each
    /// envelope's flags and length, or None where the decoder refused the stream.
    pub fn envelopes(data: &[u8], split: usize) -> Option<Vec<(u8, usize)>> {
        let mut decoder = EnvelopeDecoder::default();
        let mut out = Vec::new();
        for piece in data.chunks(split.max(1)) {
            decoder.push(piece);
            while let Some(envelope) = decoder.next().ok()? {
                out.push((envelope.flags, envelope.data.len()));
            }
        }
        Some(out)
    }

    /// Decodes `data` as the request message of envd's request type number `kind` (of the
    /// twelve, modulo), in both codecs as the listener does; returns whether each took it.
    /// What the binary codec took encodes back to bytes that decode alike, and into JSON.
    pub fn request(kind: u8, data: &[u8]) -> (bool, bool) {
        use super::messages::*;
        match kind % 12 {
            0 => both::<Empty>(data),
            1 => both::<StartRequest>(data),
            2 => both::<Selected>(data),
            3 => both::<UpdateRequest>(data),
            4 => both::<SendInputRequest>(data),
            5 => both::<StreamInputRequest>(data),
            6 => both::<SendSignalRequest>(data),
            7 => both::<PathRequest>(data),
            8 => both::<ListDirRequest>(data),
            9 => both::<MoveRequest>(data),
            10 => both::<WatchRequest>(data),
            _ => both::<WatcherId>(data),
        }
    }

    fn both<T: super::connect::Message + PartialEq + std::fmt::Debug>(data: &[u8]) -> (bool, bool) {
        use super::connect::Codec;
        let data = bytes::Bytes::copy_from_slice(data);
        let json = Codec::Json.decode::<T>(data.clone()).is_ok();
        let proto = Codec::Proto.decode::<T>(data).ok();
        if let Some(message) = &proto {
            let encoded = bytes::Bytes::from(Codec::Proto.encode(message));
            let again: T = Codec::Proto
                .decode(encoded)
                .expect("a message re-encoded decodes");
            assert_eq!(&again, message);
            Codec::Json.encode(message);
        }
        (json, proto.is_some())
    }

    /// Parses `body` as `/files` parses a multipart upload with `content_type`, writing
    /// nothing; returns each file part's path and length, or the error `/files` would answer.
    pub fn multipart(content_type: &str, body: &[u8]) -> Result<Vec<(String, usize)>, String> {
        use futures::StreamExt as _;
        let boundary = multer::parse_boundary(content_type).map_err(|err| err.to_string())?;
        let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = (body.chunks(7))
            .map(|chunk| Ok(bytes::Bytes::copy_from_slice(chunk)))
            .collect();
        let multipart = multer::Multipart::new(futures::stream::iter(chunks), boundary);
        let account = super::users::Account {
            name: "fuzz".into(),
            uid: 0,
            gid: 0,
            groups: vec![0],
            home: "/home/fuzz".into(),
        };
        let parts = std::cell::RefCell::new(Vec::new());
        let sink = |path: std::path::PathBuf, body: super::files::BodyStream| {
            let parts = &parts;
            async move {
                // As the upload does: the first error ends the part (multer's stream of a
                // broken part goes on yielding errors).
                let mut body = body;
                let mut len = 0;
                while let Some(chunk) = body.next().await {
                    len += chunk
                        .map_err(|err| super::files::FileError::bad(err.to_string()))?
                        .len();
                }
                parts.borrow_mut().push((path.display().to_string(), len));
                Ok(())
            }
        };
        futures::executor::block_on(super::files::file_parts(multipart, None, &account, sink))
            .map_err(|error| error.to_string())?;
        Ok(parts.into_inner())
    }
}

#[cfg(test)]
mod tests {
    /// The fuzzer's first find: a part cut short makes multer yield errors without end; the
    /// upload (and the harness) stop at the first.
    #[test]
    fn a_broken_part_ends_at_its_first_error() {
        let body = b"--X\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/tmp/a.txt\"\r\n\r\nhello\r\n-cte";
        let outcome = super::fuzz::multipart("multipart/form-data; boundary=X", body);
        assert!(outcome.is_err(), "{outcome:?}");
    }
}
