//! Remote mode's registration reply (first two bytes: the HTTP status, the rest: the body) →
//! the parser that turns it into where to dial: never panics; what it accepts came with a 2xx
//! status and names a `ws://` loopback or `wss://` URL and a non-empty registration id; an
//! error's text stays within what the body can spell and a bounded preamble.
#![no_main]

use libfuzzer_sys::fuzz_target;

const ENVIRONMENT: &str = "env-fuzz";

fuzz_target!(|data: &[u8]| {
    let Some((status, body)) = data.split_first_chunk::<2>() else { return };
    let status = 100 + u16::from_be_bytes(*status) % 500;
    match exec_server::registry_reply(status, body, ENVIRONMENT) {
        Ok((url, registration_id)) => {
            assert!((200..300).contains(&status), "{status} accepted");
            assert!(!registration_id.is_empty());
            assert!(url.starts_with("ws://") || url.starts_with("wss://"), "{url}");
        }
        // Invalid UTF-8 is shown as U+FFFD, three bytes for one.
        Err(message) => assert!(message.len() <= 3 * body.len() + 512, "{message}"),
    }
});
