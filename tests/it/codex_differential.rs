//! The same wire scenario against this daemon and against codex's own exec-server
//! (`common::codex_peer`), replies compared: where upstream changes, a test here shows the diff.
//!
//! A [`Scenario`] is a list of frames sent back to back (pipelined, as a client may), optionally
//! after a completed handshake, then the messages read until the expected number of replies
//! came. Each daemon gets a fresh fixture directory built by the test; `{root}` in the frames
//! stands for it, and in the replies the directory, the peer's address and any session id are
//! replaced by placeholders, so the two lists compare as values. The ports of upstream's own
//! `codex-rs/exec-server/tests/` live in the submodules, each named after the upstream test it
//! follows; `codex_differential/UPSTREAM.md` maps every upstream test to its port here, or says
//! why it cannot run.

mod decoder;
mod discover_v2;
mod environment;
mod environment_config;
mod fs_escapes;
mod fs_sandboxed;
mod fs_shared;
mod fs_stream;
mod fs_walk;
mod fs_watch_missing;
mod handshake;
mod http;
mod http_env;
pub(crate) mod network_proxy;
mod no_follow;
mod process;
mod process_sandbox;
mod root_write;
mod shell_snapshot;

use crate::common::codex_peer::CodexPeer;
use crate::common::{Daemon, TIMEOUT};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use std::path::Path;
use tokio_tungstenite::tungstenite::Message;

/// What a scenario sends and how many replies it waits for.
#[derive(Clone, Default)]
pub struct Scenario {
    handshake: bool,
    /// Text frames, each with the number of replies expected once it was answered; None
    /// waits for every reply so far before sending on.
    frames: Vec<Option<(String, usize)>>,
    replies: usize,
    /// Whether the order of replies is part of what is compared. This daemon runs requests
    /// concurrently once the handshake is done, so by default replies are compared by id.
    wire_order: bool,
    /// Whether notifications are compared: a process's own come whenever it runs.
    skip_notifications: bool,
}

impl Scenario {
    /// Frames sent on a fresh connection, before any handshake.
    pub fn raw() -> Self {
        Self::default()
    }

    /// Frames sent once `initialize` was answered and `initialized` sent.
    pub fn initialized() -> Self {
        Self {
            handshake: true,
            ..Self::default()
        }
    }

    /// Compares the replies in the order they came, not by id.
    pub fn in_wire_order(mut self) -> Self {
        self.wire_order = true;
        self
    }

    /// Compares the replies only, not the notifications that came between them.
    pub fn replies_only(mut self) -> Self {
        self.skip_notifications = true;
        self
    }

    /// A request; its reply is awaited.
    pub fn request(self, id: i64, method: &str, params: Value) -> Self {
        self.frame(
            json!({"id": id, "method": method, "params": params}).to_string(),
            1,
        )
    }

    /// A notification; nothing is awaited for it.
    pub fn notify(self, method: &str, params: Value) -> Self {
        self.frame(json!({"method": method, "params": params}).to_string(), 0)
    }

    /// Any text frame, answered by `replies` messages.
    pub fn frame(mut self, text: impl Into<String>, replies: usize) -> Self {
        self.replies += replies;
        self.frames.push(Some((text.into(), self.replies)));
        self
    }

    /// Waits for every reply so far before the next frame: what comes after depends on it.
    pub fn then(mut self) -> Self {
        self.frames.push(None);
        self
    }

