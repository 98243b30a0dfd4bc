//! Gaps 4 and 9 of issue 29: `fs/open` handle limits, write blocks and `replace`.

use super::{assert_same, Scenario};
use serde_json::json;
use std::path::Path;

fn file(root: &Path) {
    std::fs::write(root.join("f"), "old contents").unwrap();
}

fn open(id: i64, handle: &str, path: &str, mode: &str) -> (i64, serde_json::Value) {
    (
        id,
        json!({"handleId": handle, "path": format!("file://{{root}}/{path}"), "mode": mode}),
    )
}

fn block(handle: &str, offset: u64, chunk: &str) -> serde_json::Value {
    json!({"handleId": handle, "offset": offset, "chunk": chunk})
}

/// Upstream: `codex-rs/exec-server/tests/file_stream.rs` `replace_open_truncates_existing_file`
/// and the write-block bounds: the file is empty right after the open reply, blocks land in
/// place before `fs/close`, an empty block and a range past `i64::MAX` are refused.
#[tokio::test]
async fn replace_open_truncates_existing_file() {
    let (id, params) = open(1, "w", "f", "replace");
    let scenario = Scenario::initialized()
        .request(id, "fs/open", params)
        .then()
        .request(2, "fs/readFile", json!({"path": "file://{root}/f"}))
        .then()
        .request(3, "fs/writeBlock", block("w", 0, ""))
        .request(4, "fs/writeBlock", block("w", i64::MAX as u64, "eA=="))
        .request(5, "fs/writeBlock", block("w", u64::MAX, "eA=="))
        .request(6, "fs/writeBlock", block("w", i64::MAX as u64 - 1, "eHg="))
        .request(7, "fs/writeBlock", block("w", 2, "eHg="))
        .then()
        .request(8, "fs/readFile", json!({"path": "file://{root}/f"}));
    let replies = assert_same(&scenario, file).await;
    assert_eq!(replies[1]["result"]["dataBase64"], "", "{}", replies[1]);
}

/// Upstream: `codex-rs/exec-server/tests/file_stream.rs`, the handle-table cases: ids of at
/// most 32 bytes, 128 open handles per connection (reads and writes together), a duplicate
/// id refused before the file is touched, unknown handles named alike for reads and writes.
#[tokio::test]
async fn file_handles_are_limited_per_connection() {
    let mut scenario = Scenario::initialized();
    let long = "h".repeat(33);
    for (id, params) in [
        open(1, &long, "f", "read"),
        open(2, &long, "f", "replace"),
        open(3, "dup", "f", "read"),
        open(4, "dup", "f", "replace"),
    ] {
        scenario = scenario.request(id, "fs/open", params).then();
    }
    scenario = scenario
        .request(
            5,
            "fs/readBlock",
            json!({"handleId": "nope", "offset": 0, "len": 1}),
        )
        .request(6, "fs/writeBlock", block("nope", 0, "eA=="))
        .request(7, "fs/close", json!({"handleId": "nope"}))
        .request(8, "fs/readFile", json!({"path": "file://{root}/f"}));
    for n in 0..127 {
        let (_, params) = open(0, &format!("h{n}"), "f", "read");
        scenario = scenario.request(100 + n, "fs/open", params);
    }
    let (_, params) = open(0, "over", "f", "read");
    scenario = scenario.then().request(300, "fs/open", params);
    let (_, params) = open(0, "over-write", "created", "replace");
    scenario = scenario.request(301, "fs/open", params).then().request(
        302,
        "fs/getMetadata",
        json!({"path": "file://{root}/created"}),
    );
    let replies = assert_same(&scenario, file).await;
    let last = &replies[replies.len() - 3..];
    assert_eq!(
        last[0]["error"]["message"],
        "at most 128 file handles may be open per connection"
    );
    assert_eq!(
        last[2]["error"]["code"], -32004,
        "nothing created: {}",
        last[2]
    );
}
