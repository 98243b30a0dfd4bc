//! Permission-profile decoding: never panics; whatever decodes re-encodes to something that
//! decodes to the same intent.
#![no_main]

use exec_server_protocol::sandbox::FileSystemSandboxContext;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(context) = serde_json::from_slice::<FileSystemSandboxContext>(data) else { return };
    let restricts = context.restricts();
    let encoded = serde_json::to_vec(&context).unwrap();
    let decoded: FileSystemSandboxContext = serde_json::from_slice(&encoded).unwrap();
    assert_eq!(decoded.restricts(), restricts);
});
