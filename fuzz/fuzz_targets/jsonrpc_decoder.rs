//! The daemon's JSON-RPC decoding: envelope classification and params decoding of every method.
#![no_main]

use exec_server::rpc::dispatch::decode;
use exec_server::rpc::envelope::{self, Incoming};
use exec_server_protocol::{process, rpc, session};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn classify_one(value: Value) {
    if let Incoming::Request { id, params, strict, .. } = envelope::classify(value) {
        let _ = decode::<session::InitializeParams>(params.clone());
        let _ = decode::<process::StartParams>(params.clone());
        let _ = decode::<process::ReadParams>(params.clone());
        let _ = decode::<process::WriteParams>(params.clone());
        let _ = decode::<process::SignalParams>(params.clone());
        let _ = decode::<process::ResizeParams>(params.clone());
        let outcome = decode::<process::ProcessIdParams>(params).map(|p| Value::from(p.process_id));
        // A reply always serializes and keeps the id.
        let reply = envelope::reply(id.clone(), outcome, strict);
        assert_eq!(reply["id"], id);
        serde_json::to_string(&reply).unwrap();
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<rpc::Message>(data);
    match serde_json::from_slice::<Value>(data) {
        Ok(Value::Array(batch)) => batch.into_iter().for_each(classify_one),
        Ok(value) => classify_one(value),
        Err(_) => {}
    }
});
