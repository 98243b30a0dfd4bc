//! The connection loop and router in-process, over an in-memory pipe with the stdio framing
//! (one JSON value per line): what needs no real socket or binary.

use super::routes::ROUTER;
use crate::config::{Args, Config};
use crate::transport::stdio::serve_lines;
use clap::Parser as _;
use exec_server_protocol::methods;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, DuplexStream, Lines};
use tokio::io::{ReadHalf, WriteHalf};
use tokio::net::TcpListener;

/// A client on one end of the pipe, the daemon's connection loop on the other.
struct Client {
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    writer: WriteHalf<DuplexStream>,
}

fn config() -> Config {
    let mut config = Args::parse_from(["exec-server"]).config().unwrap();
    config.max_message_bytes = 1024;
    config
}

impl Client {
    fn connect() -> Self {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (input, output) = tokio::io::split(theirs);
        tokio::spawn(serve_lines(
            input,
            output,
            super::Daemon::new(config(), Default::default(), None),
        ));
        let (reader, writer) = tokio::io::split(ours);
        Self {
            lines: BufReader::new(reader).lines(),
            writer,
        }
    }

    async fn send_line(&mut self, line: &str) {
        self.writer.write_all(line.as_bytes()).await.unwrap();
        self.writer.write_all(b"\n").await.unwrap();
    }

    async fn send(&mut self, message: Value) {
        self.send_line(&message.to_string()).await;
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
            .await
            .expect("a message within 10 s")
            .unwrap()
            .expect("the connection is open");
        serde_json::from_str(&line).unwrap()
    }

    async fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"id": id, "method": method, "params": params}))
            .await;
        let reply = self.recv().await;
        assert_eq!(reply["id"], id, "{reply}");
        reply
    }

    async fn handshake(&mut self) {
        let reply = self.call(0, "initialize", json!({"clientName": "t"})).await;
        assert!(reply["result"]["sessionId"].is_string(), "{reply}");
        self.send(json!({"method": "initialized"})).await;
    }
}

fn error(reply: &Value) -> (i64, &str) {
    let error = &reply["error"];
    (
        error["code"].as_i64().unwrap(),
        error["message"].as_str().unwrap(),
    )
}

#[test]
fn every_method_of_the_table_but_initialize_has_a_handler() {
    for method in methods::REQUESTS {
        assert_eq!(
            ROUTER.serves(method),
            *method != methods::names::INITIALIZE,
            "{method}"
        );
    }
}

#[tokio::test]
async fn bad_lines_are_answered_in_order_and_the_connection_goes_on() {
    let mut client = Client::connect();
    client.send_line("").await;
    client.send_line("{not json").await;
    client.send_line("[]").await;
    let parse = client.recv().await;
    assert_eq!(parse["id"], -1);
    let (code, message) = error(&parse);
    assert_eq!(code, -32600);
    assert!(
        message.starts_with("failed to parse JSON-RPC message from stdio: "),
        "{message}"
    );
    let empty_batch = client.recv().await;
    assert_eq!(
        error(&empty_batch),
        (-32600, "JSON-RPC batch must not be empty")
    );
    client.handshake().await;
    client.send_line(&"x".repeat(2000)).await;
    let oversized = client.recv().await;
    assert_eq!(oversized["id"], -1);
    assert_eq!(
        error(&oversized),
        (-32600, "JSON-RPC message exceeds the limit of 1024 bytes")
    );
    // The rest of the over-long line is skipped, and the next line is served.
    let info = client.call(7, "environment/info", json!({})).await;
    assert_eq!(info["id"], 7, "{info}");
    assert!(info.get("result").is_some(), "{info}");
}

#[tokio::test]
async fn errors_carry_the_reference_codes() {
    let mut client = Client::connect();
    let early = client.call(1, "fs/readFile", json!({})).await;
    assert_eq!(
        error(&early),
        (
            -32600,
            "client must call initialize before using filesystem methods"
        )
    );
    client
        .call(2, "initialize", json!({"clientName": "t"}))
        .await;
    let before_initialized = client.call(3, "environment/status", json!(null)).await;
    assert_eq!(
        error(&before_initialized),
        (
            -32600,
            "client must send initialized before using environment status methods"
        )
    );
    client.send(json!({"method": "initialized"})).await;
    let unknown = client.call(4, "process/explode", json!({})).await;
    assert_eq!(
        error(&unknown),
        (
            -32601,
            "exec-server stub does not implement `process/explode` yet"
        )
    );
    let bad_params = client.call(5, "fs/getMetadata", json!({"path": 7})).await;
    assert_eq!(error(&bad_params).0, -32602);
    let long_id = client
        .call(6, "process/read", json!({"processId": "p".repeat(257)}))
        .await;
    assert_eq!(
        error(&long_id),
        (
            -32602,
            "processId is 257 bytes long; the limit is 256 bytes"
        )
    );
    // `{}` serves a method that takes no params.
    let status = client.call(7, "environment/status", json!({})).await;
    assert_eq!(status["result"], json!({"status": "ready"}));
}

/// An HTTP server on loopback that answers each request with `body`, after `delay`.
async fn http_server(body: &'static str, delay: Duration) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut request = [0; 4096];
                let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut request).await;
                tokio::time::sleep(delay).await;
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    format!("http://{address}/")
}

#[tokio::test]
async fn a_streamed_body_follows_its_reply_even_in_a_batch() {
    let url = http_server("hello", Duration::ZERO).await;
    let mut client = Client::connect();
    client.handshake().await;
    let request =
        |id: &str| json!({"method": "GET", "url": url, "requestId": id, "streamResponse": true});
    let reply = client.call(1, "http/request", request("single")).await;
    assert_eq!(reply["result"]["status"], 200, "{reply}");
    let first = client.recv().await;
    assert_eq!(first["method"], "http/request/bodyDelta");
    assert_eq!(first["params"]["requestId"], "single");

    // The rest of the first stream, then the batch.
    let mut done = first["params"]["done"] == true;
    while !done {
        done = client.recv().await["params"]["done"] == true;
    }
    client
        .send(json!([
            {"jsonrpc": "2.0", "id": 2, "method": "http/request", "params": request("a")},
            {"jsonrpc": "2.0", "id": 3, "method": "http/request", "params": request("b")},
        ]))
        .await;
    let batch = client.recv().await;
    assert_eq!(batch[0]["id"], 2, "{batch}");
    assert_eq!(batch[1]["id"], 3, "{batch}");
    let next = client.recv().await;
    assert_eq!(next["method"], "http/request/bodyDelta", "{next}");
}

#[tokio::test]
async fn an_id_in_flight_is_refused_until_its_reply() {
    let url = http_server("slow", Duration::from_millis(500)).await;
    let mut client = Client::connect();
    client.handshake().await;
    let request = json!({"id": 9, "method": "http/request",
        "params": {"method": "GET", "url": url, "requestId": "r"}});
    client.send(request.clone()).await;
    client.send(request.clone()).await;
    let refused = client.recv().await;
    assert_eq!(
        error(&refused),
        (
            -32600,
            "request id 9 is already in flight on this connection"
        )
    );
    let answered = client.recv().await;
    assert_eq!(answered["result"]["status"], 200, "{answered}");
    // Answered, the id is free again.
    client.send(request).await;
    assert_eq!(client.recv().await["result"]["status"], 200);
}
