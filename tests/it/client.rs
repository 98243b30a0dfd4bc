//! The client crate against the real daemon, including connections lost on purpose through a
//! proxy: resume, catch-up by seq, writeId retries, gaps and lost sessions.

use crate::common;
use crate::support::proxy;

use common::Daemon;
use exec_server_client::protocol::process::{ProcessSignal, TerminalSize};
use exec_server_client::{Client, ClientOptions, Command, ProcessEvent};
use proxy::Proxy;
use std::time::Duration;

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

fn command(argv: &[&str]) -> Command {
    Command::new(argv.iter().copied())
        .cwd("/tmp")
        .unwrap()
        .env("PATH", PATH)
}

async fn connect(url: &str) -> Client {
    Client::connect(ClientOptions::new(url)).await.unwrap()
}

#[tokio::test]
async fn events_arrive_in_order_with_the_exit_code() {
    let daemon = Daemon::start();
    let client = connect(&daemon.url).await;
    let mut process = client
        .start(command(&["sh", "-c", "printf out; printf err >&2; exit 3"]))
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Some(event) = process.next_event().await {
        events.push(event);
    }
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| match e {
            ProcessEvent::Output { seq, .. }
            | ProcessEvent::Exited { seq, .. }
            | ProcessEvent::Closed { seq } => *seq,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert!(matches!(
        events[2],
        ProcessEvent::Exited { exit_code: 3, .. }
    ));
    assert!(events[3].is_final());
}

#[tokio::test]
async fn stdin_signals_resize_and_generic_calls() {
    let daemon = Daemon::start();
    let client = connect(&daemon.url).await;
    let mut cat = client.start(command(&["cat"]).stdin()).await.unwrap();
    cat.write(b"hello ").await.unwrap();
    cat.write(b"world\n").await.unwrap();
    cat.close_stdin().await.unwrap();
    let collected = cat.collect().await;
    assert_eq!(collected.output, b"hello world\n");
    assert_eq!(collected.exit_code, Some(0));

    let tty = TerminalSize { rows: 24, cols: 80 };
    let script = "trap 'stty size; exit 0' INT; stty size; while :; do sleep 0.05; done";
    let mut shell = client
        .start(command(&["sh", "-c", script]).tty(tty))
        .await
        .unwrap();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("24 80") {
        match shell.next_event().await.unwrap() {
            ProcessEvent::Output { data, .. } => seen.extend_from_slice(&data),
            other => panic!("unexpected {other:?}"),
        }
    }
    shell
        .resize(TerminalSize {
            rows: 50,
            cols: 132,
        })
        .await
        .unwrap();
    shell.signal(ProcessSignal::Interrupt).await.unwrap();
    let rest = shell.collect().await;
    assert!(
        String::from_utf8_lossy(&rest.output).contains("50 132"),
        "{rest:?}"
    );

    let error = client
        .call("process/nope", serde_json::json!({}))
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some(-32601));
    let read = client
        .call(
            "process/read",
            serde_json::json!({"processId": cat.id(), "afterSeq": 0}),
        )
        .await
        .unwrap();
    assert_eq!(read["closed"], true);
}

/// Output pushed while the connection was silently broken is caught up by seq after the
/// reconnect, exactly once; a write whose reply was lost is retried with its writeId and
/// lands once.
#[tokio::test]
async fn reconnect_catches_up_missed_output_and_retries_writes_once() {
    let daemon = Daemon::start();
    let proxy = Proxy::start(&daemon.url).await;
    let client = connect(&proxy.url).await;
    let mut recoveries = client.recoveries();
    let mut cat = client.start(command(&["cat"]).stdin()).await.unwrap();
    cat.write(b"one\n").await.unwrap();
    assert!(
        matches!(cat.next_event().await, Some(ProcessEvent::Output { data, .. }) if data[..] == b"one\n"[..])
    );

    proxy.pause();
    let writer = cat.handle();
    let lost_reply = tokio::spawn(async move { writer.write(b"two\n").await });
    // The echo (a binary payload) and the write's reply reached the proxy, not the client.
    common::eventually("the echo and the reply to be held", || {
        proxy.held_contains(b"two\n") && proxy.held_contains(b"accepted")
    })
    .await;
    proxy.cut();
    lost_reply.await.unwrap().unwrap();
    recoveries.wait_for(|n| *n >= 1).await.unwrap();

    cat.write(b"three\n").await.unwrap();
    cat.close_stdin().await.unwrap();
    let rest = cat.collect().await;
    assert_eq!(
        String::from_utf8_lossy(&rest.output),
        "two\nthree\n",
        "each byte exactly once, in order"
    );
    assert!(rest.gaps.is_empty() && rest.failure.is_none(), "{rest:?}");
}

