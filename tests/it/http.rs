//! `http/request` end to end: the real daemon makes requests to a local test server.

use crate::common;

use common::http_server::{big_body, HttpServer};
use common::*;
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

fn get(url: &str, request_id: &str) -> Value {
    json!({"method": "GET", "url": url, "requestId": request_id})
}

fn streamed(url: &str, request_id: &str) -> Value {
    let mut params = get(url, request_id);
    params["streamResponse"] = json!(true);
    params
}

fn header<'a>(result: &'a Value, name: &str) -> Vec<&'a str> {
    result["headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["name"] == name)
        .map(|h| h["value"].as_str().unwrap())
        .collect()
}

/// Collects the deltas of one stream up to its terminal frame, checking seq runs from 1.
async fn deltas_until_done(client: &Client, request_id: &str) -> Vec<Value> {
    let mut deltas: Vec<Value> = Vec::new();
    loop {
        let event = client.next_notification().await;
        assert_eq!(event["method"], "http/request/bodyDelta");
        let params = event["params"].clone();
        if params["requestId"] != request_id {
            continue;
        }
        assert_eq!(params["seq"], deltas.len() as u64 + 1, "seq is contiguous");
        let done = params["done"] == true;
        deltas.push(params);
        if done {
            return deltas;
        }
    }
}

/// A bare WebSocket, to see the order of replies and notifications.
struct RawClient {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
}

impl RawClient {
    /// Connected and through the handshake.
    async fn connect(daemon: &Daemon) -> Self {
        let (ws, _) = tokio_tungstenite::connect_async(&daemon.url).await.unwrap();
        let mut raw = Self { ws };
        raw.send(json!({"id": 1, "method": "initialize", "params": {"clientName": "raw"}}))
            .await;
        assert_eq!(raw.next().await["id"], 1);
        raw.send(json!({"method": "initialized", "params": {}}))
            .await;
        raw
    }

    async fn send(&mut self, message: Value) {
        self.ws
            .send(Message::text(message.to_string()))
            .await
            .unwrap();
    }

    async fn next(&mut self) -> Value {
        loop {
            let message = tokio::time::timeout(TIMEOUT, self.ws.next())
                .await
                .expect("message in time")
                .expect("connection open")
                .unwrap();
            if let Message::Text(text) = message {
                return serde_json::from_str(text.as_str()).unwrap();
            }
        }
    }
}

/// A port nothing listens on.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn buffered_post_returns_status_headers_and_body() {
    let server = HttpServer::start().await;
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let result = client
        .call(
            "http/request",
            json!({
                "method": "POST",
                "url": server.url("/echo"),
                "headers": [
                    {"name": "X-Echo", "value": "first"},
                    {"name": "x-echo", "value": "second"},
                    {"name": "content-type", "value": "text/plain"}
                ],
                "bodyBase64": b64(b"request body"),
                "requestId": "post-1"
            }),
        )
        .await;
    assert_eq!(result["status"], 201);
    assert_eq!(header(&result, "x-method"), ["POST"]);
    assert_eq!(header(&result, "x-echo"), ["first", "second"]);
    assert_eq!(unb64(&result["bodyBase64"]), b"request body");
    for h in result["headers"].as_array().unwrap() {
        let name = h["name"].as_str().unwrap();
        assert_eq!(name, name.to_ascii_lowercase());
    }
}

#[tokio::test]
async fn header_values_can_come_from_the_daemon_environment() {
    let server = HttpServer::start().await;
    let daemon = Daemon::start_with(&[], &[("EXEC_TEST_SECRET", "s3cret")]);
    let (client, _) = daemon.session().await;
    let mut params = get(&server.url("/echo"), "env");
    params["headers"] = json!([
        {"name": "authorization", "value": "Bearer ", "valueEnvVar": "EXEC_TEST_SECRET"}
    ]);
    let result = client.call("http/request", params.clone()).await;
    assert_eq!(header(&result, "x-authorization"), ["Bearer s3cret"]);

    params["headers"][0]["valueEnvVar"] = json!("EXEC_TEST_UNSET");
    let error = client.request("http/request", params).await.unwrap_err();
    assert_eq!(
        error,
        json!({"code": -32602, "message": "http/request header authorization requires executor environment variable EXEC_TEST_UNSET"})
    );
}

