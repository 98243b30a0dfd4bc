//! `--audit-log`: one JSON line per action, with who did it; no secret ever in the file; and
//! `--audit-required`: an action whose record cannot be written is refused and not performed.

use crate::common::http_server::HttpServer;
use crate::common::*;
use serde_json::{json, Value};
use std::time::Duration;

const TOKEN: &str = "audit-token-secret-4711";
const ENV_VALUE: &str = "env-value-secret-0815";
const FILE_CONTENT: &str = "file-content-secret-1234";
const STDIN_DATA: &str = "stdin-data-secret-5678";
const QUERY: &str = "query-secret-9999";
const HEADER: &str = "header-secret-3141";
const BODY: &str = "body-secret-2718";

/// The first 8 hex digits of the SHA-256 of a session id: how logs and records name it.
fn digest(session: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, session.as_bytes());
    digest.as_ref()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// Connects with the token and resumes `session` once the daemon saw the previous connection
/// go (as its metrics say): every attempt is an action, recorded.
async fn resume(daemon: &Daemon, session: &str) -> Client {
    let addr = daemon.url.strip_prefix("ws://").unwrap();
    eventually("the session is detached", || {
        let (_, text) = crate::metrics::http_get(addr, "/metrics", Some(TOKEN));
        text.contains("exec_server_sessions{state=\"detached\"} 1\n")
    })
    .await;
    let client = Client::connect_with_token(&daemon.url, TOKEN).await;
    client.initialize(Some(session)).await.unwrap();
    client
}

