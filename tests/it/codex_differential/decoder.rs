//! Gap 2 of issue 29: the bounded JSON-RPC decoder (duplicate keys, value budget, top level).

use super::{assert_same, nothing, Scenario};
use serde_json::json;

fn zeros(id: i64, count: usize) -> String {
    let body = vec!["0"; count].join(",");
    format!(r#"{{"id":{id},"method":"process/read","params":{{"processId":"p","a":[{body}]}}}}"#)
}

/// Upstream: `codex-rs/exec-server-protocol/src/rpc_tests.rs` (the duplicate-key and value-budget
/// cases), as the reply path of `connection.rs` sends them: id -1, -32600, the connection kept.
#[tokio::test]
async fn jsonrpc_message_rejects_duplicate_keys_and_excess_values() {
    let scenario = Scenario::initialized()
        .frame(r#"{"id":1,"method":"fs/getMetadata","params":{"path":"file:///","path":"file:///tmp"}}"#, 1)
        .frame(r#"{"id":2,"id":3,"method":"process/read","params":{"processId":"p"}}"#, 1)
        .frame(r#"{"id":4,"method":"x","params":{"a":{"b":1,"b":2}}}"#, 1)
        .frame(r#"{"method":"initialized","params":{"a":1,"a":1}}"#, 1)
        .frame(r#"{"id":5,"method":"x","params":{"a\u0062":1,"ab":1}}"#, 1)
        // The object, id, method, params, processId and the array are six values.
        .frame(zeros(6, 262_144 - 5), 1)
        .frame(format!(r#"{{"id":7,"method":"x","params":[{}]}}"#, vec!["[]"; 262_141].join(",")), 1)
        // A long string is one value.
        .frame(format!(r#"{{"id":8,"method":"process/read","params":{{"processId":"p","pad":"{}"}}}}"#, "p".repeat(262_145)), 1)
        .frame("[1,2]", 1)
        .frame("3", 1)
        .frame("not json", 1)
        .frame(r#"{"id":9,"method":"x"} trailing"#, 1)
        .request(10, "process/read", json!({"processId": "p"}));
    let messages = assert_same(&scenario, nothing).await;
    assert!(messages[..7]
        .iter()
        .all(|m| m["id"] == -1 && m["error"]["code"] == -32600));
    assert!(messages[0]["error"]["message"]
        .as_str()
        .unwrap()
        .ends_with("duplicate JSON object key `path` at line 1 column 68"));
}

/// The budget's edge: the last value it allows is dispatched.
#[tokio::test]
async fn jsonrpc_message_at_the_value_budget_is_dispatched() {
    let scenario = Scenario::initialized().frame(zeros(1, 262_144 - 6), 1);
    assert_same(&scenario, nothing).await;
}