#[tokio::test]
async fn the_daemon_token_reaches_neither_headers_nor_children() {
    let server = HttpServer::start().await;
    let token = "s3cret-daemon-token";
    let daemon = Daemon::start_with(
        &[],
        &[
            ("EXEC_SERVER_CONNECTION_TOKEN", token),
            ("CODEX_EXEC_SERVER_CONNECTION_TOKEN", token),
        ],
    );
    let client = Client::connect_with_token(&daemon.url, token).await;
    client.initialize(None).await.unwrap();
    for var in [
        "EXEC_SERVER_CONNECTION_TOKEN",
        "CODEX_EXEC_SERVER_CONNECTION_TOKEN",
    ] {
        let mut params = get(&server.url("/echo"), "token");
        params["headers"] =
            json!([{"name": "authorization", "value": "Bearer ", "valueEnvVar": var}]);
        let error = client.request("http/request", params).await.unwrap_err();
        let message = format!(
            "http/request header authorization cannot use executor environment variable {var}"
        );
        assert_eq!(error, json!({"code": -32602, "message": message}));
    }
    assert_eq!(server.hits(), 0, "nothing was sent");
    let mut params = start_params("env", &["cat", "/proc/self/environ"]);
    params["envPolicy"] = json!({"inherit": "all", "ignoreDefaultExcludes": true, "exclude": [], "set": {}, "includeOnly": []});
    client.call("process/start", params).await;
    let environ = output_of(&client.events_until_closed("env").await);
    assert!(
        String::from_utf8_lossy(&environ).contains("PATH="),
        "the child inherited the daemon's environment"
    );
    assert!(!String::from_utf8_lossy(&environ).contains(token));
}

#[tokio::test]
async fn streamed_body_follows_the_reply_in_ordered_deltas() {
    let server = HttpServer::start().await;
    let daemon = Daemon::start();
    let mut raw = RawClient::connect(&daemon).await;
    raw.send(
        json!({"id": 2, "method": "http/request", "params": streamed(&server.url("/big"), "big")}),
    )
    .await;
    let mut next = async || raw.next().await;
    let reply = next().await;
    assert_eq!(reply["id"], 2, "the reply comes before any delta: {reply}");
    assert_eq!(reply["result"]["status"], 200);
    assert_eq!(reply["result"]["bodyBase64"], "");
    assert_eq!(
        header(&reply["result"], "content-length"),
        [big_body().len().to_string()]
    );

    let mut body = Vec::new();
    let mut seq = 0;
    let terminal = loop {
        let delta = next().await;
        assert_eq!(delta["method"], "http/request/bodyDelta");
        let params = &delta["params"];
        seq += 1;
        assert_eq!(params["requestId"], "big");
        assert_eq!(params["seq"], seq, "seq runs from 1 without gaps");
        if params["done"] == true {
            break params.clone();
        }
        assert_eq!(params["error"], Value::Null);
        let piece = unb64(&params["deltaBase64"]);
        assert!(!piece.is_empty() && piece.len() <= 1024 * 1024);
        body.extend(piece);
    };
    assert!(seq > 3, "a multi-MiB body spans several deltas (got {seq})");
    assert_eq!(terminal["deltaBase64"], "");
    assert_eq!(terminal["error"], Value::Null);
    assert!(body == big_body(), "the body arrives byte for byte");
}

#[tokio::test]
async fn in_a_batch_deltas_follow_the_batch_reply() {
    let server = HttpServer::start().await;
    let daemon = Daemon::start();
    let mut raw = RawClient::connect(&daemon).await;
    // The slow member holds the batch reply back while the stream's body is already there.
    raw.send(json!([
        {"jsonrpc": "2.0", "id": 2, "method": "http/request",
            "params": streamed(&server.url("/hello"), "h")},
        {"jsonrpc": "2.0", "id": 3, "method": "http/request",
            "params": get(&server.url("/slow"), "slow")}
    ]))
    .await;
    let batch = raw.next().await;
    assert!(batch.is_array(), "the batch reply comes first: {batch}");
    assert_eq!(batch[0]["result"]["status"], 200);
    assert_eq!(unb64(&batch[1]["result"]["bodyBase64"]), b"slow");
    let first = raw.next().await;
    assert_eq!(first["params"]["seq"], 1);
    assert_eq!(unb64(&first["params"]["deltaBase64"]), b"hello world");
    assert_eq!(raw.next().await["params"]["done"], true);
}

