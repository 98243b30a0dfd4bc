//! Binary payloads (`initialize {binaryPayloads: true}`): `process/output` and `fs/readBlock`
//! travel as `HEADER NUL PAYLOAD` binary WebSocket messages, everything else stays text, and
//! the choice belongs to the connection, not the session. The harness turns binary messages
//! back into the text form and marks them with `"$binary": true`.

use crate::common;

use common::*;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// Every byte value, many times over, in an order that a shifted or repeated block would break.
fn all_bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 256) as u8).collect()
}

async fn binary_session(daemon: &Daemon) -> (Client, String) {
    let client = daemon.client().await;
    let result = client
        .call(
            "initialize",
            json!({"clientName": "e2e", "binaryPayloads": true}),
        )
        .await;
    assert_eq!(result["binaryPayloads"], true, "{result}");
    client.notify("initialized", json!({})).await;
    (client, result["sessionId"].as_str().unwrap().to_owned())
}

/// Starts process `id`, a `cat` of `bytes` (in the returned directory).
async fn cat(client: &Client, id: &str, bytes: &[u8]) -> tempfile::TempDir {
    let dir = scratch_dir();
    let source = dir.path().join("bytes");
    std::fs::write(&source, bytes).unwrap();
    let argv = ["cat", source.to_str().unwrap()];
    client.call("process/start", start_params(id, &argv)).await;
    dir
}

fn came_binary(message: &Value) -> bool {
    message["$binary"] == true
}

#[tokio::test]
async fn output_comes_as_raw_bytes_and_everything_else_as_text() {
    let daemon = Daemon::start();
    let (client, _) = binary_session(&daemon).await;
    let expected = all_bytes(3 << 20);
    let _dir = cat(&client, "p", &expected).await;
    let events = client.events_until_closed("p").await;
    let outputs: Vec<&Value> = events
        .iter()
        .filter(|e| e["method"] == "process/output")
        .collect();
    assert!(outputs.len() > 1, "3 MiB arrives in several chunks");
    assert!(
        outputs.iter().all(|e| came_binary(e)),
        "every chunk is binary"
    );
    assert!(
        events
            .iter()
            .filter(|e| e["method"] != "process/output")
            .all(|e| !came_binary(e)),
        "exited and closed are text"
    );
    assert_eq!(output_of(&events), expected, "byte for byte, in order");
    let seqs: Vec<u64> = outputs
        .iter()
        .map(|e| e["params"]["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|pair| pair[1] == pair[0] + 1));
    // process/read carries many chunks in one reply: that stays JSON with base64.
    let (replayed, reply) = read_all(&client, "p").await;
    assert_eq!(replayed, expected);
    assert!(!came_binary(&reply));
}

/// On a plain socket the daemon's writer writes data frames itself (an output chunk straight
/// from its file), beside the pongs its WebSocket layer answers pings with: a client pinging
/// all through a stream still gets every frame whole and every byte in order.
#[tokio::test]
async fn pings_all_through_a_stream_never_split_a_frame() {
    let daemon = Daemon::start();
    let (client, _) = binary_session(&daemon).await;
    let expected = all_bytes(48 << 20);
    let _dir = cat(&client, "p", &expected).await;
    let pings = async {
        for ping in 0u64.. {
            let payload = ping.to_be_bytes().to_vec();
            client.send_message(Message::Ping(payload.into())).await;
            tokio::time::sleep(std::time::Duration::from_micros(50)).await;
        }
    };
    let events = tokio::select! {
        events = client.events_until_closed("p") => events,
        () = pings => unreachable!(),
    };
    let outputs = events.iter().filter(|e| e["method"] == "process/output");
    assert!(outputs.clone().all(came_binary));
    assert!(outputs.count() > 10);
    assert_eq!(output_of(&events), expected, "byte for byte, in order");
}

#[tokio::test]
async fn read_block_replies_carry_the_block_raw_and_errors_stay_text() {
    let daemon = Daemon::start();
    let (client, _) = binary_session(&daemon).await;
    let dir = scratch_dir();
    let path = dir.path().join("file");
    let expected = all_bytes((2 << 20) + 12345);
    std::fs::write(&path, &expected).unwrap();
    client
        .call("fs/open", json!({"handleId": "h", "path": file_uri(&path)}))
        .await;
    let mut read = Vec::new();
    loop {
        let reply = client
            .raw_request(json!({"id": "r", "method": "fs/readBlock",
                "params": {"handleId": "h", "offset": read.len(), "len": 1 << 20}}))
            .await;
        assert!(came_binary(&reply), "{reply}");
        assert_eq!(reply["id"], "r");
        read.extend(unb64(&reply["result"]["chunk"]));
        if reply["result"]["eof"] == true {
            break;
        }
    }
    assert_eq!(read, expected);
    let error = client
        .raw_request(json!({"id": 9, "method": "fs/readBlock",
            "params": {"handleId": "nope", "offset": 0, "len": 1}}))
        .await;
    assert!(!came_binary(&error));
    assert_eq!(error["error"]["message"], "unknown file handle `nope`");
    // Inside a batch the block is part of one JSON array, so it comes in base64.
    client
        .send_text(
            json!([{"jsonrpc": "2.0", "id": 10, "method": "fs/readBlock",
                "params": {"handleId": "h", "offset": 0, "len": 3}}])
            .to_string(),
        )
        .await;
    let batch = client.next_unsolicited().await;
    assert!(!came_binary(&batch));
    assert_eq!(unb64(&batch[0]["result"]["chunk"]), expected[..3]);
}

#[tokio::test]
async fn the_strict_dialect_keeps_its_member_in_binary_headers() {
    let daemon = Daemon::start();
    let client = daemon.client().await;
    let init = client
        .raw_request(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"clientName": "strict", "binaryPayloads": true}}))
        .await;
    assert_eq!(init["result"]["binaryPayloads"], true);
    client
        .send_text(json!({"jsonrpc": "2.0", "method": "initialized"}).to_string())
        .await;
    client
        .raw_request(json!({"jsonrpc": "2.0", "id": 2, "method": "process/start",
            "params": start_params("s", &["printf", "a\\0b"])}))
        .await;
    let events = client.events_until_closed("s").await;
    let output = events
        .iter()
        .find(|e| e["method"] == "process/output")
        .unwrap();
    assert!(came_binary(output));
    assert_eq!(output["jsonrpc"], "2.0");
    assert_eq!(output_of(&events), b"a\0b");
}