#[tokio::test]
async fn every_action_is_recorded_once_and_no_secret_is() {
    let dir = scratch_dir();
    let log = dir.path().join("audit.log");
    let server = HttpServer::start().await;
    let daemon = Daemon::start_with(
        &["--audit-log", log.to_str().unwrap(), "--session-ttl", "1s"],
        &[("EXEC_SERVER_CONNECTION_TOKEN", TOKEN)],
    );
    let client = Client::connect_with_token(&daemon.url, TOKEN).await;
    let session = client.initialize(None).await.unwrap();

    let mut params = start_params("p", &["sh", "-c", "cat >/dev/null; exec sleep 100"]);
    params["env"]["AUDIT_SECRET"] = json!(ENV_VALUE);
    params["pipeStdin"] = json!(true);
    params["limits"] = json!({"timeoutMs": 60000});
    client.call("process/start", params).await;
    let write = json!({"processId": "p", "chunk": b64(STDIN_DATA.as_bytes()), "writeId": "w"});
    client.call("process/write", write).await;
    client
        .call("process/closeStdin", json!({"processId": "p"}))
        .await;
    client
        .call(
            "process/signal",
            json!({"processId": "p", "signal": "terminate"}),
        )
        .await;
    let (_, last) = read_all(&client, "p").await;
    assert!(last["exitCode"].is_i64(), "{last}");
    client
        .call("process/terminate", json!({"processId": "p"}))
        .await;

    let uri = |name: &str| file_uri(&dir.path().join(name));
    let data = b64(FILE_CONTENT.as_bytes());
    client
        .call(
            "fs/writeFile",
            json!({"path": uri("a"), "dataBase64": data}),
        )
        .await;
    client
        .call("fs/createDirectory", json!({"path": uri("d")}))
        .await;
    let copy = json!({"sourcePath": uri("a"), "destinationPath": uri("b"), "recursive": false});
    client.call("fs/copy", copy).await;
    client
        .call(
            "fs/rename",
            json!({"sourcePath": uri("b"), "destinationPath": uri("c")}),
        )
        .await;
    client.call("fs/remove", json!({"path": uri("c")})).await;
    // Reads are not actions.
    client.call("fs/readFile", json!({"path": uri("a")})).await;

    let request = json!({
        "method": "POST",
        "url": format!("{}?q={QUERY}", server.url("/echo")),
        "headers": [{"name": "x-echo", "value": HEADER}],
        "bodyBase64": b64(BODY.as_bytes()),
        "requestId": "h",
    });
    client.call("http/request", request).await;

    client.close().await;
    let resumed = resume(&daemon, &session).await;
    resumed.close().await;

    let expected = [
        "session/create",
        "session/resume",
        "session/expire",
        "process/start",
        "process/signal",
        "process/terminate",
        "process/exit",
        "fs/writeFile",
        "fs/createDirectory",
        "fs/copy",
        "fs/rename",
        "fs/remove",
        "http/request",
    ];
    eventually("the session expired and was recorded", || {
        records(&log)
            .iter()
            .any(|record| record["action"] == "session/expire")
    })
    .await;
    let records = records(&log);
    let find = |action: &str| {
        let found: Vec<&Value> = records.iter().filter(|r| r["action"] == action).collect();
        assert_eq!(found.len(), 1, "{action} once in {records:#?}");
        found[0]
    };
    for action in expected {
        let record = find(action);
        assert_eq!(record["session"], digest(&session), "{record}");
        assert!(record["time"].as_str().unwrap().ends_with('Z'), "{record}");
        if action == "session/expire" {
            assert_eq!(record["principal"], "daemon", "{record}");
        } else {
            assert_eq!(record["principal"], "token", "{record}");
            assert!(
                record["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
                "{record}"
            );
        }
    }
    assert_eq!(
        records.len(),
        expected.len(),
        "nothing else is recorded: {records:#?}"
    );

    let start = find("process/start");
    assert_eq!(
        start["argv"],
        json!(["sh", "-c", "cat >/dev/null; exec sleep 100"])
    );
    assert_eq!(start["cwd"], json!(cwd_uri()));
    assert_eq!(start["limits"]["timeoutMs"], 60000);
    assert_eq!(start["sandbox"], Value::Null);
    assert_eq!(find("process/signal")["signal"], "terminate");
    let exit = find("process/exit");
    assert_eq!(exit["processId"], "p");
    assert_eq!(exit["reason"], "signaled", "{exit}");
    assert_eq!(find("fs/writeFile")["paths"], json!([uri("a")]));
    assert_eq!(find("fs/copy")["paths"], json!([uri("a"), uri("b")]));
    let http = find("http/request");
    assert_eq!(
        (&http["method"], &http["host"]),
        (&json!("POST"), &json!("127.0.0.1"))
    );
    assert_eq!(find("session/expire")["reason"], "sessionExpired");

    let text = std::fs::read_to_string(&log).unwrap();
    for secret in [
        TOKEN,
        ENV_VALUE,
        FILE_CONTENT,
        &data,
        STDIN_DATA,
        &b64(STDIN_DATA.as_bytes()),
        QUERY,
        HEADER,
        BODY,
        &b64(BODY.as_bytes()),
        &session,
    ] {
        assert!(
            !text.contains(secret),
            "{secret} is in the audit log:\n{text}"
        );
    }
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&log).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// With --audit-required, a start whose record cannot be written fails with -32012 and runs
/// nothing; the log is a FIFO whose reader goes away after the session's record, so the write
/// fails with EPIPE. Without --audit-required (on /dev/full, where every write fails) the same
/// start goes ahead.
#[tokio::test]
async fn audit_required_refuses_what_it_cannot_record() {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = scratch_dir();
    let fifo = dir.path().join("audit.fifo");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    // Non-blocking, so that neither end waits for the other to open.
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let daemon = Daemon::start_with(
        &["--audit-log", fifo.to_str().unwrap(), "--audit-required"],
        &[],
    );
    let (client, _) = daemon.session().await;
    drop(reader);
    let marker = dir.path().join("ran");
    let argv = ["touch", marker.to_str().unwrap()];
    let error = client
        .request("process/start", start_params("p", &argv))
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32012, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("audit record could not be written") && message.contains("not performed"),
        "{message}"
    );
    let listed = client.call("process/list", json!({})).await;
    assert_eq!(listed["processes"], json!([]), "{listed}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!marker.exists(), "the process ran");

    // Every write fails on /dev/full: required, even the session is refused.
    let full = ["--audit-log", "/dev/full", "--audit-required"];
    let daemon = Daemon::start_with(&full, &[]);
    let error = daemon.client().await.initialize(None).await.unwrap_err();
    assert_eq!(error["code"], -32012, "{error}");

    // Not required: the failure is only logged.
    let daemon = Daemon::start_with(&["--audit-log", "/dev/full"], &[]);
    let (client, _) = daemon.session().await;
    client.call("process/start", start_params("p", &argv)).await;
    let (_, last) = read_all(&client, "p").await;
    assert_eq!(last["exitCode"], 0, "{last}");
    assert!(marker.exists());
}

#[test]
fn audit_required_needs_an_audit_log() {
    let (code, _, stderr) = exec_server(&["--audit-required"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("--audit-log"), "{stderr}");
}

/// The exits a shutdown causes are the last records, and they are all written before the daemon
/// exits, even to a log that takes them slowly: a FIFO of one page, read a page at a time.
#[tokio::test]
async fn a_shutdown_writes_out_the_exits_it_caused() {
    use std::io::Read as _;
    let dir = scratch_dir();
    let log = dir.path().join("audit.fifo");
    nix::unistd::mkfifo(&log, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let path = log.clone();
    let reader = std::thread::spawn(move || {
        // Blocks until the daemon opens the log.
        let mut fifo = std::fs::File::open(path).unwrap();
        // SAFETY: plain fcntl on our descriptor.
        unsafe {
            libc::fcntl(
                std::os::fd::AsRawFd::as_raw_fd(&fifo),
                libc::F_SETPIPE_SZ,
                4096,
            )
        };
        let (mut text, mut page) = (Vec::new(), [0u8; 4096]);
        loop {
            match fifo.read(&mut page).unwrap() {
                0 => break text,
                n => text.extend_from_slice(&page[..n]),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let mut daemon = Daemon::start_with(&["--audit-log", log.to_str().unwrap()], &[]);
    let (client, _) = daemon.session().await;
    let tag = crate::process_tree::tags(16)[0].clone();
    for n in 0..20 {
        let params = start_params(&format!("p{n}"), &["sleep", &tag]);
        client.call("process/start", params).await;
    }
    daemon.send_signal(libc::SIGTERM);
    assert!(
        daemon.wait_exit(TIMEOUT).is_some(),
        "the daemon did not exit"
    );
    let text = String::from_utf8(reader.join().unwrap()).unwrap();
    let exits: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|record| record["action"] == "process/exit")
        .collect();
    assert_eq!(exits.len(), 20, "{text}");
    assert!(
        exits.iter().all(|exit| exit["reason"] == "shutdown"),
        "{text}"
    );
}

/// A rotation that renames the log (logrotate's default) and sends SIGHUP: later records go to
/// a new file at the path, none is lost or written twice.
#[tokio::test]
async fn sighup_reopens_a_log_rotated_away() {
    let dir = scratch_dir();
    let log = dir.path().join("audit.log");
    let rotated = dir.path().join("audit.log.1");
    let daemon = Daemon::start_with(&["--audit-log", log.to_str().unwrap()], &[]);
    let (client, _) = daemon.session().await;
    client
        .call("process/start", start_params("before", &["true"]))
        .await;
    std::fs::rename(&log, &rotated).unwrap();
    daemon.send_signal(libc::SIGHUP);
    eventually("the log reopened at its path", || log.exists()).await;
    client
        .call("process/start", start_params("after", &["true"]))
        .await;
    client.events_until_closed("after").await;
    let starts = |path: &std::path::Path| -> Vec<Value> {
        records(path)
            .into_iter()
            .filter(|record| record["action"] == "process/start")
            .map(|record| record["processId"].clone())
            .collect()
    };
    assert_eq!(starts(&rotated), [json!("before")]);
    eventually("the later start recorded in the new file", || {
        starts(&log) == [json!("after")]
    })
    .await;
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&log).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}