/// A process that wrote more than one read's budget (4 MiB) and ended while the client's
/// connection was lost: the catch-up reads, cut at the budget, deliver every byte, then the
/// exit and the end, never the end first.
#[tokio::test]
async fn a_catch_up_longer_than_one_read_delivers_every_byte_before_the_end() {
    const BYTES: usize = 6_000_000;
    let daemon = Daemon::start();
    let proxy = Proxy::start(&daemon.url).await;
    let client = connect(&proxy.url).await;
    let mut recoveries = client.recoveries();
    let script = format!("read go; head -c {BYTES} /dev/zero | tr '\\0' a; exit 3");
    let mut process = client
        .start(command(&["sh", "-c", &script]).stdin())
        .await
        .unwrap();
    proxy.pause();
    let writer = process.handle();
    let go = tokio::spawn(async move { writer.write(b"go\n").await });
    common::eventually("the whole output and the end to reach the proxy", || {
        proxy.held_contains(b"process/closed")
    })
    .await;
    proxy.cut();
    go.await.unwrap().unwrap();
    recoveries.wait_for(|n| *n >= 1).await.unwrap();
    let collected = process.collect().await;
    assert!(
        collected.gaps.is_empty() && collected.failure.is_none(),
        "{:?} {:?}",
        collected.gaps,
        collected.failure
    );
    assert_eq!(collected.output.len(), BYTES, "every byte, before the end");
    assert!(collected.output.iter().all(|&b| b == b'a'));
    assert_eq!(collected.exit_code, Some(3));
}

/// While the daemon still sees the old connection, resuming gets -32010; the client retries
/// until the old connection is gone.
#[tokio::test]
async fn resume_waits_out_a_session_still_attached_elsewhere() {
    let daemon = Daemon::start();
    let proxy = Proxy::start(&daemon.url).await;
    let client = connect(&proxy.url).await;
    let mut process = client
        .start(command(&["sh", "-c", "read x; echo got $x"]).stdin())
        .await
        .unwrap();
    let mut recoveries = client.recoveries();
    proxy.keep_daemon_side(true);
    proxy.cut();
    // Several attempts fail with -32010 meanwhile.
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        *recoveries.borrow_and_update(),
        0,
        "still attached elsewhere"
    );
    proxy.keep_daemon_side(false);
    recoveries.wait_for(|n| *n >= 1).await.unwrap();
    process.write(b"it\n").await.unwrap();
    assert_eq!(process.collect().await.output, b"got it\n");
}

/// Output evicted before the client could get it is an explicit gap event, and the events
/// after it still arrive.
#[tokio::test]
async fn evicted_output_surfaces_as_a_gap() {
    let daemon = Daemon::start_with(&["--output-retention-bytes", "4096"], &[]);
    let proxy = Proxy::start(&daemon.url).await;
    let client = connect(&proxy.url).await;
    let script = "read x; head -c 300000 /dev/zero; sleep 0.2; echo end";
    let mut process = client
        .start(command(&["sh", "-c", script]).stdin())
        .await
        .unwrap();
    proxy.pause();
    let writer = process.handle();
    tokio::spawn(async move { writer.write(b"go\n").await });
    // What went to the connection before it was cut was never received: the daemon holds the
    // child back meanwhile, and evicts only once the session is detached (and the client away).
    common::eventually("the output to be held", || proxy.held_contains(b"\0\0\0\0")).await;
    proxy.refuse(true);
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(800)).await;
    proxy.refuse(false);
    let mut gaps = Vec::new();
    let mut tail = Vec::new();
    let mut exit = None;
    while let Some(event) = process.next_event().await {
        match event {
            ProcessEvent::Gap { from_seq, to_seq } => gaps.push((from_seq, to_seq)),
            ProcessEvent::Output { data, .. } => tail.extend_from_slice(&data),
            ProcessEvent::Exited { exit_code, .. } => exit = Some(exit_code),
            ProcessEvent::Closed { .. } | ProcessEvent::InputWait { .. } => {}
            ProcessEvent::Failed { message } => panic!("{message}"),
        }
    }
    assert!(!gaps.is_empty(), "the loss must be reported");
    assert!(tail.ends_with(b"end\n"), "later output still arrives");
    assert!(tail.len() < 300_000, "evicted bytes are not invented");
    assert_eq!(exit, Some(0));
}

