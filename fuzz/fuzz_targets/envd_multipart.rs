//! The envd listener's `/files` multipart upload parsing (`src/envd/files.rs`, multer under
//! it), writing nothing.
#![no_main]

use exec_server::envd_fuzz::multipart;
use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;

const BOUNDARIES: [&str; 4] = ["X", "boundary", "----e2b", "a'b(c)d+e_f"];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let boundary = BOUNDARIES[usize::from(pick) % BOUNDARIES.len()];
    let content_type = format!("multipart/form-data; boundary={boundary}");
    if let Ok(parts) = multipart(&content_type, body) {
        let total: usize = parts.iter().map(|(_, len)| len).sum();
        assert!(total <= body.len());
        let mut seen = HashSet::new();
        for (path, _) in &parts {
            // Resolved from the home, normalized: absolute, no `..`, never twice.
            assert!(path.starts_with('/'), "{path}");
            assert!(!path.split('/').any(|part| part == ".."), "{path}");
            assert!(seen.insert(path.clone()), "{path} twice");
        }
    }
});
