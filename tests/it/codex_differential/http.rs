//! Upstream's `codex-rs/exec-server/tests/http_request.rs` on the wire: both daemons make the
//! same `http/request`s to one loopback server (`common::http_server`), whose address and
//! `date` headers the harness blanks.

use super::{assert_equal, assert_same, assert_same_but_errors, run_both_with, Scenario};
use crate::common::http_server::HttpServer;
use serde_json::{json, Value};

fn get(server: &HttpServer, path: &str, request_id: &str) -> Value {
    json!({"method": "GET", "url": server.url(path), "requestId": request_id,
        "timeoutMs": 5_000})
}

/// Upstream: `exec_server_http_request_buffers_response_body`,
/// `exec_server_http_request_omits_url_fragment`, `exec_server_http_request_can_stop_at_redirects`
/// and `exec_server_http_request_can_follow_redirects`: status, headers and the whole body
/// (a header's value from the daemon's environment), a URL fragment left off the request, a
/// 3xx returned as it is or followed.
#[tokio::test]
async fn exec_server_http_request_buffers_responses_and_redirects_as_upstream() {
    let server = HttpServer::start().await;
    let post = json!({"method": "POST", "url": server.url("/echo"), "requestId": "buffered",
        "timeoutMs": 5_000, "bodyBase64": "cmVxdWVzdC1ib2R5",
        "headers": [{"name": "x-echo", "value": "buffered"},
            {"name": "authorization", "value": "Bearer ", "valueEnvVar": "NODE_REPL_AUTH_TOKEN"}]});
    let mut stop = get(&server, "/redirect", "stop");
    stop["redirectPolicy"] = json!("stop");
    let scenario = Scenario::initialized()
        .request(1, "http/request", post)
        .request(
            2,
            "http/request",
            get(&server, "/hello#client-section", "fragment"),
        )
        .request(3, "http/request", stop)
        .request(4, "http/request", get(&server, "/redirect", "follow"));
    let env = [("NODE_REPL_AUTH_TOKEN", "executor-token")];
    let (ours, codex) = run_both_with(&scenario, |_| {}, &[], &env).await;
    assert_equal(&ours, &codex);
    assert_eq!(ours[0]["result"]["status"], 201, "{}", ours[0]);
    assert_eq!(ours[2]["result"]["status"], 302, "{}", ours[2]);
}

/// Upstream: `exec_server_http_request_rejects_duplicate_stream_request_ids` and
/// `exec_server_http_request_honors_optional_timeout`: a streamed `requestId` stays taken
/// while its body is open; no `timeoutMs` waits, a short one fails the request (-32603
/// `http/request failed: …`, the HTTP client's own words after the prefix).
#[tokio::test]
async fn exec_server_http_request_stream_ids_and_timeouts_as_upstream() {
    let server = HttpServer::start().await;
    let mut stream = get(&server, "/stall", "stream-dup");
    stream["streamResponse"] = json!(true);
    stream["timeoutMs"] = Value::Null;
    let mut slow = get(&server, "/slow", "slow");
    slow["timeoutMs"] = Value::Null;
    let mut too_slow = get(&server, "/slow", "too-slow");
    too_slow["timeoutMs"] = json!(10);
    let scenario = Scenario::initialized()
        .replies_only()
        .request(1, "http/request", stream.clone())
        .then()
        .request(2, "http/request", stream)
        .request(3, "http/request", slow)
        .request(4, "http/request", too_slow);
    let replies = assert_same_but_errors(&scenario, |_| {}, &[4]).await;
    assert_eq!(
        replies[1]["error"]["message"],
        "http/request streamResponse requestId `stream-dup` is already active"
    );
    let timed_out = &replies[3]["error"];
    assert_eq!(timed_out["code"], -32603, "{timed_out}");
    assert!(timed_out["message"]
        .as_str()
        .unwrap()
        .starts_with("http/request failed: "));
}

/// Upstream: `exec_server_http_request_streams_response_body_notifications`: the reply (status
/// and headers, no body) comes before the `http/request/bodyDelta` notifications, which carry
/// the body in order and end with `done`.
#[tokio::test]
async fn exec_server_http_request_streams_response_body_notifications() {
    let server = HttpServer::start().await;
    let mut stream = get(&server, "/hello", "stream-1");
    stream["streamResponse"] = json!(true);
    // The slow request's reply comes 250 ms later, after the whole small body.
    let scenario = Scenario::initialized()
        .in_wire_order()
        .request(1, "http/request", stream)
        .then()
        .request(2, "http/request", get(&server, "/slow", "after"));
    let messages = assert_same(&scenario, |_| {}).await;
    assert_eq!(messages[0]["id"], 1, "{messages:?}");
}