/// A session that expired while the client was away fails its processes explicitly.
#[tokio::test]
async fn an_expired_session_fails_processes_and_calls() {
    let daemon = Daemon::start_with(&["--session-ttl", "200ms"], &[]);
    let proxy = Proxy::start(&daemon.url).await;
    let client = connect(&proxy.url).await;
    let mut process = client.start(command(&["sleep", "30"])).await.unwrap();
    proxy.refuse(true);
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(600)).await;
    proxy.refuse(false);
    match process.next_event().await {
        Some(ProcessEvent::Failed { message }) => {
            assert!(message.contains("unknown session"), "{message}")
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(process.next_event().await.is_none());
    let error = client.start(command(&["true"])).await.unwrap_err();
    assert!(matches!(error, exec_server_client::Error::SessionLost(_)));
}

/// A session can be taken over explicitly, by id, from a new client.
#[tokio::test]
async fn a_new_client_resumes_a_session_by_id() {
    let daemon = Daemon::start();
    let first = connect(&daemon.url).await;
    let session = first.session_id().to_owned();
    let process = first
        .start(command(&["sh", "-c", "echo early; sleep 30"]))
        .await
        .unwrap();
    let id = process.id().to_owned();
    first.close().await;
    let mut options = ClientOptions::new(daemon.url.clone());
    options.resume_session_id = Some(session.clone());
    let second = Client::connect(options).await.unwrap();
    assert_eq!(second.session_id(), session);
    let read = second
        .call(
            "process/read",
            // The echo may not have run yet: wait for it.
            serde_json::json!({"processId": id, "afterSeq": 0, "waitMs": 10_000}),
        )
        .await
        .unwrap();
    assert_eq!(read["chunks"][0]["seq"], 1);
    let running = second
        .call("process/terminate", serde_json::json!({"processId": id}))
        .await
        .unwrap();
    assert_eq!(running["running"], true);
}

#[tokio::test]
async fn a_bearer_token_is_sent() {
    let daemon = Daemon::start_with(&["--connection-token", "s3cret"], &[]);
    let refused = Client::connect(ClientOptions::new(daemon.url.clone())).await;
    assert!(matches!(
        refused,
        Err(exec_server_client::Error::Connect(_))
    ));
    let options = ClientOptions::new(daemon.url.clone()).token(Some("s3cret".into()));
    let client = Client::connect(options).await.unwrap();
    let mut process = client.start(command(&["true"])).await.unwrap();
    assert_eq!(process.collect().await.exit_code, Some(0));
}

/// Uploads and downloads stream block by block; a reader whose connection dropped reopens its
/// handle and goes on.
#[tokio::test]
async fn files_stream_both_ways_across_a_dropped_connection() {
    let daemon = Daemon::start();
    let client = connect(&daemon.url).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.bin");
    let uri = exec_server_client::path_uri(path.to_str().unwrap()).unwrap();
    let data: Vec<u8> = (0..3_500_000u32).map(|i| (i % 241) as u8).collect();
    client
        .upload(&uri, data.len() as u64, |offset, block| {
            let start = offset as usize;
            block.copy_from_slice(&data[start..start + block.len()]);
            Ok(())
        })
        .await
        .unwrap();
    assert!(std::fs::read(&path).unwrap() == data);
    assert_eq!(client.metadata(&uri).await.unwrap().size, data.len() as u64);
    let dir_uri = exec_server_client::path_uri(dir.path().to_str().unwrap()).unwrap();
    let names: Vec<String> = client
        .read_directory(&dir_uri)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.file_name)
        .collect();
    assert_eq!(names, ["data.bin"]);

    let reader = client.open(&uri).await.unwrap();
    let (first, eof) = reader.read_at(0, 10).await.unwrap();
    assert_eq!((&first[..], eof), (&data[..10], false));
    let mut recoveries = client.recoveries();
    client.drop_connection();
    recoveries.wait_for(|n| *n >= 1).await.unwrap();
    let mut copy = Vec::new();
    let total = reader
        .read_all(|block| {
            copy.extend_from_slice(block);
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(total, data.len() as u64);
    assert!(copy == data, "the reopened handle reads the same bytes");
    reader.close().await.unwrap();
    client.write_file(&uri, b"small").await.unwrap();
    assert_eq!(client.read_file(&uri).await.unwrap(), b"small");
}

/// A client closed while it is resuming after a drop must not finish the resume and keep the
/// new connection: that kept the session attached, so it never expired and its processes
/// lived as long as the client's process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_closed_while_it_reconnects_leaves_its_session_detached() {
    let daemon = Daemon::start();
    let mut sessions = Vec::new();
    for k in 0..40u64 {
        let client = connect(&daemon.url).await;
        // Kept alive, as a process handle keeps its client: the closed client lives on.
        let kept = client.clone();
        sessions.push((kept.session_id().to_owned(), kept));
        client.drop_connection();
        tokio::time::sleep(Duration::from_millis(k % 8)).await;
        client.close().await;
    }
    for (session, _kept) in &sessions {
        // The daemon sees each close (or the killed socket) at once; a few seconds is plenty.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let probe = common::Client::connect(&daemon.url).await;
            match probe.initialize(Some(session)).await {
                Ok(_) => break,
                Err(error) => assert!(
                    tokio::time::Instant::now() < deadline,
                    "session {session} stays attached after its client closed: {error}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