#[tokio::test]
async fn without_the_opt_in_nothing_is_binary() {
    let daemon = Daemon::start();
    let client = daemon.client().await;
    let result = client
        .call("initialize", json!({"clientName": "text"}))
        .await;
    assert!(result.get("binaryPayloads").is_none(), "{result}");
    client.notify("initialized", json!({})).await;
    client
        .call("process/start", start_params("t", &["printf", "x"]))
        .await;
    let events = client.events_until_closed("t").await;
    assert!(events.iter().all(|e| !came_binary(e)));
    assert_eq!(output_of(&events), b"x");
}

#[tokio::test]
async fn the_framing_follows_the_connection_across_a_resume() {
    let daemon = Daemon::start();
    let (binary, session) = binary_session(&daemon).await;
    let script = "read line; echo \"got $line\"; read line; echo \"then $line\"";
    let mut params = start_params("r", &["sh", "-c", script]);
    params["pipeStdin"] = json!(true);
    binary.call("process/start", params).await;
    binary
        .call(
            "process/write",
            json!({"processId": "r", "writeId": "w1", "chunk": b64(b"one\n")}),
        )
        .await;
    let first = binary.next_notification().await;
    assert!(came_binary(&first));
    assert_eq!(unb64(&first["params"]["chunk"]), b"got one\n");
    binary.abort();

    let text = daemon.resume(&session).await;
    text.call(
        "process/write",
        json!({"processId": "r", "writeId": "w2", "chunk": b64(b"two\n")}),
    )
    .await;
    let events = text.events_until_closed("r").await;
    assert!(events.iter().all(|e| !came_binary(e)), "{events:?}");
    assert_eq!(output_of(&events), b"then two\n");
}
