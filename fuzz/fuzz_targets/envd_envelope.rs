//! The envd listener's Connect envelope decoder (`src/envd/connect.rs`), fed a stream body in
//! pieces of every size.
#![no_main]

use exec_server::envd_fuzz::envelopes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, body)) = data.split_first() else {
        return;
    };
    let whole = envelopes(body, body.len());
    // However the bytes arrive, the same envelopes come out (or the same refusal).
    assert_eq!(envelopes(body, usize::from(split)), whole);
    assert_eq!(envelopes(body, 1), whole);
    if let Some(found) = whole {
        let framed: usize = found.iter().map(|(_, len)| 5 + len).sum();
        assert!(framed <= body.len());
    }
});
