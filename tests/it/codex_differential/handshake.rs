//! Gap 1 of issue 29: handshake errors name upstream's method family, in wire order.

use super::{assert_same, nothing, Scenario};
use serde_json::{json, Value};

/// One request of every family, with params both daemons accept.
fn every_family(first_id: i64) -> Vec<(i64, &'static str, Value)> {
    let walk_options = json!({"maxDepth": 1, "maxDirectories": 1, "maxEntries": 1,
        "followDirectorySymlinks": false});
    [
        ("process/read", json!({"processId": "p"})),
        ("fs/readFile", json!({"path": "file:///etc/hostname"})),
        (
            "fs/walk",
            json!({"path": "file:///tmp", "options": walk_options}),
        ),
        (
            "http/request",
            json!({"method": "GET", "url": "http://127.0.0.1:1/", "requestId": "r"}),
        ),
        ("environment/info", json!({})),
        ("environment/status", json!({})),
        (
            "environmentConfig/read",
            json!({"cwd": "file:///tmp", "configPaths": [], "requirementsPaths": []}),
        ),
        ("capabilityRoots/discoverV1", json!({"roots": []})),
    ]
    .into_iter()
    .enumerate()
    .map(|(at, (method, params))| (first_id + at as i64, method, params))
    .collect()
}

/// Upstream: `codex-rs/exec-server/tests/initialize.rs`
/// `exec_server_rejects_pipelined_requests_before_initialized`: everything below is sent at
/// once, and each error comes back in the order its request went out.
#[tokio::test]
async fn exec_server_rejects_pipelined_requests_before_initialized() {
    let mut scenario = Scenario::raw();
    for (id, method, params) in every_family(1) {
        scenario = scenario.request(id, method, params);
    }
    scenario = scenario.request(100, "initialize", json!({"clientName": "pipelined"}));
    for (id, method, params) in every_family(101) {
        scenario = scenario.request(id, method, params);
    }
    scenario = scenario
        .in_wire_order()
        .notify("initialized", json!({}))
        .request(200, "process/read", json!({"processId": "p"}));
    let messages = assert_same(&scenario, nothing).await;
    let message = |id: i64| {
        let reply = messages.iter().find(|m| m["id"] == id).unwrap();
        reply["error"]["message"].as_str().unwrap().to_owned()
    };
    assert_eq!(
        message(1),
        "client must call initialize before using exec methods"
    );
    assert_eq!(
        message(8),
        "client must call initialize before using capability discovery methods"
    );
    assert_eq!(
        message(107),
        "client must send initialized before using environment config methods"
    );
    let order: Vec<&Value> = messages.iter().map(|m| &m["id"]).collect();
    assert_eq!(
        order[8],
        &json!(100),
        "the initialize reply after the early errors: {order:?}"
    );
}
