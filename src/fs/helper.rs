//! The confined side of sandboxed `fs/*` calls (`sandbox::fs_servers`): run by the sandbox
//! helper itself, in-process, once the calls' sandbox is in place, and reused for every call
//! under the same plan until the daemon closes its socket.
//!
//! Stdin is a Unix socket to the daemon. Each [`HelperRequest`] arrives on it as one
//! length-prefixed frame, runs with the same blocking code as the daemon's direct path, and
//! gets one [`HelperReply`] back as an `FS_REPLY` marker and a frame. Requests are the one-shot
//! methods with their params (without `sandbox`), `fs/open` (the open file goes ahead of the
//! reply, with a `PASSED_FILE` marker, and the reply describes it), and [`INSTALL_STAGED`],
//! which renames a staged `replace` upload into place when its handle is closed. Nothing here
//! may need what the sandbox may not grant: no exec, no file read but the operation's own.

use super::handles::{Handle, Transfer};
use super::host::host_path;
use super::oneshot::{follow, one_shots, OneShot, OneShotVisitor};
use super::staged::StagedName;
use super::write_stream::WriteTransfer;
use super::FsError;
use crate::channel::{message, read_frame, send_all_with_fds, FS_REPLY};
use crate::rpc::{decode, RpcError};
use exec_server_protocol::fs::OpenParams;
use exec_server_protocol::rpc::{method, ErrorObject};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::os::fd::{AsFd as _, FromRawFd as _};
use std::path::PathBuf;

/// The helper's own request: commit a staged file (`{temp, target}`).
pub const INSTALL_STAGED: &str = "installStaged";

#[derive(Debug, Serialize, Deserialize)]
pub struct HelperRequest {
    pub method: String,
    #[serde(default)]
    pub params: Option<Value>,
}

/// `{"ok": <result>}` or `{"error": {code, message, data}}`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HelperReply {
    Ok(Value),
    Error(ErrorObject),
}

#[derive(Deserialize)]
struct InstallParams {
    temp: PathBuf,
    target: PathBuf,
}

/// Daemon-made requests carry at most a file the daemon accepts for writing, in base64.
const MAX_REQUEST: usize = 1 << 30;

/// Serves the requests on stdin until the daemon closes it, then exits.
pub fn serve() -> ! {
    // SAFETY: stdin is the socket to the daemon for as long as this process runs, and is
    // never closed here (the process exits instead).
    let socket = std::mem::ManuallyDrop::new(unsafe {
        std::os::unix::net::UnixStream::from_raw_fd(libc::STDIN_FILENO)
    });
    let socket: &std::os::unix::net::UnixStream = &socket;
    loop {
        // EOF: the daemon retired this helper.
        let Ok(request) = read_frame(&mut &*socket, MAX_REQUEST) else {
            std::process::exit(0);
        };
        let reply = match handle(&request) {
            Ok(result) => HelperReply::Ok(result),
            Err(error) => HelperReply::Error(RpcError::from(error).to_object()),
        };
        let reply = serde_json::to_vec(&reply).expect("a reply always serializes");
        if send_all_with_fds(socket, &message(Some(FS_REPLY), &[&reply]), &[]).is_err() {
            std::process::exit(1);
        }
    }
}

fn handle(input: &[u8]) -> Result<Value, FsError> {
    let request: HelperRequest = serde_json::from_slice(input)
        .map_err(|err| FsError::internal(format!("malformed helper request: {err}")))?;
    match request.method.as_str() {
        method::FS_OPEN => open(request.params),
        INSTALL_STAGED => {
            let params: InstallParams = decode(request.params)?;
            StagedName::new(params.temp, params.target).install()?;
            Ok(Value::Null)
        }
        name => {
            let mut run = RunNamed {
                name,
                params: request.params,
                outcome: None,
            };
            one_shots(&mut run);
            run.outcome
                .unwrap_or_else(|| Err(RpcError::method_not_found(name).into()))
        }
    }
}

/// Runs the one-shot method called `name`, if there is one.
struct RunNamed<'a> {
    name: &'a str,
    params: Option<Value>,
    outcome: Option<Result<Value, FsError>>,
}

impl OneShotVisitor for RunNamed<'_> {
    fn visit<M: OneShot>(&mut self) {
        if M::NAME == self.name {
            let params = decode(self.params.take());
            self.outcome = Some(params.map_err(FsError::from).and_then(M::run));
        }
    }
}

/// Opens the stream as the daemon would, passes the open file back, then hands its cleanup
/// over to the daemon (a staged file is no longer removed here).
fn open(params: Option<Value>) -> Result<Value, FsError> {
    let params: OpenParams = decode(params)?;
    let path = host_path(&params.path)?;
    let mode = params.mode.unwrap_or_default();
    let handle = Handle::open(&path, mode, follow(params.follow_symlinks))?;
    let (file, transfer) = handle
        .into_transfer()
        .ok_or_else(|| FsError::internal("a fresh handle is open"))?;
    if let Err(err) = crate::sandbox::pass_back(file.as_fd()) {
        if let Transfer::Write(WriteTransfer::Staged { temp, .. }) = &transfer {
            let _ = std::fs::remove_file(temp);
        }
        return Err(FsError::internal(format!(
            "cannot pass the open file back: {err}"
        )));
    }
    Ok(serde_json::to_value(transfer).expect("a transfer always serializes"))
}
