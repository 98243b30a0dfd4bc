//! envd's binary codec (issue 30) driven by a real Connect client: `buf curl` (the npm package
//! `@bufbuild/buf`, pinned) with our .proto files (`proto/envd/`), which sends binary protobuf
//! (`application/proto`, `application/connect+proto`) and reads the answers with the same files,
//! against the real daemon on its envd Unix socket. The JSON codec is driven by the E2B SDK's
//! tests (tests/envd); `json_and_binary_codecs_agree` makes the same calls in both.

use crate::common::codex_peer::npm_binary;
use crate::common::Daemon;
use serde_json::{json, Value};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::Duration;

const BUF_VERSION: &str = "1.75.0";
const PROTO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/proto/envd");
const WAIT: Duration = Duration::from_secs(20);

/// buf's own binary, which the package's node launcher would start (a node start saved per
/// call, and a stream's client is one process to stop).
fn buf_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let package = format!("@bufbuild/buf@{BUF_VERSION}");
            let launcher = npm_binary(&format!("buf-{BUF_VERSION}"), &package, "buf");
            let scope = launcher
                .parent()
                .unwrap()
                .parent()
                .unwrap()
                .join("@bufbuild");
            (std::fs::read_dir(&scope).expect("@bufbuild is installed"))
                .filter_map(|entry| Some(entry.ok()?.path().join("bin/buf")))
                .find(|binary| binary.to_str().is_some_and(|path| path.contains("/buf-")))
                .expect("buf's binary for this platform")
        })
        .clone()
}

/// A daemon with an envd listener on a Unix socket of its own.
struct Envd {
    _daemon: Daemon,
    socket: PathBuf,
    dir: tempfile::TempDir,
}

