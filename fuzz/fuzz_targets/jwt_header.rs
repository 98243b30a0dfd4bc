//! The JOSE header check of a signed bearer token (`--ws-auth signed-bearer-token`), the first
//! thing read of an unauthenticated peer's token: never panics; a header it accepts is a JSON
//! object without `crit`, and the same header with `crit` added is refused.
#![no_main]

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(token) = std::str::from_utf8(data) else { return };
    if exec_server::jwt_header(token).is_err() {
        return;
    }
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let encoded = token.split('.').next().unwrap();
    let json = engine.decode(encoded).expect("an accepted header is base64url");
    let mut header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&json).expect("an accepted header is a JSON object");
    assert!(!header.contains_key("crit"));
    header.insert("crit".into(), serde_json::json!(["exp"]));
    let critical = engine.encode(serde_json::to_vec(&header).unwrap());
    let rest = token.split_once('.').map_or("", |(_, rest)| rest);
    assert!(exec_server::jwt_header(&format!("{critical}.{rest}")).is_err());
});
