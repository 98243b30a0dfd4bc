//! `process/*` end to end: the real binary, a real WebSocket, real children.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn events_share_one_seq_counter_in_order() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let started = client
        .call(
            "process/start",
            start_params(
                "p1",
                &["sh", "-c", "printf out; sleep 0.1; printf err >&2; exit 7"],
            ),
        )
        .await;
    assert_eq!(started, json!({"processId": "p1", "sandboxType": "none"}));
    let events = client.events_until_closed("p1").await;
    let summary: Vec<(String, u64)> = events
        .iter()
        .map(|e| {
            (
                e["method"].as_str().unwrap().to_owned(),
                e["params"]["seq"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("process/output".to_owned(), 1),
            ("process/output".to_owned(), 2),
            ("process/exited".to_owned(), 3),
            ("process/closed".to_owned(), 4)
        ]
    );
    assert_eq!(events[0]["params"]["stream"], "stdout");
    assert_eq!(unb64(&events[0]["params"]["chunk"]), b"out");
    assert_eq!(events[1]["params"]["stream"], "stderr");
    assert_eq!(events[2]["params"]["exitCode"], 7);
}

#[tokio::test]
async fn read_replays_everything_after_close() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    client
        .call(
            "process/start",
            start_params("p", &["sh", "-c", "echo session output"]),
        )
        .await;
    client.events_until_closed("p").await;
    let result = client.call("process/read", json!({"processId": "p"})).await;
    assert_eq!(result["chunks"].as_array().unwrap().len(), 1);
    assert_eq!(unb64(&result["chunks"][0]["chunk"]), b"session output\n");
    assert_eq!(result["chunks"][0]["seq"], 1);
    assert_eq!(result["nextSeq"], 4, "nextSeq counts exited and closed");
    assert_eq!(result["exited"], true);
    assert_eq!(result["exitCode"], 0);
    assert_eq!(result["closed"], true);
    assert_eq!(result["failure"], serde_json::Value::Null);
    assert_eq!(result["sandboxDenied"], false);
    assert_eq!(result["firstRetainedSeq"], 1);
    assert_eq!(result["truncated"], false);
}
