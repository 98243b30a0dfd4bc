//! Proof of receipt and `onRetentionFull: "pause"`: a chunk counts as received only once the
//! client read past it or answered a ping sent after its notification, so a client whose
//! connection dies, or who stays away, loses nothing of a process started with `"pause"`: the
//! daemon holds the child back instead, in bounded memory.
//!
//! These tests speak the WebSocket themselves (binary payloads): they decide when the client
//! reads, and a connection is dropped without a close frame.

use crate::common::{pid_alive, start_params, unb64, Daemon, TIMEOUT};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hasher as _};
use std::io::Read as _;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// `seq 1 30000000`: 258.9 MB.
const SEQ_END: &str = "30000000";

/// The retention budget of these daemons.
const BUDGET: u64 = 8 * 1024 * 1024;

fn daemon() -> Daemon {
    Daemon::start_with(&["--output-retention-bytes", &BUDGET.to_string()], &[])
}

fn pausing(id: &str, argv: &[&str]) -> Value {
    let mut params = start_params(id, argv);
    params["onRetentionFull"] = json!("pause");
    params
}

/// The hash and length of `argv`'s output run here.
fn local_run(argv: &[&str]) -> (u64, u64) {
    let mut child = std::process::Command::new(argv[0])
        .args(&argv[1..])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (mut hasher, mut len, mut buffer) = (DefaultHasher::new(), 0u64, vec![0; 1 << 16]);
    loop {
        let read = stdout.read(&mut buffer).unwrap();
        if read == 0 {
            break;
        }
        hasher.write(&buffer[..read]);
        len += read as u64;
    }
    assert!(child.wait().unwrap().success());
    (hasher.finish(), len)
}

/// The daemon's peak resident memory, from /proc.
fn peak_rss_kib(daemon: &Daemon) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn assert_rss_bounded(daemon: &Daemon) {
    let peak = peak_rss_kib(daemon);
    eprintln!("the daemon's peak RSS: {peak} KiB");
    assert!(peak < 128 * 1024, "the daemon's peak RSS was {peak} KiB");
}

/// A message: its JSON (a binary payload's header), and the payload (binary) or the base64
/// `chunk` of a text one.
fn decode(message: Message) -> Option<(Value, Vec<u8>)> {
    match message {
        Message::Text(text) => {
            let value: Value = serde_json::from_str(text.as_str()).unwrap();
            let chunk = value["params"]["chunk"]
                .as_str()
                .map(|_| unb64(&value["params"]["chunk"]));
            Some((value, chunk.unwrap_or_default()))
        }
        Message::Binary(bytes) => {
            let at = bytes.iter().position(|&b| b == 0).unwrap();
            Some((
                serde_json::from_slice(&bytes[..at]).unwrap(),
                bytes[at + 1..].to_vec(),
            ))
        }
        _ => None,
    }
}

async fn next(ws: &mut Ws) -> (Value, Vec<u8>) {
    loop {
        let message = tokio::time::timeout(TIMEOUT, ws.next())
            .await
            .expect("a message in time")
            .expect("the connection is open")
            .unwrap();
        if let Some(decoded) = decode(message) {
            return decoded;
        }
    }
}

async fn send(ws: &mut Ws, value: Value) {
    ws.send(Message::text(value.to_string())).await.unwrap();
}

/// A new connection, with binary payloads, creating a session or resuming `resume` (retried
/// while the daemon has not yet seen the last connection go), whose notifications of process
/// `id` go to `consumer`. Returns it and the session id.
async fn connect(
    daemon: &Daemon,
    resume: Option<&str>,
    consumer: &mut Consumer,
    id: &str,
) -> (Ws, String) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let (mut ws, _) = tokio_tungstenite::connect_async(&daemon.url).await.unwrap();
        let params = json!({"clientName": "receipt", "binaryPayloads": true,
            "resumeSessionId": resume});
        send(
            &mut ws,
            json!({"id": "init", "method": "initialize", "params": params}),
        )
        .await;
        // A resumed session's notifications may come before the reply.
        let reply = loop {
            let (value, payload) = next(&mut ws).await;
            if value["id"] == "init" {
                break value;
            }
            consumer.notification(id, &value, payload);
        };
        if reply["error"]["code"] == -32010 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let session = reply["result"]["sessionId"]
            .as_str()
            .expect("initialized")
            .to_owned();
        send(&mut ws, json!({"method": "initialized"})).await;
        return (ws, session);
    }
}

