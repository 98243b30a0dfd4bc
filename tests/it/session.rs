//! Sessions outlive connections: detach, resume, takeover, TTL expiry, isolation.

use crate::common;

use common::*;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn resume_after_disconnect_replays_output_made_while_detached() {
    let daemon = Daemon::start();
    let (first, session) = daemon.session().await;
    first
        .call(
            "process/start",
            start_params(
                "p",
                &[
                    "sh",
                    "-c",
                    "echo before; sleep 0.5; echo during; exec sleep 30",
                ],
            ),
        )
        .await;
    let before = first.next_notification().await;
    assert_eq!(unb64(&before["params"]["chunk"]), b"before\n");
    first.abort();
    tokio::time::sleep(Duration::from_millis(800)).await;

    let second = daemon.resume(&session).await;
    let caught_up = second
        .call("process/read", json!({"processId": "p", "afterSeq": 1}))
        .await;
    assert_eq!(
        unb64(&caught_up["chunks"][0]["chunk"]),
        b"during\n",
        "output made while detached is retained"
    );
    assert_eq!(caught_up["chunks"][0]["seq"], 2);
    assert_eq!(caught_up["truncated"], false);
    second
        .call("process/terminate", json!({"processId": "p"}))
        .await;
    let events = second.events_until_closed("p").await;
    assert!(events.iter().any(|e| e["method"] == "process/exited"));
}

#[tokio::test]
async fn notifications_follow_the_session_to_the_new_connection() {
    let daemon = Daemon::start();
    let (first, session) = daemon.session().await;
    let mut params = start_params("cat", &["cat"]);
    params["pipeStdin"] = json!(true);
    first.call("process/start", params).await;
    first.close().await;
    let second = daemon.resume(&session).await;
    second
        .call(
            "process/write",
            json!({"processId": "cat", "chunk": b64(b"ping"), "writeId": "1"}),
        )
        .await;
    let output = second.next_notification().await;
    assert_eq!(output["method"], "process/output");
    assert_eq!(unb64(&output["params"]["chunk"]), b"ping");
    second
        .call("process/terminate", json!({"processId": "cat"}))
        .await;
}

#[tokio::test]
async fn a_write_retried_after_reconnect_lands_once() {
    let daemon = Daemon::start();
    let (first, session) = daemon.session().await;
    let mut params = start_params("cat", &["cat"]);
    params["pipeStdin"] = json!(true);
    first.call("process/start", params).await;
    // The reply to this write is "lost" with the connection; the client retries it.
    first
        .call(
            "process/write",
            json!({"processId": "cat", "chunk": b64(b"once"), "writeId": "w-1"}),
        )
        .await;
    first.abort();
    let second = daemon.resume(&session).await;
    let retried = second
        .call(
            "process/write",
            json!({"processId": "cat", "chunk": b64(b"once"), "writeId": "w-1"}),
        )
        .await;
    assert_eq!(retried, json!({"status": "accepted"}));
    second
        .call("process/closeStdin", json!({"processId": "cat"}))
        .await;
    let (bytes, _) = read_all(&second, "cat").await;
    assert_eq!(bytes, b"once");
}

#[tokio::test]
async fn resuming_an_attached_session_is_refused_with_32010() {
    let daemon = Daemon::start();
    let (_first, session) = daemon.session().await;
    let second = daemon.client().await;
    let error = second.initialize(Some(&session)).await.unwrap_err();
    assert_eq!(error["code"], -32010);
    assert_eq!(
        error["message"],
        format!("session {session} is already attached to another connection")
    );
    // The failed attempt does not use up the connection's initialize.
    let fresh = second.initialize(None).await.unwrap();
    assert_ne!(fresh, session);
}

