//! The envd listener's request messages (`src/envd/messages.rs`), each type (first byte) fed
//! the bytes that follow in both codecs, as a unary body or an envelope's data would be.
#![no_main]

use exec_server::envd_fuzz::request;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    // Never a panic; an empty body is the empty message in binary.
    let (_json, proto) = request(kind, body);
    assert!(proto || !body.is_empty());
});
