//! PathUri parsing and conversion: never panics, and every accepted path is absolute, free of
//! `.`/`..` components and round-trips.
#![no_main]

use exec_server_protocol::PathUri;
use libfuzzer_sys::fuzz_target;
use std::path::Component;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(uri) = PathUri::parse(text) else { return };
    assert_eq!(PathUri::parse(uri.as_str()).as_ref(), Ok(&uri), "parsing is idempotent");
    if let Ok(path) = uri.to_path() {
        assert!(path.is_absolute());
        assert!(path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_))), "{path:?}");
        let again = PathUri::from_path(&path).unwrap();
        assert_eq!(again.to_path().unwrap(), path);
    }
});