#[tokio::test]
async fn unknown_and_expired_sessions_are_refused() {
    let daemon = Daemon::start_with(&["--session-ttl", "300ms"], &[]);
    let client = daemon.client().await;
    let error = client
        .initialize(Some("no-such-session"))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        json!({"code": -32600, "message": "unknown session id no-such-session"})
    );

    let (first, session) = daemon.session().await;
    first
        .call(
            "process/start",
            start_params("s", &["sh", "-c", "echo $$; exec sleep 60"]),
        )
        .await;
    let pid: i32 = String::from_utf8(unb64(&first.next_notification().await["params"]["chunk"]))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(pid_alive(pid));
    first.close().await;
    eventually("the expired session's process is killed", || {
        !pid_alive(pid)
    })
    .await;
    let late = daemon.client().await;
    let error = late.initialize(Some(&session)).await.unwrap_err();
    assert_eq!(error["message"], format!("unknown session id {session}"));
}

#[tokio::test]
async fn resume_is_not_delayed_by_a_long_poll_of_the_old_connection() {
    let daemon = Daemon::start();
    let (first, session) = daemon.session().await;
    first
        .call("process/start", start_params("slow", &["sleep", "30"]))
        .await;
    first.send_text(json!({"id": 99, "method": "process/read", "params": {"processId": "slow", "waitMs": 5000}}).to_string()).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.abort();
    let started = std::time::Instant::now();
    let second = daemon.resume(&session).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "resume took {:?}",
        started.elapsed()
    );
    assert_eq!(
        second
            .call("process/terminate", json!({"processId": "slow"}))
            .await,
        json!({"running": true})
    );
}

#[tokio::test]
async fn sessions_cannot_see_each_other() {
    let daemon = Daemon::start();
    let (alice, _) = daemon.session().await;
    let (mallory, _) = daemon.session().await;
    alice
        .call("process/start", start_params("secret", &["sleep", "30"]))
        .await;
    let read = mallory
        .request("process/read", json!({"processId": "secret"}))
        .await
        .unwrap_err();
    assert_eq!(read["message"], "unknown process id secret");
    assert_eq!(
        mallory
            .call("process/terminate", json!({"processId": "secret"}))
            .await,
        json!({"running": false})
    );
    assert_eq!(
        mallory
            .call(
                "process/write",
                json!({"processId": "secret", "chunk": "", "writeId": "1"})
            )
            .await,
        json!({"status": "unknownProcess"})
    );
    // The same id is free in another session.
    mallory
        .call("process/start", start_params("secret", &["true"]))
        .await;
    assert_eq!(
        alice
            .call("process/read", json!({"processId": "secret"}))
            .await["exited"],
        false
    );
    alice
        .call("process/terminate", json!({"processId": "secret"}))
        .await;
}