/// A process's events as one client consumes them, from notifications and `process/read`
/// replies alike, in seq order: its output hashed, each seq taken once.
struct Consumer {
    hasher: DefaultHasher,
    bytes: u64,
    /// The next seq to take.
    expected: u64,
    /// Events that came before the ones in front of them (output, or none for exit/close).
    ahead: BTreeMap<u64, Vec<u8>>,
    closed: bool,
}

impl Consumer {
    fn new() -> Self {
        Self {
            hasher: DefaultHasher::new(),
            bytes: 0,
            expected: 1,
            ahead: BTreeMap::new(),
            closed: false,
        }
    }

    /// The last seq this client decoded in order.
    fn decoded(&self) -> u64 {
        self.expected - 1
    }

    fn take(&mut self, seq: u64, data: Vec<u8>) {
        if seq < self.expected {
            return;
        }
        self.ahead.insert(seq, data);
        while let Some(data) = self.ahead.remove(&self.expected) {
            self.hasher.write(&data);
            self.bytes += data.len() as u64;
            self.expected += 1;
        }
    }

    /// A notification of process `id`: output, exited or closed.
    fn notification(&mut self, id: &str, value: &Value, payload: Vec<u8>) {
        let params = &value["params"];
        if params["processId"] != id {
            return;
        }
        let seq = params["seq"].as_u64().unwrap();
        match value["method"].as_str().unwrap() {
            "process/output" => self.take(seq, payload),
            "process/exited" => self.take(seq, Vec::new()),
            "process/closed" => {
                self.take(seq, Vec::new());
                self.closed |= self.expected > seq;
            }
            _ => {}
        }
    }

    /// A `process/read` result: never truncated.
    fn read(&mut self, result: &Value) {
        assert_eq!(
            result["truncated"],
            false,
            "output was lost: after {} firstRetainedSeq {}",
            self.decoded(),
            result["firstRetainedSeq"]
        );
        let chunks = result["chunks"].as_array().unwrap();
        for chunk in chunks {
            self.take(chunk["seq"].as_u64().unwrap(), unb64(&chunk["chunk"]));
        }
        // With no chunk left to return, `nextSeq` is after everything (the exit and the close).
        let next_seq = result["nextSeq"].as_u64().unwrap();
        if chunks.is_empty() && next_seq > self.expected {
            for seq in self.expected..next_seq {
                self.take(seq, Vec::new());
            }
        }
        self.closed |= chunks.is_empty() && result["closed"] == true;
    }

    /// Notifications until `enough` of the output is decoded (or the process closed).
    async fn notifications(&mut self, ws: &mut Ws, id: &str, enough: u64) {
        while self.bytes < enough && !self.closed {
            let (value, payload) = next(ws).await;
            if value.get("method").is_some() {
                self.notification(id, &value, payload);
            }
        }
    }

    /// Everything to the close on a resumed connection: the notifications that come, and
    /// reads from the last seq decoded for what went to the dead connection (one chunk a read,
    /// always one outstanding: each also proves receipt).
    async fn read_to_the_end(&mut self, ws: &mut Ws, id: &str) {
        let read = |after: u64| {
            json!({"id": "read", "method": "process/read", "params":
                {"processId": id, "afterSeq": after, "maxBytes": 1, "waitMs": 1000}})
        };
        send(ws, read(self.decoded())).await;
        while !self.closed {
            let (value, payload) = next(ws).await;
            if value.get("method").is_some() {
                self.notification(id, &value, payload);
            } else if value["id"] == "read" {
                self.read(&value["result"]);
                if !self.closed {
                    send(ws, read(self.decoded())).await;
                }
            }
        }
    }
}

/// Starts `id` as `params` say, on `ws`; what it sends before the reply goes to `consumer`.
async fn start(ws: &mut Ws, consumer: &mut Consumer, id: &str, params: Value) {
    send(
        ws,
        json!({"id": "start", "method": "process/start", "params": params}),
    )
    .await;
    loop {
        let (value, payload) = next(ws).await;
        if value.get("method").is_some() {
            consumer.notification(id, &value, payload);
        } else if value["id"] == "start" {
            assert!(value["result"].is_object(), "{value}");
            return;
        }
    }
}