    /// Runs against the daemon at `url` with `{root}` standing for `root`; the messages that
    /// came back, in wire order, normalised.
    pub async fn run(&self, url: &str, root: &Path) -> Vec<Value> {
        let root = root.to_str().expect("fixture paths are UTF-8");
        let (mut ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("connect");
        if self.handshake {
            let initialize = json!({"id": 0, "method": "initialize",
                "params": {"clientName": "differential"}});
            ws.send(Message::text(initialize.to_string()))
                .await
                .unwrap();
            next_message(&mut ws).await;
            let initialized = json!({"method": "initialized", "params": {}});
            ws.send(Message::text(initialized.to_string()))
                .await
                .unwrap();
        }
        let mut messages = Vec::new();
        let (mut replies, mut sent) = (0, 0);
        for frame in self.frames.iter().chain([&None]) {
            match frame {
                Some((text, expected)) => {
                    let text = text.replace("{root}", root);
                    ws.send(Message::text(text)).await.expect("send");
                    sent = *expected;
                }
                None => {
                    while replies < sent {
                        let message = next_message(&mut ws).await;
                        let is_reply = message.get("id").is_some();
                        replies += usize::from(is_reply);
                        if is_reply || !self.skip_notifications {
                            messages.push(normalise(message, root));
                        }
                    }
                }
            }
        }
        if !self.wire_order {
            // Stable: id -1 errors (undecodable messages) keep their order.
            messages.sort_by_key(|m| m["id"].as_i64());
        }
        messages
    }
}

async fn next_message(
    ws: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
) -> Value {
    loop {
        let message = tokio::time::timeout(TIMEOUT, ws.next())
            .await
            .expect("a reply in time")
            .expect("connection open")
            .expect("a message");
        if let Message::Text(text) = message {
            return serde_json::from_str(&text).expect("replies are JSON");
        }
    }
}

/// Result members only this daemon sends, documented extensions a codex client ignores
/// (docs/protocol.md: `fs/writeBlock`, `process/read`).
const EXTENSION_MEMBERS: &[&str] = &[
    "nextOffset",
    "firstRetainedSeq",
    "truncated",
    "reason",
    "signal",
    "usage",
    "cleanupUnconfirmed",
    "liveDescendants",
    "waitingForInput",
    "retainedBytes",
    "unreceivedBytes",
    "paused",
    "sandboxBackend",
];

/// The fixture directory, the peer address, timestamps and initialize results replaced by
/// placeholders; an error's `data` and the [`EXTENSION_MEMBERS`] left out.
fn normalise(message: Value, root: &str) -> Value {
    let text = message.to_string().replace(root, "{root}");
    let peer = regex_lite_replace(&text, "127.0.0.1:");
    let mut value: Value = serde_json::from_str(&peer).unwrap();
    if let Some(error) = value.get_mut("error").and_then(Value::as_object_mut) {
        error.remove("data");
    }
    if let Some(result) = value.get_mut("result").and_then(Value::as_object_mut) {
        result.retain(|member, _| !EXTENSION_MEMBERS.contains(&member.as_str()));
        for (member, time) in result.iter_mut() {
            if member.ends_with("AtMs") {
                *time = json!("{time}");
            }
        }
    }
    // An HTTP response's `date` header says when, not what.
    if let Some(headers) = value
        .pointer_mut("/result/headers")
        .and_then(Value::as_array_mut)
    {
        for header in headers.iter_mut().filter(|h| h["name"] == "date") {
            header["value"] = json!("{date}");
        }
    }
    // An initialize result describes each daemon's own environment: only its shape compares.
    if let Some(result) = value
        .get_mut("result")
        .filter(|r| r.get("sessionId").is_some())
    {
        *result = json!({"sessionId": "{session}"});
    }
    value
}

/// `127.0.0.1:<port>` → `{peer}`, without a regex dependency for one pattern.
fn regex_lite_replace(text: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        out.push_str(&rest[..at]);
        let after = &rest[at + prefix.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        out.push_str(if digits > 0 { "{peer}" } else { prefix });
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

/// This daemon and codex's own, for a test that drives each in turn with a client of its own;
/// both live as long as this.
pub struct Both {
    ours: Daemon,
    codex: CodexPeer,
}

impl Both {
    pub fn start() -> Self {
        Self {
            ours: Daemon::start(),
            codex: CodexPeer::start(&[]),
        }
    }

    /// Their URLs, ours first.
    pub fn urls(&self) -> [&str; 2] {
        [&self.ours.url, &self.codex.url]
    }

    /// `ours` beside codex's server.
    pub fn with_ours(ours: Daemon) -> Self {
        Self {
            ours,
            codex: CodexPeer::start(&[]),
        }
    }

    /// This daemon's pid.
    pub fn ours_pid(&self) -> i32 {
        self.ours.pid()
    }
}

/// A client of the daemon at `url` that finished the handshake.
pub async fn handshaken(url: &str) -> crate::common::Client {
    let client = crate::common::Client::connect(url).await;
    client.initialize(None).await.expect("initialize");
    client
}

/// Both daemons' messages for `scenario`, each with its own fixture built by `fixture`:
/// `(ours, codex)`.
pub async fn run_both(scenario: &Scenario, fixture: impl Fn(&Path)) -> (Vec<Value>, Vec<Value>) {
    let ours = Daemon::start();
    let codex = CodexPeer::start(&[]);
    run_on(scenario, fixture, &ours, &codex).await
}

/// [`run_both`] with extra arguments (the flags both CLIs share) and environment for both
/// daemons.
pub async fn run_both_with(
    scenario: &Scenario,
    fixture: impl Fn(&Path),
    args: &[&str],
    env: &[(&str, &str)],
) -> (Vec<Value>, Vec<Value>) {
    let ours = Daemon::start_with(args, env);
    let codex = CodexPeer::start_with(args, env);
    run_on(scenario, fixture, &ours, &codex).await
}

/// [`run_both`] with both daemons running as `nobody`, where file modes bite (root bypasses
/// them): the fixture must make what it builds reachable by that user.
pub async fn run_both_unprivileged(
    scenario: &Scenario,
    fixture: impl Fn(&Path),
) -> (Vec<Value>, Vec<Value>) {
    let (ours, _binary) = Daemon::start_unprivileged();
    let codex = CodexPeer::start_unprivileged();
    run_on(scenario, fixture, &ours, &codex).await
}

async fn run_on(
    scenario: &Scenario,
    fixture: impl Fn(&Path),
    ours: &Daemon,
    codex: &CodexPeer,
) -> (Vec<Value>, Vec<Value>) {
    let mut lists = Vec::new();
    for url in [&ours.url, &codex.url] {
        let root = crate::common::scratch_dir();
        fixture(root.path());
        lists.push(scenario.run(url, root.path()).await);
    }
    let codex = lists.pop().unwrap();
    (lists.pop().unwrap(), codex)
}

/// Runs `scenario` on both and asserts the same messages came back; returns them.
pub async fn assert_same(scenario: &Scenario, fixture: impl Fn(&Path)) -> Vec<Value> {
    let (ours, codex) = run_both(scenario, fixture).await;
    assert_equal(&ours, &codex);
    ours
}

/// [`assert_same`], except that the replies to `named` ids need only both be errors: where
/// ours names the cause and upstream passes the kernel's text on (docs/protocol.md, deliberate
/// differences). Returns ours.
pub async fn assert_same_but_errors(
    scenario: &Scenario,
    fixture: impl Fn(&Path),
    named: &[i64],
) -> Vec<Value> {
    let (ours, codex) = run_both(scenario, fixture).await;
    let blur = |messages: &[Value]| -> Vec<Value> {
        let blurred = messages.iter().map(|message| match message["id"].as_i64() {
            Some(id) if named.contains(&id) && message.get("error").is_some() => {
                json!({"id": id, "error": "{named}"})
            }
            _ => message.clone(),
        });
        blurred.collect()
    };
    assert_equal(&blur(&ours), &blur(&codex));
    ours
}

/// Asserts that both daemons sent the same messages, showing both lists when not.
pub fn assert_equal(ours: &[Value], codex: &[Value]) {
    assert_eq!(
        ours,
        codex,
        "ours:\n{}\ncodex:\n{}",
        lines(ours),
        lines(codex)
    );
}

pub fn lines(messages: &[Value]) -> String {
    messages
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `path` under the fixture directory, as a wire path.
pub fn at(path: &str) -> String {
    format!("file://{{root}}/{path}")
}

/// A FIFO at `path` that nobody writes to.
pub fn mkfifo(path: &Path) {
    let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo touches nothing else.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
}

/// No fixture: the scenario touches no files.
pub fn nothing(_: &Path) {}

#[tokio::test]
async fn an_unknown_method_is_refused_alike() {
    let scenario = Scenario::initialized().request(1, "nosuch/method", json!({}));
    let replies = assert_same(&scenario, nothing).await;
    // Upstream's own wording, odd as it reads.
    assert_eq!(
        replies[0]["error"]["message"],
        "exec-server stub does not implement `nosuch/method` yet"
    );
}