#[tokio::test]
async fn detached_eviction_is_reported_not_silent() {
    let daemon = Daemon::start_with(&["--output-retention-bytes", "1000"], &[]);
    let (first, session) = daemon.session().await;
    // 20 chunks of 200 bytes while nobody is attached: the oldest must be evicted.
    let script =
        "sleep 0.3; for i in $(seq 1 20); do head -c 200 /dev/zero | tr '\\0' a; sleep 0.01; done";
    first
        .call(
            "process/start",
            start_params("chatty", &["sh", "-c", script]),
        )
        .await;
    first.abort();
    // Back once the output came (in 0.3 to about 0.6 s): it was never received.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let second = daemon.resume(&session).await;
    let (_, last) = read_all(&second, "chatty").await;
    assert_eq!(last["exitCode"], 0, "the detached child was never stalled");
    let read = second
        .call(
            "process/read",
            json!({"processId": "chatty", "afterSeq": 0}),
        )
        .await;
    assert_eq!(read["truncated"], true);
    let first_retained = read["firstRetainedSeq"].as_u64().unwrap();
    assert!(first_retained > 1);
    assert_eq!(read["chunks"][0]["seq"].as_u64().unwrap(), first_retained);
    let retained: usize = read["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| unb64(&c["chunk"]).len())
        .sum();
    assert!(
        retained <= 1000 + 200,
        "retention stays bounded: {retained}"
    );
    let fresh = second
        .call(
            "process/read",
            json!({"processId": "chatty", "afterSeq": first_retained - 1}),
        )
        .await;
    assert_eq!(fresh["truncated"], false);
}

#[tokio::test]
async fn a_slow_attached_client_loses_nothing() {
    use futures::StreamExt as _;
    use tokio_tungstenite::tungstenite::Message;
    let daemon = Daemon::start_with(&["--output-retention-bytes", "65536"], &[]);
    let (mut ws, _) = tokio_tungstenite::connect_async(&daemon.url).await.unwrap();
    use futures::SinkExt as _;
    ws.send(Message::text(
        json!({"id": 1, "method": "initialize", "params": {"clientName": "slow"}}).to_string(),
    ))
    .await
    .unwrap();
    ws.send(Message::text(json!({"method": "initialized"}).to_string()))
        .await
        .unwrap();
    let total = 16 * 1024 * 1024;
    let start = start_params("flood", &["head", "-c", &total.to_string(), "/dev/zero"]);
    ws.send(Message::text(
        json!({"id": 2, "method": "process/start", "params": start}).to_string(),
    ))
    .await
    .unwrap();
    // Do not read for a while: the daemon must hold the child back, not drop its output.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (mut received, mut next_seq) = (0usize, 1u64);
    // Held back 256 times over for proof of receipt, the stream still flows: each wait lasts a
    // ping's round trip, not until the next 30 s ping (one such wait fails this; it takes
    // about 1.6 s).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while let Ok(Some(Ok(message))) = tokio::time::timeout_at(deadline, ws.next()).await {
        let Message::Text(text) = message else {
            continue;
        };
        let value: serde_json::Value = serde_json::from_str(text.as_str()).unwrap();
        if value.get("method").is_none() {
            continue;
        }
        assert_eq!(
            value["params"]["seq"], next_seq,
            "no gap in the notification stream"
        );
        next_seq += 1;
        match value["method"].as_str().unwrap() {
            "process/output" => received += unb64(&value["params"]["chunk"]).len(),
            "process/closed" => break,
            _ => {}
        }
    }
    assert_eq!(received, total, "all of it, within 20 s");
}

#[tokio::test]
async fn a_frozen_client_is_detached_within_two_ping_intervals() {
    use futures::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    let interval = Duration::from_millis(500);
    let daemon = Daemon::start_with(&["--ping-interval", "500ms"], &[]);
    let (healthy, _) = daemon.session().await;
    let (mut frozen, _) = tokio_tungstenite::connect_async(&daemon.url).await.unwrap();
    let messages = [
        json!({"id": 1, "method": "initialize", "params": {"clientName": "frozen"}}),
        json!({"method": "initialized"}),
        json!({"id": 2, "method": "process/start", "params": start_params("p", &["sleep", "30"])}),
    ];
    for message in messages {
        frozen
            .send(Message::text(message.to_string()))
            .await
            .unwrap();
    }
    let mut session = None;
    while let Some(Ok(message)) = frozen.next().await {
        let Message::Text(text) = message else {
            continue;
        };
        let reply: serde_json::Value = serde_json::from_str(&text).unwrap();
        match reply["id"].as_i64() {
            Some(1) => session = reply["result"]["sessionId"].as_str().map(str::to_owned),
            Some(2) => break,
            _ => {}
        }
    }
    let session = session.expect("initialized");
    // From here on `frozen` is never polled, so no pong answers the daemon's pings (as with
    // a SIGSTOPped client).
    let frozen_at = tokio::time::Instant::now();
    let resumed = daemon.resume(&session).await;
    let waited = frozen_at.elapsed();
    // Two intervals, plus slack for a loaded machine; without the watchdog it never happens.
    assert!(
        waited < 2 * interval + Duration::from_secs(2),
        "detached after {waited:?}"
    );
    let read = resumed
        .call("process/read", json!({"processId": "p", "afterSeq": 0}))
        .await;
    assert_eq!(read["exited"], false, "the process lives on: {read}");
    // A client that answers pings keeps its connection however long it idles.
    tokio::time::sleep(3 * interval).await;
    healthy
        .call(
            "process/signal",
            json!({"processId": "none", "signal": "interrupt"}),
        )
        .await;
    drop(frozen);
}

