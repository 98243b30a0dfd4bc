//! The daemon's JSON-RPC decoding: envelope classification and params decoding of every method.
#![no_main]

use exec_server::rpc::decode;
use exec_server::rpc::envelope::{self, Incoming};
use exec_server_protocol::methods::{self, Method, Notification, Visitor};
use exec_server_protocol::{process, rpc};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Decodes the params as each method's and each notification's.
struct DecodeAs(Option<Value>);

impl Visitor for DecodeAs {
    fn request<M: Method>(&mut self) {
        let _ = decode::<M::Params>(self.0.clone());
    }
    fn notification<N: Notification>(&mut self) {
        let _ = decode::<N::Params>(self.0.clone());
    }
}

fn classify_one(value: Value) {
    if let Incoming::Request { id, params, strict, .. } = envelope::classify(value) {
        methods::visit(&mut DecodeAs(params.clone()));
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