impl Envd {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("envd.sock");
        let listen = format!("unix://{}", socket.display());
        let daemon = Daemon::start_with(&["--envd-listen", &listen], &[]);
        Self {
            _daemon: daemon,
            socket,
            dir,
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// `buf curl` calling `method` (`service/Method`), with `extra` flags.
    fn buf(&self, method: &str, extra: &[&str]) -> Command {
        let mut command = Command::new(buf_binary());
        command
            .args(["curl", "--schema", PROTO, "--unix-socket"])
            .arg(&self.socket)
            .args(extra)
            .arg(format!("http://envd/{method}"));
        command
    }

    /// A unary or server-streaming call in binary: the answer's messages, or the Connect error.
    fn call(&self, method: &str, request: Value) -> Result<Vec<Value>, Value> {
        self.call_with(method, request, &[])
    }

    fn call_with(&self, method: &str, request: Value, extra: &[&str]) -> Result<Vec<Value>, Value> {
        let output = (self.buf(method, extra))
            .args(["-d", &request.to_string()])
            .output()
            .expect("run buf curl");
        answer(output)
    }

    /// A client-streaming call: `requests` sent as the stream's messages.
    fn stream_in(&self, method: &str, requests: &[Value]) -> Result<Vec<Value>, Value> {
        let mut child = (self.buf(method, &["-d", "@-"]))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run buf curl");
        let mut stdin = child.stdin.take().unwrap();
        for request in requests {
            writeln!(stdin, "{request}").unwrap();
        }
        drop(stdin);
        answer(child.wait_with_output().unwrap())
    }

    /// A server stream read as it comes; the client is stopped when the `Follow` is dropped.
    fn follow(&self, method: &str, request: Value) -> Follow {
        let mut child = (self.buf(method, &["-d", &request.to_string()]))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run buf curl");
        let stdout = child.stdout.take().unwrap();
        let (sender, messages) = mpsc::channel();
        std::thread::spawn(move || {
            for message in serde_json::Deserializer::from_reader(stdout).into_iter::<Value>() {
                let Ok(message) = message else { return };
                if sender.send(message).is_err() {
                    return;
                }
            }
        });
        Follow { child, messages }
    }
}

/// buf curl's outcome: the messages it printed, or the Connect error it printed on stderr
/// (its exit status is the error's code times 8).
fn answer(output: std::process::Output) -> Result<Vec<Value>, Value> {
    if !output.status.success() {
        let error: Value = serde_json::from_slice(&output.stderr).unwrap_or_else(|_| {
            panic!(
                "buf curl failed: {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
        return Err(error);
    }
    let messages = serde_json::Deserializer::from_slice(&output.stdout).into_iter::<Value>();
    Ok(messages.map(|message| message.expect("JSON")).collect())
}

fn one(messages: Result<Vec<Value>, Value>) -> Value {
    let mut messages = messages.expect("the call succeeds");
    assert_eq!(messages.len(), 1, "{messages:?}");
    messages.remove(0)
}

struct Follow {
    child: Child,
    messages: mpsc::Receiver<Value>,
}

impl Follow {
    fn next(&self) -> Value {
        self.messages.recv_timeout(WAIT).expect("a message")
    }

    /// The messages until the stream ends.
    fn rest(mut self) -> Vec<Value> {
        let rest = self.messages.iter().collect();
        let _ = self.child.wait();
        rest
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A process stream's events summed up: its pid, stdout, stderr or pty output, and end.
fn summary(events: &[Value]) -> (u64, String, String, Value) {
    let (mut pid, mut stdout, mut stderr, mut end) = (0, Vec::new(), Vec::new(), Value::Null);
    for event in events.iter().map(|message| &message["event"]) {
        if let Some(start) = event.get("start") {
            pid = start["pid"].as_u64().unwrap();
        }
        if let Some(data) = event.get("data") {
            let (key, text) = data.as_object().unwrap().iter().next().unwrap();
            let bytes = crate::common::unb64(text);
            match key.as_str() {
                "stderr" => stderr.extend(bytes),
                _ => stdout.extend(bytes),
            }
        }
        if let Some(found) = event.get("end") {
            end = found.clone();
        }
    }
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
    (pid, text(stdout), text(stderr), end)
}

fn start(cmd: &str, args: &[&str]) -> Value {
    json!({"process": {"cmd": cmd, "args": args}})
}

#[test]
fn start_streams_a_command_in_binary_over_http1_and_h2c() {
    let envd = Envd::start();
    let script = "echo out; echo err >&2; exit 3";
    for extra in [&[][..], &["--http2-prior-knowledge"][..]] {
        let events = envd.call_with(
            "process.Process/Start",
            start("/bin/sh", &["-c", script]),
            extra,
        );
        let (pid, stdout, stderr, end) = summary(&events.unwrap());
        assert!(pid > 1);
        assert_eq!((stdout.as_str(), stderr.as_str()), ("out\n", "err\n"));
        assert_eq!(
            end,
            json!({"exitCode": 3, "exited": true, "status": "exit status 3", "error": "exit status 3"})
        );
    }
    // The content types buf sent and got.
    let output = (envd.buf("process.Process/List", &["-v"]))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(
        log.contains("> (#1) Content-Type: application/proto"),
        "{log}"
    );
    assert!(
        log.contains("< (#1) Content-Type: application/proto"),
        "{log}"
    );
    let request = start("true", &[]).to_string();
    let output = (envd.buf("process.Process/Start", &["-v", "-d", &request]))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(
        log.contains("< (#1) Content-Type: application/connect+proto"),
        "{log}"
    );
    // A missing cwd is refused before anything runs, in the end-of-stream message.
    let missing = json!({"process": {"cmd": "true", "cwd": envd.path("nowhere")}});
    let error = envd.call("process.Process/Start", missing).unwrap_err();
    assert_eq!(error["code"], "invalid_argument", "{error}");
}

#[test]
fn a_background_command_is_listed_fed_and_connected_to_in_binary() {
    let envd = Envd::start();
    let request = json!({"process": {"cmd": "/bin/cat"}, "tag": "cat-1", "stdin": true});
    let started = envd.follow("process.Process/Start", request);
    let pid = started.next()["event"]["start"]["pid"].as_u64().unwrap();
    let listed = one(envd.call("process.Process/List", json!({})));
    let processes = listed["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 1, "{listed}");
    assert_eq!(processes[0]["pid"], pid);
    assert_eq!(processes[0]["tag"], "cat-1");
    assert_eq!(processes[0]["config"]["cmd"], "/bin/cat");
    let connected = envd.follow("process.Process/Connect", json!({"process": {"pid": pid}}));
    assert_eq!(connected.next()["event"]["start"]["pid"], pid);
    let input = json!({"process": {"pid": pid}, "input": {"stdin": crate::common::b64(b"one\n")}});
    assert_eq!(
        one(envd.call("process.Process/SendInput", input)),
        json!({})
    );
    let streamed = envd.stream_in(
        "process.Process/StreamInput",
        &[
            json!({"start": {"process": {"tag": "cat-1"}}}),
            json!({"data": {"input": {"stdin": crate::common::b64(b"two\n")}}}),
            json!({"keepalive": {}}),
        ],
    );
    assert_eq!(one(streamed), json!({}));
    let selected = json!({"process": {"tag": "cat-1"}});
    assert_eq!(
        one(envd.call("process.Process/CloseStdin", selected)),
        json!({})
    );
    for stream in [started, connected] {
        let (_, stdout, _, end) = summary(&stream.rest());
        assert_eq!(stdout, "one\ntwo\n");
        assert_eq!(end, json!({"exited": true, "status": "exit status 0"}));
    }
}

#[test]
fn signals_and_pty_updates_in_binary() {
    let envd = Envd::start();
    let sleeping = envd.follow("process.Process/Start", start("sleep", &["600"]));
    let pid = sleeping.next()["event"]["start"]["pid"].as_u64().unwrap();
    let kill = json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"});
    assert_eq!(
        one(envd.call("process.Process/SendSignal", kill.clone())),
        json!({})
    );
    let (_, _, _, end) = summary(&sleeping.rest());
    assert_eq!(
        end,
        json!({"exitCode": -1, "status": "signal: killed", "error": "signal: killed"})
    );
    let again = envd.call("process.Process/SendSignal", kill).unwrap_err();
    assert_eq!(again["code"], "not_found", "{again}");
    // A terminal resized by Update: the command reads a line, then says its size.
    let mut request = start("/bin/sh", &["-c", "read line; stty size"]);
    request["pty"] = json!({"size": {"cols": 80, "rows": 24}});
    let terminal = envd.follow("process.Process/Start", request);
    let pid = terminal.next()["event"]["start"]["pid"].as_u64().unwrap();
    let update = json!({"process": {"pid": pid}, "pty": {"size": {"cols": 100, "rows": 30}}});
    assert_eq!(one(envd.call("process.Process/Update", update)), json!({}));
    let enter = json!({"process": {"pid": pid}, "input": {"pty": crate::common::b64(b"\n")}});
    assert_eq!(
        one(envd.call("process.Process/SendInput", enter)),
        json!({})
    );
    let (_, output, _, end) = summary(&terminal.rest());
    assert!(output.contains("30 100"), "{output:?}");
    assert_eq!(end["exited"], true);
}

#[test]
fn filesystem_calls_in_binary() {
    let envd = Envd::start();
    let dir = envd.path("made/deeper");
    let made = one(envd.call("filesystem.Filesystem/MakeDir", json!({"path": dir})));
    assert_eq!(made["entry"]["type"], "FILE_TYPE_DIRECTORY");
    assert_eq!(made["entry"]["path"], dir);
    let again = envd.call("filesystem.Filesystem/MakeDir", json!({"path": dir}));
    assert_eq!(again.unwrap_err()["code"], "already_exists");
    let file = format!("{dir}/a.txt");
    std::fs::write(&file, "12345").unwrap();
    let stat = one(envd.call("filesystem.Filesystem/Stat", json!({"path": file})));
    assert_eq!(stat["entry"]["name"], "a.txt");
    assert_eq!(stat["entry"]["type"], "FILE_TYPE_FILE");
    assert_eq!(stat["entry"]["size"], "5");
    assert_eq!(stat["entry"]["permissions"], "-rw-r--r--");
    let top = envd.path("made");
    let listed = one(envd.call(
        "filesystem.Filesystem/ListDir",
        json!({"path": top, "depth": 2}),
    ));
    let paths: Vec<_> = (listed["entries"].as_array().unwrap().iter())
        .map(|entry| entry["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, [dir.clone(), file.clone()]);
    let moved = envd.path("moved.txt");
    let request = json!({"source": file, "destination": moved});
    let answer = one(envd.call("filesystem.Filesystem/Move", request));
    assert_eq!(answer["entry"]["path"], moved);
    assert_eq!(std::fs::read_to_string(&moved).unwrap(), "12345");
    let removed = one(envd.call("filesystem.Filesystem/Remove", json!({"path": top})));
    assert_eq!(removed, json!({}));
    assert!(!std::path::Path::new(&top).exists());
    let missing = one(envd.call("filesystem.Filesystem/Remove", json!({"path": top})));
    assert_eq!(missing, json!({}));
    let gone = envd.call("filesystem.Filesystem/Stat", json!({"path": top}));
    assert_eq!(gone.unwrap_err()["code"], "not_found");
}

#[test]
fn watches_in_binary() {
    let envd = Envd::start();
    let dir = envd.path("watched");
    std::fs::create_dir(&dir).unwrap();
    let watch = json!({"path": dir, "includeEntry": true});
    let streamed = envd.follow("filesystem.Filesystem/WatchDir", watch.clone());
    assert_eq!(streamed.next(), json!({"start": {}}));
    std::fs::write(format!("{dir}/new.txt"), "x").unwrap();
    let event = streamed.next();
    assert_eq!(event["filesystem"]["name"], "new.txt", "{event}");
    assert_eq!(event["filesystem"]["type"], "EVENT_TYPE_CREATE", "{event}");
    assert_eq!(event["filesystem"]["entry"]["name"], "new.txt", "{event}");
    drop(streamed);
    let created = one(envd.call("filesystem.Filesystem/CreateWatcher", watch));
    let id = created["watcherId"].as_str().unwrap().to_owned();
    std::fs::write(format!("{dir}/kept.txt"), "x").unwrap();
    let events = (0..100)
        .find_map(|_| {
            let got = one(envd.call(
                "filesystem.Filesystem/GetWatcherEvents",
                json!({"watcherId": id}),
            ));
            let events = got["events"].as_array().cloned().unwrap_or_default();
            if events.is_empty() {
                std::thread::sleep(Duration::from_millis(50));
            }
            (!events.is_empty()).then_some(events)
        })
        .expect("the kept watcher's events");
    assert_eq!(events[0]["name"], "kept.txt", "{events:?}");
    assert_eq!(events[0]["type"], "EVENT_TYPE_CREATE", "{events:?}");
    let removed = envd.call(
        "filesystem.Filesystem/RemoveWatcher",
        json!({"watcherId": id}),
    );
    assert_eq!(one(removed), json!({}));
    let gone = envd.call(
        "filesystem.Filesystem/GetWatcherEvents",
        json!({"watcherId": id}),
    );
    assert_eq!(gone.unwrap_err()["code"], "not_found");
}

impl Envd {
    /// The same call in the JSON codec, by curl: a unary answer, or a stream's messages (its
    /// envelopes read here), or the Connect error.
    fn json_call(
        &self,
        method: &str,
        request: &Value,
        streaming: bool,
    ) -> Result<Vec<Value>, Value> {
        let (content_type, body) = if streaming {
            let data = request.to_string().into_bytes();
            let mut framed = vec![0];
            framed.extend((data.len() as u32).to_be_bytes());
            framed.extend(data);
            ("application/connect+json", framed)
        } else {
            ("application/json", request.to_string().into_bytes())
        };
        let mut child = Command::new("curl")
            .args(["-sS", "-w", "\n%{http_code}", "--unix-socket"])
            .arg(&self.socket)
            .args(["-H", &format!("Content-Type: {content_type}")])
            .args(["--data-binary", "@-", &format!("http://envd/{method}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("curl (apt install curl)");
        child.stdin.take().unwrap().write_all(&body).unwrap();
        let output = child.wait_with_output().unwrap().stdout;
        let split = output.iter().rposition(|byte| *byte == b'\n').unwrap();
        let (body, status) = (&output[..split], &output[split + 1..]);
        if !streaming {
            let message: Value = serde_json::from_slice(body).unwrap();
            return if status == b"200" {
                Ok(vec![message])
            } else {
                Err(message)
            };
        }
        let (mut messages, mut rest) = (Vec::new(), body);
        while rest.len() >= 5 {
            let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
            let message: Value = serde_json::from_slice(&rest[5..5 + len]).unwrap();
            if rest[0] & 2 != 0 {
                return message.get("error").cloned().map_or(Ok(messages), Err);
            }
            messages.push(message);
            rest = &rest[5 + len..];
        }
        panic!("the stream has no end message");
    }
}

/// A message without what the two codecs may write differently yet mean the same by: default
/// values (the binary one has none to send) and a timestamp's trailing zeros; and `pid`s, which
/// differ from run to run.
fn normalized(value: Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            (fields.into_iter())
                .map(|(key, value)| match key.as_str() {
                    "pid" => (key, json!("a pid")),
                    _ => (key, normalized(value)),
                })
                .filter(|(_, value)| {
                    !matches!(value, Value::Bool(false) | Value::Null)
                        && ![json!(0), json!(""), json!("0"), json!({}), json!([])].contains(value)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(normalized).collect()),
        Value::String(text) if text.ends_with('Z') && text.contains('.') => Value::String(format!(
            "{}Z",
            text.trim_end_matches('Z').trim_end_matches('0')
        )),
        other => other,
    }
}

#[test]
fn json_and_binary_codecs_agree() {
    let envd = Envd::start();
    let dir = envd.path("tree");
    std::fs::create_dir_all(format!("{dir}/sub")).unwrap();
    std::fs::write(format!("{dir}/sub/file"), "hello").unwrap();
    let running = envd.follow(
        "process.Process/Start",
        json!({"process": {"cmd": "sleep", "args": ["600"], "envs": {"A": "b"}}, "tag": "t"}),
    );
    let pid = running.next()["event"]["start"]["pid"].clone();
    let calls = [
        (
            "filesystem.Filesystem/Stat",
            json!({"path": format!("{dir}/sub/file")}),
            false,
        ),
        (
            "filesystem.Filesystem/ListDir",
            json!({"path": dir, "depth": 2}),
            false,
        ),
        (
            "filesystem.Filesystem/Stat",
            json!({"path": envd.path("missing")}),
            false,
        ),
        ("filesystem.Filesystem/MakeDir", json!({"path": dir}), false),
        ("process.Process/List", json!({}), false),
        (
            "process.Process/Start",
            start("/bin/sh", &["-c", "echo out; exit 3"]),
            true,
        ),
        (
            "process.Process/Start",
            json!({"process": {"cmd": "true", "cwd": envd.path("nowhere")}}),
            true,
        ),
    ];
    for (method, request, streaming) in calls {
        let binary = envd.call(method, request.clone());
        let json = envd.json_call(method, &request, streaming);
        let both = [binary, json].map(|outcome| match outcome {
            Ok(messages) => Ok(messages.into_iter().map(normalized).collect::<Vec<_>>()),
            Err(error) => Err(error),
        });
        assert_eq!(both[0], both[1], "{method} {request}");
        assert!(both[0]
            .as_ref()
            .map_or(true, |messages| !messages.is_empty()));
    }
    let kill = json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"});
    assert_eq!(
        one(envd.call("process.Process/SendSignal", kill)),
        json!({})
    );
}