/// A resumed `initialize` reports the executor the session started with, field for field,
/// even when what `environment/info` would say has changed since (here the daemon's own
/// working directory was renamed).
#[tokio::test]
async fn a_resumed_initialize_result_equals_the_original() {
    let scratch = scratch_dir();
    let (before, after) = (scratch.path().join("a"), scratch.path().join("b"));
    std::fs::create_dir(&before).unwrap();
    let mut command = Daemon::command(env!("CARGO_BIN_EXE_exec-server"), &[], &[]);
    command.current_dir(&before);
    let daemon = Daemon::launch(command);
    let params = json!({"clientName": "e2e", "binaryPayloads": true});
    let client = daemon.client().await;
    let original = client.request("initialize", params.clone()).await.unwrap();
    client.notify("initialized", json!({})).await;
    client.close().await;
    std::fs::rename(&before, &after).unwrap();

    let mut resume = params;
    resume["resumeSessionId"] = original["sessionId"].clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let resumed = loop {
        let client = daemon.client().await;
        match client.request("initialize", resume.clone()).await {
            Ok(result) => break result,
            Err(error) if error["code"] == -32010 && tokio::time::Instant::now() < deadline => {
                client.close().await;
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Err(error) => panic!("resume failed: {error}"),
        }
    };
    assert_eq!(resumed, original);
    let info = daemon.client().await;
    info.initialize(None).await.unwrap();
    let now = info.call("environment/info", json!({})).await;
    assert_ne!(now["cwd"], original["environmentInfo"]["cwd"], "{now}");
}

/// Every session and process lifecycle event is logged at info with its ids: created,
/// detached, resumed and expired; a process started (with its pid), exited and closed.
#[tokio::test]
async fn lifecycle_events_are_logged_at_info_with_ids() {
    use std::io::BufRead as _;
    let args = ["--session-ttl", "1s"];
    let mut command = Daemon::command(env!("CARGO_BIN_EXE_exec-server"), &args, &[]);
    command
        .env("EXEC_SERVER_LOG", "info")
        .stderr(std::process::Stdio::piped());
    let mut daemon = Daemon::launch(command);
    let stderr = daemon.take_stderr().unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            sink.lock().unwrap().push(strip_ansi(&line));
        }
    });
    let has = |needles: &[&str]| {
        lines
            .lock()
            .unwrap()
            .iter()
            .any(|line| needles.iter().all(|needle| line.contains(needle)))
    };

    let (client, session) = daemon.session().await;
    let digest: String = ring::digest::digest(&ring::digest::SHA256, session.as_bytes()).as_ref()
        [..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let session_field = format!("session={digest}");
    client.close().await;
    eventually("a detach line", || {
        has(&["session detached", &session_field])
    })
    .await;
    let client = daemon.resume(&session).await;
    client
        .call(
            "process/start",
            start_params("logged", &["sh", "-c", "exit 3"]),
        )
        .await;
    let (_, last) = read_all(&client, "logged").await;
    assert_eq!(last["exitCode"], 3, "{last}");
    client.close().await;

    eventually("lifecycle lines", || {
        has(&["session created", &session_field])
            && has(&["session resumed", &session_field])
            && has(&["process started", "process_id=logged", "pid="])
            && has(&[
                "process exited",
                "process=logged",
                "reason=Exited",
                "code=3",
            ])
            && has(&["process closed", "process=logged"])
            && has(&["session ended", &session_field, "SessionExpired"])
    })
    .await;
    // The detach before the expiry too.
    let detaches = lines
        .lock()
        .unwrap()
        .iter()
        .filter(|line| line.contains("session detached") && line.contains(&session_field))
        .count();
    assert_eq!(detaches, 2, "{:#?}", lines.lock().unwrap());
}

/// `line` without its terminal colour sequences (`ESC [ ... m`).
fn strip_ansi(line: &str) -> String {
    let mut plain = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('\x1b') {
        plain.push_str(&rest[..start]);
        rest = &rest[start..];
        rest = rest.find('m').map_or("", |end| &rest[end + 1..]);
    }
    plain.push_str(rest);
    plain
}
