//! The daemon's JSON-RPC decoding: the bounded frame decoder, envelope classification and params
//! decoding of every method.
#![no_main]

use exec_server::rpc::{decode, decoder};
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
    // The daemon's bounded decoder: whatever it accepts, serde_json reads the same way (it
    // only refuses more: duplicate keys, the value budget, a top level that is no message).
    let decoded = decoder::parse_message(data);
    if let Ok(value) = &decoded {
        let plain = serde_json::from_slice::<Value>(data).expect("serde_json accepts it too");
        assert_eq!(&plain, value);
    }
    match decoded {
        Ok(Value::Array(batch)) => batch.into_iter().for_each(classify_one),
        Ok(value) => classify_one(value),
        Err(_) => {}
    }
});
