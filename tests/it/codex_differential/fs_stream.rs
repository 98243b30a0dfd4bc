//! Gaps 4 and 9 of issue 29: `fs/open` handle limits, write blocks and `replace`.

use super::{assert_same, assert_same_but_errors, Scenario};
use serde_json::{json, Value};
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

const BLOCK_SIZE: usize = 1024 * 1024;

fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Upstream: `write_blocks_support_non_sequential_offsets_and_enforce_bounds`: blocks land at
/// their offsets in any order; an empty, an oversized and an overflowing block are refused; a
/// read on the write handle is refused and closes it, so the next write fails too.
#[tokio::test]
async fn write_blocks_support_non_sequential_offsets_and_enforce_bounds() {
    let (id, params) = open(1, "writer", "blocks.bin", "replace");
    let mut scenario = Scenario::initialized()
        .request(id, "fs/open", params)
        .then();
    let blocks = [
        (BLOCK_SIZE as u64, vec![b'z'; 3]),
        (0, vec![b'a'; BLOCK_SIZE]),
        (1, b"bc".to_vec()),
        (0, Vec::new()),
        (0, vec![b'x'; BLOCK_SIZE + 1]),
        (u64::MAX, b"x".to_vec()),
    ];
    for (at, (offset, chunk)) in blocks.into_iter().enumerate() {
        let params = block("writer", offset, &base64(&chunk));
        scenario = scenario
            .request(2 + at as i64, "fs/writeBlock", params)
            .then();
    }
    let read = json!({"handleId": "writer", "offset": 0, "len": 4});
    let mut expected = vec![b'a'; BLOCK_SIZE];
    expected[1..3].copy_from_slice(b"bc");
    expected.extend_from_slice(b"zzz");
    scenario = scenario
        .request(10, "fs/readBlock", read)
        .then()
        .request(11, "fs/writeBlock", block("writer", 0, "eA=="))
        .then()
        .request(
            12,
            "fs/readFile",
            json!({"path": "file://{root}/blocks.bin"}),
        );
    let replies = assert_same_but_errors(&scenario, |_| {}, &[10]).await;
    assert_eq!(
        replies[7]["error"]["message"],
        "file handle `writer` is not open for reading"
    );
    assert_eq!(replies[9]["result"]["dataBase64"], base64(&expected));
}

/// Upstream: `read_block_supports_non_sequential_offsets_and_lengths`: a write on a read handle
/// is refused (and leaves it open), then blocks are read at any offset, the last one short.
#[tokio::test]
async fn read_block_supports_non_sequential_offsets_and_lengths() {
    let (id, params) = open(1, "reader", "f", "read");
    let mut scenario = Scenario::initialized()
        .request(id, "fs/open", params)
        .then()
        .request(2, "fs/writeBlock", block("reader", 0, "eA=="))
        .then();
    for (at, (offset, len)) in [(6, 3), (1, 2), (8, 4), (0, 2)].into_iter().enumerate() {
        let read = json!({"handleId": "reader", "offset": offset, "len": len});
        scenario = scenario.request(3 + at as i64, "fs/readBlock", read);
    }
    scenario = scenario
        .then()
        .request(7, "fs/close", json!({"handleId": "reader"}));
    let fixture = |root: &Path| std::fs::write(root.join("f"), "0123456789").unwrap();
    assert_same_but_errors(&scenario, fixture, &[2]).await;
}

/// Upstream: `stream_stops_after_an_exact_block_boundary` and
/// `open_enforces_the_per_connection_limit_and_close_releases_capacity` (the release): a file
/// of exactly two blocks reads as two full blocks, the second with `eof` only once a read
/// comes back short; a closed handle's slot opens again.
#[tokio::test]
async fn stream_stops_after_an_exact_block_boundary() {
    let read = |id: i64, offset: usize| {
        (
            id,
            json!({"handleId": "r", "offset": offset, "len": BLOCK_SIZE}),
        )
    };
    let (id, params) = open(1, "r", "exact-blocks.bin", "read");
    let mut scenario = Scenario::initialized()
        .request(id, "fs/open", params)
        .then();
    for (id, params) in [read(2, 0), read(3, BLOCK_SIZE), read(4, 2 * BLOCK_SIZE)] {
        scenario = scenario.request(id, "fs/readBlock", params).then();
    }
    // With `r`, 128 handles: the table is full.
    for n in 0..127 {
        let (_, params) = open(0, &format!("h{n}"), "exact-blocks.bin", "read");
        scenario = scenario.request(10 + n, "fs/open", params);
    }
    let (_, over) = open(0, "over", "exact-blocks.bin", "read");
    let (_, again) = open(0, "over", "exact-blocks.bin", "read");
    scenario = scenario
        .then()
        .request(199, "fs/open", over)
        .then()
        .request(200, "fs/close", json!({"handleId": "h0"}))
        .then()
        .request(201, "fs/open", again);
    let replies = assert_same(&scenario, |root: &Path| {
        std::fs::write(root.join("exact-blocks.bin"), vec![b'x'; 2 * BLOCK_SIZE]).unwrap();
    })
    .await;
    let eof: Vec<&Value> = replies[1..4].iter().map(|r| &r["result"]["eof"]).collect();
    assert_eq!(eof, [&json!(false), &json!(false), &json!(true)]);
}