#[tokio::test]
async fn redirects_are_followed_by_default_and_stop_returns_the_3xx() {
    let server = HttpServer::start().await;
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let mut params = get(&server.url("/redirect"), "r");
    params["redirectPolicy"] = json!("stop");
    let stopped = client.call("http/request", params).await;
    assert_eq!(stopped["status"], 302);
    assert_eq!(header(&stopped, "location"), ["/target"]);
    assert_eq!(server.hits(), 0, "stop never reaches the target");

    let followed = client
        .call("http/request", get(&server.url("/redirect"), "r"))
        .await;
    assert_eq!(followed["status"], 200);
    assert_eq!(unb64(&followed["bodyBase64"]), b"target");
    assert_eq!(server.hits(), 1);

    let mut params = get(&server.url("/redirect"), "r");
    params["redirectPolicy"] = json!("follow");
    client.call("http/request", params).await;
    assert_eq!(server.hits(), 2);
}

#[tokio::test]
async fn a_redirect_never_takes_a_loopback_request_off_loopback() {
    let server = HttpServer::start().await;
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let error = client
        .request("http/request", get(&server.url("/redirect-away"), "away"))
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32603);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("http/request failed: ")
            && message.contains("a redirect from a loopback URL to another host is not followed"),
        "{message}"
    );
}

#[tokio::test]
async fn timeout_is_a_total_deadline_and_absent_or_null_means_none() {
    let server = HttpServer::start().await;
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let mut params = get(&server.url("/slow"), "t");
    params["timeoutMs"] = json!(50);
    let error = client
        .request("http/request", params.clone())
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32603);
    let message = error["message"].as_str().unwrap();
    assert!(message.starts_with("http/request failed: "), "{message}");
    assert!(message.contains("timed out"), "{message}");

    for timeout in [None, Some(Value::Null), Some(json!(u64::MAX))] {
        let mut params = get(&server.url("/slow"), "t");
        if let Some(timeout) = timeout {
            params["timeoutMs"] = timeout;
        }
        let result = client.call("http/request", params).await;
        assert_eq!(unb64(&result["bodyBase64"]), b"slow");
    }

    // A streamed body is under the same deadline: it ends with an error frame.
    let mut params = streamed(&server.url("/endless"), "s");
    params["timeoutMs"] = json!(200);
    assert_eq!(client.call("http/request", params).await["status"], 200);
    let deltas = deltas_until_done(&client, "s").await;
    let terminal = deltas.last().unwrap();
    let error = terminal["error"].as_str().unwrap();
    assert!(
        error.starts_with("failed to read http/request response body: "),
        "{error}"
    );
    assert_eq!(terminal["deltaBase64"], "");
}

#[tokio::test]
async fn an_active_stream_id_is_refused_until_its_terminal_frame() {
    let server = HttpServer::start().await;
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let endless = streamed(&server.url("/endless"), "dup");
    assert_eq!(
        client.call("http/request", endless.clone()).await["status"],
        200
    );
    let error = client.request("http/request", endless).await.unwrap_err();
    assert_eq!(
        error,
        json!({"code": -32602, "message": "http/request streamResponse requestId `dup` is already active"})
    );
    // Streams run in the background: other requests, even with the same id, go on.
    let buffered = client
        .call("http/request", get(&server.url("/hello"), "dup"))
        .await;
    assert_eq!(unb64(&buffered["bodyBase64"]), b"hello world");

    // A finished stream frees its id at once.
    let hello = streamed(&server.url("/hello"), "once");
    for _ in 0..2 {
        client.call("http/request", hello.clone()).await;
        let deltas = deltas_until_done(&client, "once").await;
        let body: Vec<u8> = deltas
            .iter()
            .flat_map(|d| unb64(&d["deltaBase64"]))
            .collect();
        assert_eq!(body, b"hello world");
        assert_eq!(deltas.last().unwrap()["error"], Value::Null);
    }
}

#[tokio::test]
async fn a_stream_stops_when_its_connection_drops() {
    let server = HttpServer::start().await;
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    // Headers, then silence: nothing but the connection ending can stop this stream.
    let result = client
        .call("http/request", streamed(&server.url("/stall"), "s"))
        .await;
    assert_eq!(result["status"], 200);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.bodies_dropped(), 0);
    client.abort();
    eventually("the daemon to drop the streamed response", || {
        server.bodies_dropped() == 1
    })
    .await;
}

#[tokio::test]
async fn literal_loopback_bypasses_ambient_proxies() {
    let server = HttpServer::start().await;
    let proxy = format!("http://127.0.0.1:{}", dead_port());
    let vars = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ];
    let env: Vec<(&str, &str)> = vars.iter().map(|var| (*var, proxy.as_str())).collect();
    let daemon = Daemon::start_with(&[], &env);
    let (client, _) = daemon.session().await;
    let port = server.base.rsplit(':').next().unwrap();
    for url in [
        server.url("/hello"),
        format!("http://localhost:{port}/hello"),
    ] {
        let result = client.call("http/request", get(&url, "l")).await;
        assert_eq!(unb64(&result["bodyBase64"]), b"hello world", "{url}");
    }
    // Any other host still goes through the (dead) proxy: refused at once, not a timeout.
    let mut params = get("http://10.255.255.1/", "p");
    params["timeoutMs"] = json!(5000);
    let error = client.request("http/request", params).await.unwrap_err();
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("Connection refused"), "{message}");
}

