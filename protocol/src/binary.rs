//! Binary payloads (this daemon's addition to the protocol).
//!
//! A WebSocket client that sends `initialize` with `binaryPayloads: true`, and sees
//! `binaryPayloads: true` in the result, receives the byte-heavy messages (`process/output`
//! notifications and `fs/readBlock` replies) as binary WebSocket messages laid out as
//! `HEADER 0x00 PAYLOAD`: HEADER is the JSON-RPC message, UTF-8, without its `chunk` member
//! (which belongs in `params` of a notification, in `result` of a reply), and PAYLOAD is that
//! chunk's raw bytes. JSON text never contains a raw NUL, so the first NUL ends the header.
//! That saves the base64 encoding and decoding, the JSON string scan, and a third of the bytes.
//! Every other message stays text; without the opt-in (or over stdio) everything is text.

/// The member of `params` or `result` that a binary message carries as its payload.
pub const CHUNK_MEMBER: &str = "chunk";

/// Ends the header of a binary message.
pub const SEPARATOR: u8 = 0;

/// The header and payload of a binary message; None when it carries no payload (a plain JSON
/// message sent as binary).
pub fn split(message: &[u8]) -> Option<(&[u8], &[u8])> {
    // The header is short, so a plain scan finds the separator quickly.
    let at = message.iter().position(|&byte| byte == SEPARATOR)?;
    Some((&message[..at], &message[at + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_nul_ends_the_header() {
        let message = b"{\"id\":1,\"result\":{\"eof\":true}}\0a\0b";
        let (header, payload) = split(message).unwrap();
        assert_eq!(header, br#"{"id":1,"result":{"eof":true}}"#);
        assert_eq!(payload, b"a\0b");
        assert_eq!(split(br#"{"id":1}"#), None);
        assert_eq!(split(b"{}\0"), Some((&b"{}"[..], &b""[..])));
    }
}