/// Starts `seq` on `ws` with `onRetentionFull: "pause"`.
async fn start_seq(ws: &mut Ws, consumer: &mut Consumer) {
    start(ws, consumer, "seq", pausing("seq", &["seq", "1", SEQ_END])).await;
}

/// `process/list`'s entry of `id`, on a connection that reads nothing else meanwhile.
async fn listed(ws: &mut Ws, consumer: &mut Consumer, id: &str) -> Value {
    send(ws, json!({"id": "list", "method": "process/list"})).await;
    loop {
        let (value, payload) = next(ws).await;
        if value.get("method").is_some() {
            consumer.notification(id, &value, payload);
        } else if value["id"] == "list" {
            let processes = value["result"]["processes"].as_array().unwrap();
            return processes
                .iter()
                .find(|p| p["processId"] == id)
                .unwrap()
                .clone();
        }
    }
}

/// Waits (at most 30 s) until a descendant of `daemon` named `comm` stays blocked writing its
/// output pipe, which the daemon stopped reading: its pause, however loaded the machine is.
async fn paused_writer(daemon: &Daemon, comm: &str) -> bool {
    let root = daemon.pid();
    let blocked = || {
        let mut parents = std::collections::HashMap::new();
        let mut named = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            let fields = crate::common::stat_fields(&stat);
            if let Some(parent) = fields.get(1).and_then(|p| p.parse::<i32>().ok()) {
                parents.insert(pid, parent);
            }
            if stat.contains(&format!("({comm})")) {
                named.push(pid);
            }
        }
        named.into_iter().any(|pid| {
            let mut at = pid;
            while let Some(&parent) = parents.get(&at).filter(|&&p| p > 1) {
                if parent == root {
                    let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan"));
                    return wchan.is_ok_and(|w| w.contains("pipe_write"));
                }
                at = parent;
            }
            false
        })
    };
    // A writer the daemon keeps reading blocks now and then on a full pipe; a paused one stays
    // blocked: half a second of samples.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut blocked_for = 0;
    while blocked_for < 5 && tokio::time::Instant::now() < deadline {
        blocked_for = if blocked() { blocked_for + 1 } else { 0 };
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    blocked_for == 5
}

#[tokio::test]
async fn a_pausing_process_loses_nothing_while_its_client_stays_away() {
    let daemon = daemon();
    let local = tokio::task::spawn_blocking(|| local_run(&["seq", "1", SEQ_END]));
    let mut consumer = Consumer::new();
    let (mut ws, session) = connect(&daemon, None, &mut consumer, "seq").await;
    start_seq(&mut ws, &mut consumer).await;
    // Gone once started, without a close frame: what was sent to it after is never received.
    drop(ws);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        paused_writer(&daemon, "seq").await,
        "the daemon kept reading"
    );
    let (mut ws, _) = connect(&daemon, Some(&session), &mut consumer, "seq").await;
    // Not `paused` itself: the resumed connection's first pongs may already have proved receipt
    // of some of it, and the listing races them.
    let held = listed(&mut ws, &mut consumer, "seq").await;
    assert_eq!(held["state"], "running");
    let unreceived = held["unreceivedBytes"].as_u64().unwrap();
    assert!(
        (BUDGET / 2..=BUDGET + (1 << 20)).contains(&unreceived),
        "held back at the budget, not beyond: {held}"
    );
    consumer.read_to_the_end(&mut ws, "seq").await;
    assert_eq!(
        (consumer.hasher.finish(), consumer.bytes),
        local.await.unwrap()
    );
    assert_rss_bounded(&daemon);
}

#[tokio::test]
async fn a_connection_aborted_mid_stream_resumes_from_the_last_seq_decoded() {
    let daemon = daemon();
    let local = tokio::task::spawn_blocking(|| local_run(&["seq", "1", SEQ_END]));
    let mut consumer = Consumer::new();
    let (mut ws, session) = connect(&daemon, None, &mut consumer, "seq").await;
    start_seq(&mut ws, &mut consumer).await;
    consumer.notifications(&mut ws, "seq", 100_000_000).await;
    // Aborted: no close frame; what the daemon sent after the last message read is lost here.
    drop(ws);
    let decoded = consumer.decoded();
    let (mut ws, _) = connect(&daemon, Some(&session), &mut consumer, "seq").await;
    consumer.read_to_the_end(&mut ws, "seq").await;
    assert!(decoded > 1);
    assert_eq!(
        (consumer.hasher.finish(), consumer.bytes),
        local.await.unwrap()
    );
    assert_rss_bounded(&daemon);
}