#[tokio::test]
async fn invalid_requests_are_invalid_params_and_failures_internal() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let base = get("http://127.0.0.1:1/", "v");
    let cases = [
        (
            json!({"method": "GE T"}),
            "http/request method is invalid: invalid HTTP method",
        ),
        (
            json!({"url": "/relative"}),
            "http/request url is invalid: relative URL without a base",
        ),
        (
            json!({"url": "file:///etc/passwd"}),
            "http/request only supports http and https URLs, got file",
        ),
        (
            json!({"headers": [{"name": "bad name", "value": "v"}]}),
            "http/request header name is invalid: invalid HTTP header name",
        ),
        (
            json!({"headers": [{"name": "x-a", "value": "a\r\nb"}]}),
            "http/request header value is invalid for x-a: failed to parse header value",
        ),
    ];
    for (change, message) in cases {
        let mut params = base.clone();
        params
            .as_object_mut()
            .unwrap()
            .extend(change.as_object().unwrap().clone());
        let error = client.request("http/request", params).await.unwrap_err();
        assert_eq!(error, json!({"code": -32602, "message": message}));
    }
    for params in [
        json!({"method": "GET", "url": "http://127.0.0.1:1/"}),
        json!({"method": "GET", "url": "http://127.0.0.1:1/", "requestId": "v", "bodyBase64": "!!"}),
        json!({"method": "GET", "url": "http://127.0.0.1:1/", "requestId": "v", "redirectPolicy": "sometimes"}),
    ] {
        let error = client.request("http/request", params).await.unwrap_err();
        assert_eq!(error["code"], -32602, "{error}");
    }
    let error = client
        .request(
            "http/request",
            get(&format!("http://127.0.0.1:{}/", dead_port()), "v"),
        )
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32603);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("http/request failed: ") && message.contains("Connection refused"),
        "{message}"
    );
    // A refused stream frees its id.
    let mut params = streamed(&format!("http://127.0.0.1:{}/", dead_port()), "v");
    client
        .request("http/request", params.clone())
        .await
        .unwrap_err();
    params["url"] = json!(format!("http://127.0.0.1:{}/", dead_port()));
    let error = client.request("http/request", params).await.unwrap_err();
    assert_eq!(error["code"], -32603, "not refused as a duplicate: {error}");
}

#[tokio::test]
async fn no_delta_arrives_for_a_buffered_request() {
    let server = HttpServer::start().await;
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    client
        .call("http/request", get(&server.url("/hello"), "b"))
        .await;
    assert!(client
        .try_next_notification(Duration::from_millis(100))
        .await
        .is_none());
}

#[tokio::test]
async fn https_runs_the_tls_handshake() {
    // The test server speaks plain HTTP, so the rustls handshake itself must fail, cleanly.
    let server = HttpServer::start().await;
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let url = server.url("/hello").replacen("http://", "https://", 1);
    let error = client
        .request("http/request", get(&url, "tls"))
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32603);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("http/request failed: ") && message.contains("InvalidContentType"),
        "a TLS error, from rustls: {message}"
    );
}

#[tokio::test]
async fn a_buffered_body_over_the_cap_is_refused_and_names_streaming() {
    let server = HttpServer::start().await;
    let daemon = Daemon::start_with(&["--max-http-body-bytes", "1048576"], &[]);
    let (client, _) = daemon.session().await;
    let error = client
        .request("http/request", get(&server.url("/big"), "b"))
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32600, "{error}");
    assert_eq!(
        error["message"],
        "http/request response body exceeds the limit of 1048576 bytes for a buffered response; \
         send the request with streamResponse: true to receive the body as \
         http/request/bodyDelta notifications"
    );
    // Small bodies are still buffered, and the big one streams.
    let hello = client
        .call("http/request", get(&server.url("/hello"), "h"))
        .await;
    assert_eq!(unb64(&hello["bodyBase64"]), b"hello world");
    client
        .call("http/request", streamed(&server.url("/big"), "s"))
        .await;
    let body: Vec<u8> = deltas_until_done(&client, "s")
        .await
        .iter()
        .flat_map(|delta| unb64(&delta["deltaBase64"]))
        .collect();
    assert_eq!(body, big_body());
}
