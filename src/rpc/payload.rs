//! The bytes a message carries raw on a binary connection (an output chunk, a file block),
//! read into a buffer that keeps room in front for the message's header: the header is written
//! there once it is known, and the bytes are never copied into a message of their own.

use bytes::Bytes;
use exec_server_protocol::binary::SEPARATOR;

/// Room kept for a header (with its separator) in front of the bytes; a longer header (a
/// long request id) costs one copy.
const HEADROOM: usize = 192;

#[derive(Debug)]
pub(crate) struct Payload {
    /// `HEADROOM` bytes, then the payload.
    buffer: Vec<u8>,
}

impl Payload {
    /// An empty payload with room for `len` bytes.
    pub(crate) fn with_capacity(len: usize) -> Self {
        let mut buffer = Vec::with_capacity(HEADROOM + len);
        buffer.resize(HEADROOM, 0);
        Self { buffer }
    }

    /// The buffer to append the payload's bytes to; what precedes them is not to be touched.
    pub(crate) fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.buffer
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buffer[HEADROOM..]
    }

    pub(crate) fn len(&self) -> usize {
        self.buffer.len() - HEADROOM
    }

    /// `header`, the separator, then the payload, in one buffer (the payload's own when the
    /// header fits in front of it).
    pub(crate) fn behind(mut self, header: &str) -> Bytes {
        let Some(start) = HEADROOM.checked_sub(header.len() + 1) else {
            let mut message = Vec::with_capacity(header.len() + 1 + self.len());
            message.extend_from_slice(header.as_bytes());
            message.push(SEPARATOR);
            message.extend_from_slice(self.bytes());
            return message.into();
        };
        self.buffer[start..HEADROOM - 1].copy_from_slice(header.as_bytes());
        self.buffer[HEADROOM - 1] = SEPARATOR;
        Bytes::from(self.buffer).slice(start..)
    }
}

#[cfg(test)]
impl From<&[u8]> for Payload {
    fn from(bytes: &[u8]) -> Self {
        let mut payload = Self::with_capacity(bytes.len());
        payload.buffer.extend_from_slice(bytes);
        payload
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_goes_in_front_of_the_bytes_however_long_it_is() {
        for header_len in [0, 1, HEADROOM - 1, HEADROOM, 1000] {
            let header = "h".repeat(header_len);
            let message = Payload::from(&b"a\0b"[..]).behind(&header);
            let expected = [header.as_bytes(), b"\0a\0b"].concat();
            assert_eq!(&message[..], &expected[..], "header of {header_len} bytes");
        }
    }
}
