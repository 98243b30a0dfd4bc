//! Prints the protocol as data, for clients in other languages to check their types against
//! (`clients/python/tests/test_schema.py` runs it): `messages`, the JSON Schema of every wire
//! message keyed as `schema::all` names them (`<method>.params`, `<method>.result`, `message`);
//! `requests`, each request method with whether it is safe to repeat after a dropped
//! connection (`"safe"` or `"never"`); and `notifications`, the notification names.

use exec_server_protocol::methods::{Retry, NOTIFICATIONS, REQUESTS};
use serde_json::{json, Map, Value};

fn main() {
    let messages: Map<String, Value> = exec_server_protocol::schema::all()
        .into_iter()
        .map(|(name, schema)| (name, schema.to_value()))
        .collect();
    let requests: Map<String, Value> = REQUESTS
        .iter()
        .map(|&name| {
            let retry = match Retry::for_method(name) {
                Retry::Safe => "safe",
                Retry::Never => "never",
            };
            (name.to_owned(), json!(retry))
        })
        .collect();
    let protocol = json!({
        "messages": messages,
        "requests": requests,
        "notifications": NOTIFICATIONS,
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&protocol).expect("JSON values serialize")
    );
}