/// A flood the client does not read: paused within the budget, then terminated.
#[tokio::test]
async fn a_paused_process_can_be_terminated() {
    let daemon = daemon();
    let mut consumer = Consumer::new();
    let (mut ws, _) = connect(&daemon, None, &mut consumer, "flood").await;
    start(&mut ws, &mut consumer, "flood", pausing("flood", &["yes"])).await;
    // Not reading: nothing is received, so the reader must stop at the budget.
    assert!(
        paused_writer(&daemon, "yes").await,
        "the daemon kept reading"
    );
    let held = listed(&mut ws, &mut consumer, "flood").await;
    let pid = held["pid"].as_i64().unwrap() as i32;
    send(
        &mut ws,
        json!({"id": "stop", "method": "process/terminate",
        "params": {"processId": "flood"}}),
    )
    .await;
    let exited = loop {
        let (value, _) = next(&mut ws).await;
        if value["method"] == "process/exited" && value["params"]["processId"] == "flood" {
            break value;
        }
    };
    assert_eq!(exited["params"]["reason"], "terminated", "{exited}");
    assert!(!pid_alive(pid));
    assert_rss_bounded(&daemon);
}

/// A paused process of a session that expires is ended with it.
#[tokio::test]
async fn a_paused_process_of_an_expired_session_ends() {
    let daemon = daemon();
    let (mut ws, _) = tokio_tungstenite::connect_async(&daemon.url).await.unwrap();
    let params = json!({"clientName": "receipt", "onDisconnect": "keep", "sessionTtlMs": 1500});
    send(
        &mut ws,
        json!({"id": "init", "method": "initialize", "params": params}),
    )
    .await;
    next(&mut ws).await;
    send(&mut ws, json!({"method": "initialized"})).await;
    let mut consumer = Consumer::new();
    start(&mut ws, &mut consumer, "flood", pausing("flood", &["yes"])).await;
    // Paused once its unread output fills the budget: soon, however loaded the machine.
    let mut held = Value::Null;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        held = listed(&mut ws, &mut consumer, "flood").await;
        if held["paused"] == true {
            break;
        }
    }
    assert_eq!(held["paused"], true, "{held}");
    let pid = held["pid"].as_i64().unwrap() as i32;
    drop(ws);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        pid_alive(pid),
        "held back, not ended, within the session's TTL"
    );
    crate::common::eventually("the expired session's paused process to end", || {
        !pid_alive(pid)
    })
    .await;
    assert_rss_bounded(&daemon);
}

/// `onRetentionFull` is part of what an idempotent start must repeat; `"evict"` is the default.
#[tokio::test]
async fn an_idempotent_start_compares_on_retention_full() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let start = |id: &str, mode: Option<&str>| {
        let mut params = pausing(id, &["sleep", "30"]);
        params["idempotent"] = json!(true);
        match mode {
            Some(mode) => params["onRetentionFull"] = json!(mode),
            None => drop(params.as_object_mut().unwrap().remove("onRetentionFull")),
        }
        params
    };
    client
        .call("process/start", start("p", Some("pause")))
        .await;
    let again = client
        .call("process/start", start("p", Some("pause")))
        .await;
    assert_eq!(again["existing"], true);
    let error = client
        .request("process/start", start("p", Some("evict")))
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32011);
    assert_eq!(error["data"]["fields"], json!(["onRetentionFull"]));
    client.call("process/start", start("q", None)).await;
    let same = client
        .call("process/start", start("q", Some("evict")))
        .await;
    assert_eq!(same["existing"], true, "\"evict\" is the default");
    let listed = client.call("process/list", json!({})).await;
    let p = &listed["processes"][0];
    assert_eq!(
        (&p["paused"], &p["retainedBytes"], &p["unreceivedBytes"]),
        (&json!(false), &json!(0), &json!(0))
    );
    for id in ["p", "q"] {
        client
            .call("process/terminate", json!({"processId": id}))
            .await;
    }
}
