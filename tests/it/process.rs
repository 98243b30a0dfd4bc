//! `process/*` end to end: the real binary, a real WebSocket, real children.

use crate::common;

use common::*;
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn events_share_one_seq_counter_in_order() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let started = client
        .call(
            "process/start",
            start_params(
                "p1",
                &["sh", "-c", "printf out; sleep 0.1; printf err >&2; exit 7"],
            ),
        )
        .await;
    assert_eq!(started, json!({"processId": "p1", "sandboxType": "none"}));
    let events = client.events_until_closed("p1").await;
    let summary: Vec<(String, u64)> = events
        .iter()
        .map(|e| {
            (
                e["method"].as_str().unwrap().to_owned(),
                e["params"]["seq"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("process/output".to_owned(), 1),
            ("process/output".to_owned(), 2),
            ("process/exited".to_owned(), 3),
            ("process/closed".to_owned(), 4)
        ]
    );
    assert_eq!(events[0]["params"]["stream"], "stdout");
    assert_eq!(unb64(&events[0]["params"]["chunk"]), b"out");
    assert_eq!(events[1]["params"]["stream"], "stderr");
    assert_eq!(events[2]["params"]["exitCode"], 7);
}

#[tokio::test]
async fn read_replays_everything_after_close() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    client
        .call(
            "process/start",
            start_params("p", &["sh", "-c", "echo session output"]),
        )
        .await;
    client.events_until_closed("p").await;
    let result = client.call("process/read", json!({"processId": "p"})).await;
    assert_eq!(result["chunks"].as_array().unwrap().len(), 1);
    assert_eq!(unb64(&result["chunks"][0]["chunk"]), b"session output\n");
    assert_eq!(result["chunks"][0]["seq"], 1);
    assert_eq!(result["nextSeq"], 4, "nextSeq counts exited and closed");
    assert_eq!(result["exited"], true);
    assert_eq!(result["exitCode"], 0);
    assert_eq!(result["closed"], true);
    assert_eq!(result["failure"], serde_json::Value::Null);
    assert_eq!(result["sandboxDenied"], false);
    assert_eq!(result["firstRetainedSeq"], 1);
    assert_eq!(result["truncated"], false);
}

#[tokio::test]
async fn binary_and_multi_megabyte_output_arrive_complete() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    // 8 MiB of every byte value, twice the retention limit, through notifications.
    let script = "python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)) * 32768)'";
    client
        .call("process/start", start_params("big", &["sh", "-c", script]))
        .await;
    let events = client.events_until_closed("big").await;
    let expected: Vec<u8> = (0..=255u8).cycle().take(256 * 32768).collect();
    let received = output_of(&events);
    assert_eq!(received.len(), expected.len());
    assert!(received == expected, "output must arrive byte for byte");
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["params"]["seq"].as_u64().unwrap())
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "seqs are contiguous"
    );

    // The same through long-polled reads, on a process whose output fits retention.
    client
        .call(
            "process/start",
            start_params(
                "bin",
                &[
                    "python3",
                    "-c",
                    "import sys; sys.stdout.buffer.write(bytes(range(256)) * 4096)",
                ],
            ),
        )
        .await;
    let (bytes, last) = read_all(&client, "bin").await;
    assert!(bytes == (0..=255u8).cycle().take(256 * 4096).collect::<Vec<u8>>());
    assert_eq!(last["exitCode"], 0);
}

#[tokio::test]
async fn terminate_kills_the_whole_process_group() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let pidfile = tempfile::NamedTempFile::new().unwrap();
    let script = format!("sleep 60 & echo $! > {}; wait", pidfile.path().display());
    client
        .call(
            "process/start",
            start_params("tree", &["sh", "-c", &script]),
        )
        .await;
    eventually("grandchild pid written", || {
        std::fs::read_to_string(pidfile.path())
            .unwrap()
            .trim()
            .parse::<i32>()
            .is_ok()
    })
    .await;
    let grandchild: i32 = std::fs::read_to_string(pidfile.path())
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(pid_alive(grandchild));
    assert_eq!(
        client
            .call("process/terminate", json!({"processId": "tree"}))
            .await,
        json!({"running": true})
    );
    let events = client.events_until_closed("tree").await;
    let exited = events
        .iter()
        .find(|e| e["method"] == "process/exited")
        .unwrap();
    assert_eq!(
        exited["params"]["exitCode"], 137,
        "killed by SIGKILL: 128 + 9"
    );
    eventually("grandchild gone", || !pid_alive(grandchild)).await;
    assert_eq!(
        client
            .call("process/terminate", json!({"processId": "tree"}))
            .await,
        json!({"running": false})
    );
    assert_eq!(
        client
            .call("process/terminate", json!({"processId": "never"}))
            .await,
        json!({"running": false})
    );
}

#[tokio::test]
async fn long_poll_does_not_block_later_requests() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    client
        .call("process/start", start_params("quiet", &["sleep", "30"]))
        .await;
    let long_poll = client.request(
        "process/read",
        json!({"processId": "quiet", "waitMs": 4000}),
    );
    let later = async {
        let started = std::time::Instant::now();
        client
            .call(
                "process/signal",
                json!({"processId": "nope", "signal": "interrupt"}),
            )
            .await;
        started.elapsed()
    };
    let (read, elapsed) = tokio::join!(long_poll, later);
    assert!(
        elapsed < Duration::from_millis(3000),
        "a request behind a long-poll took {elapsed:?}"
    );
    let read = read.unwrap();
    assert_eq!(
        read["chunks"],
        json!([]),
        "the long-poll waited out its time with nothing to report"
    );
    assert_eq!(read["exited"], false);
    client
        .call("process/terminate", json!({"processId": "quiet"}))
        .await;
}

#[tokio::test]
async fn long_poll_wakes_on_output() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    client
        .call(
            "process/start",
            start_params("late", &["sh", "-c", "sleep 0.3; echo late"]),
        )
        .await;
    let started = std::time::Instant::now();
    let read = client
        .call(
            "process/read",
            json!({"processId": "late", "waitMs": 10000}),
        )
        .await;
    assert!(started.elapsed() < Duration::from_secs(8));
    assert_eq!(unb64(&read["chunks"][0]["chunk"]), b"late\n");
}

#[tokio::test]
async fn stdin_pipe_write_is_deduplicated_and_closeable() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let mut params = start_params("cat", &["cat"]);
    params["pipeStdin"] = json!(true);
    client.call("process/start", params).await;
    for (id, text) in [("a", "one "), ("a", "one "), ("b", "two")] {
        let reply = client
            .call(
                "process/write",
                json!({"processId": "cat", "chunk": b64(text.as_bytes()), "writeId": id}),
            )
            .await;
        assert_eq!(reply, json!({"status": "accepted"}));
    }
    client
        .call("process/closeStdin", json!({"processId": "cat"}))
        .await;
    let events = client.events_until_closed("cat").await;
    assert_eq!(
        output_of(&events),
        b"one two",
        "a repeated writeId is written once"
    );
    let bad = client
        .request(
            "process/write",
            json!({"processId": "cat", "chunk": "!!", "writeId": "c"}),
        )
        .await
        .unwrap_err();
    assert_eq!(bad["code"], -32602);
    let empty = client
        .request(
            "process/write",
            json!({"processId": "cat", "chunk": "", "writeId": ""}),
        )
        .await
        .unwrap_err();
    assert_eq!(empty["message"], "writeId must not be empty");
    let unknown = client
        .call(
            "process/write",
            json!({"processId": "zzz", "chunk": "", "writeId": "x"}),
        )
        .await;
    assert_eq!(unknown, json!({"status": "unknownProcess"}));
}

#[tokio::test]
async fn stdin_without_pipe_is_closed() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    client
        .call(
            "process/start",
            start_params("eof", &["sh", "-c", "read line || echo eof"]),
        )
        .await;
    let reply = client
        .call(
            "process/write",
            json!({"processId": "eof", "chunk": b64(b"x\n"), "writeId": "1"}),
        )
        .await;
    assert_eq!(reply, json!({"status": "stdinClosed"}));
    let events = client.events_until_closed("eof").await;
    assert_eq!(output_of(&events), b"eof\n");
}

#[tokio::test]
async fn pty_echoes_input_and_merges_streams() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let mut params = start_params(
        "tty",
        &[
            "sh",
            "-c",
            "read line; echo from-stdin:$line; echo err >&2; tty >/dev/null && echo is-a-tty",
        ],
    );
    params["tty"] = json!(true);
    client.call("process/start", params).await;
    client
        .call(
            "process/write",
            json!({"processId": "tty", "chunk": b64(b"hello\n"), "writeId": "1"}),
        )
        .await;
    let events = client.events_until_closed("tty").await;
    let text = String::from_utf8_lossy(&output_of(&events)).into_owned();
    assert!(text.contains("from-stdin:hello"), "{text:?}");
    assert!(
        text.contains("err"),
        "stderr is merged into the terminal: {text:?}"
    );
    assert!(text.contains("is-a-tty"), "{text:?}");
    assert!(events
        .iter()
        .filter(|e| e["method"] == "process/output")
        .all(|e| e["params"]["stream"] == "pty"));
}

#[tokio::test]
async fn pty_resize_reaches_the_child() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let mut params = start_params("size", &["sh", "-c", "stty size; read x; stty size"]);
    params["tty"] = json!(true);
    params["size"] = json!({"rows": 30, "cols": 100});
    client.call("process/start", params).await;
    let first = client.next_notification().await;
    assert!(String::from_utf8_lossy(&unb64(&first["params"]["chunk"])).contains("30 100"));
    client
        .call(
            "process/resize",
            json!({"processId": "size", "rows": 40, "cols": 120}),
        )
        .await;
    client
        .call(
            "process/write",
            json!({"processId": "size", "chunk": b64(b"\n"), "writeId": "1"}),
        )
        .await;
    let events = client.events_until_closed("size").await;
    assert!(String::from_utf8_lossy(&output_of(&events)).contains("40 120"));
    let no_tty = client
        .request(
            "process/resize",
            json!({"processId": "size", "rows": 1, "cols": 1}),
        )
        .await;
    assert!(
        no_tty.is_ok(),
        "a closed PTY process can still be resized harmlessly"
    );
    client
        .call("process/start", start_params("pipes", &["true"]))
        .await;
    let err = client
        .request(
            "process/resize",
            json!({"processId": "pipes", "rows": 1, "cols": 1}),
        )
        .await
        .unwrap_err();
    assert_eq!(err["code"], -32600);
}

#[tokio::test]
async fn start_errors_are_clear() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let empty = client
        .request("process/start", start_params("e", &[]))
        .await
        .unwrap_err();
    assert_eq!(
        empty,
        json!({"code": -32602, "message": "argv must not be empty"})
    );
    let mut native = start_params("n", &["true"]);
    native["cwd"] = json!("/tmp");
    assert_eq!(
        client.request("process/start", native).await.unwrap_err()["code"],
        -32602
    );
    let mut foreign = start_params("w", &["true"]);
    foreign["cwd"] = json!("file:///C:/Windows");
    let err = client.request("process/start", foreign).await.unwrap_err();
    assert_eq!(err["code"], -32602);
    assert!(err["message"]
        .as_str()
        .unwrap()
        .contains("is not valid on this exec-server host"));
    let missing = client
        .request("process/start", start_params("m", &["/no/such/program"]))
        .await
        .unwrap_err();
    assert_eq!(missing["code"], -32603);
    assert!(missing["message"]
        .as_str()
        .unwrap()
        .contains("No such file or directory"));
    // The failed start left no entry behind, so the id is usable.
    client
        .call("process/start", start_params("m", &["true"]))
        .await;
    // A spawn failure names the working directory when that is what is missing.
    let file = tempfile::NamedTempFile::new().unwrap();
    for (cwd, why) in [
        (std::path::Path::new("/nonexistent/cwd"), "does not exist"),
        (file.path(), "is not a directory"),
    ] {
        for tty in [false, true] {
            let mut params = start_params("c", &["true"]);
            params["cwd"] = json!(file_uri(cwd));
            params["tty"] = json!(tty);
            let err = client.request("process/start", params).await.unwrap_err();
            assert_eq!(
                err,
                json!({"code": -32603, "message": format!(
                    "failed to start `true`: the working directory `{}` {why}",
                    cwd.display()
                )}),
                "tty {tty}"
            );
        }
    }
    client
        .call("process/start", start_params("dup", &["sleep", "5"]))
        .await;
    let dup = client
        .request("process/start", start_params("dup", &["true"]))
        .await
        .unwrap_err();
    assert_eq!(
        dup,
        json!({"code": -32600, "message": "process dup already exists"})
    );
    client
        .call("process/terminate", json!({"processId": "dup"}))
        .await;
}

#[tokio::test]
async fn concurrent_duplicate_starts_yield_one_success() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let starts =
        (0..8).map(|_| client.request("process/start", start_params("same", &["sleep", "5"])));
    let outcomes = futures::future::join_all(starts).await;
    assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 1);
    client
        .call("process/terminate", json!({"processId": "same"}))
        .await;
}

#[tokio::test]
async fn env_policy_arg0_and_cwd_apply() {
    let daemon = Daemon::start_with(
        &[],
        &[("EXEC_TEST_VISIBLE", "yes"), ("EXEC_TEST_SECRET", "hidden")],
    );
    let (client, _) = daemon.session().await;
    let dir = tempfile::tempdir().unwrap();
    let mut params = start_params(
        "env",
        &[
            "sh",
            "-c",
            "echo $0; pwd; echo ${EXEC_TEST_VISIBLE:-unset} ${EXEC_TEST_SECRET:-unset} $OVERLAY",
        ],
    );
    params["arg0"] = json!("renamed");
    params["cwd"] = json!(format!("file://{}", dir.path().display()));
    params["env"] = json!({"OVERLAY": "over"});
    params["envPolicy"] = json!({"inherit": "all", "ignoreDefaultExcludes": false, "exclude": [], "set": {}, "includeOnly": []});
    client.call("process/start", params).await;
    let text = String::from_utf8(output_of(&client.events_until_closed("env").await)).unwrap();
    let canonical = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(
        text,
        format!("renamed\n{}\nyes unset over\n", canonical.display())
    );

    // Without envPolicy the child gets exactly `env`.
    let mut exact = start_params("exact", &["/usr/bin/env"]);
    exact["env"] = json!({"ONLY": "1"});
    client.call("process/start", exact).await;
    assert_eq!(
        output_of(&client.events_until_closed("exact").await),
        b"ONLY=1\n"
    );
}

#[tokio::test]
async fn exit_codes_report_signals() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    client
        .call(
            "process/start",
            start_params("self", &["sh", "-c", "kill -TERM $$"]),
        )
        .await;
    let events = client.events_until_closed("self").await;
    assert_eq!(events[0]["params"]["exitCode"], 143);
    client
        .call("process/start", start_params("int", &["sleep", "30"]))
        .await;
    client
        .call(
            "process/signal",
            json!({"processId": "int", "signal": "interrupt"}),
        )
        .await;
    let events = client.events_until_closed("int").await;
    assert_eq!(events[0]["params"]["exitCode"], 130);
}

#[tokio::test]
async fn closed_waits_for_grandchildren_holding_the_pipes() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    client
        .call(
            "process/start",
            start_params("bg", &["sh", "-c", "(sleep 0.5; echo after) & echo before"]),
        )
        .await;
    let events = client.events_until_closed("bg").await;
    let methods: Vec<&str> = events
        .iter()
        .map(|e| e["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        [
            "process/output",
            "process/exited",
            "process/output",
            "process/closed"
        ]
    );
    assert_eq!(output_of(&events), b"before\nafter\n");
}

#[tokio::test]
async fn exited_processes_are_forgotten_after_retention() {
    let daemon = Daemon::start_with(&["--exited-retention", "200ms"], &[]);
    let (client, _) = daemon.session().await;
    client
        .call("process/start", start_params("r", &["true"]))
        .await;
    client.events_until_closed("r").await;
    assert!(client
        .request("process/read", json!({"processId": "r"}))
        .await
        .is_ok());
    tokio::time::sleep(Duration::from_millis(600)).await;
    let gone = client
        .request("process/read", json!({"processId": "r"}))
        .await
        .unwrap_err();
    assert_eq!(gone["message"], "unknown process id r");
    client
        .call("process/start", start_params("r", &["true"]))
        .await;
}

#[tokio::test]
async fn read_max_bytes_pages_through_output() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    client
        .call(
            "process/start",
            start_params(
                "pages",
                &[
                    "sh",
                    "-c",
                    "printf aaaa; sleep 0.1; printf bbbb; sleep 0.1; printf cccc",
                ],
            ),
        )
        .await;
    client.events_until_closed("pages").await;
    let first = client
        .call("process/read", json!({"processId": "pages", "maxBytes": 1}))
        .await;
    assert_eq!(
        first["chunks"].as_array().unwrap().len(),
        1,
        "the first chunk always comes"
    );
    assert_eq!(first["nextSeq"], 2);
    let rest = client
        .call(
            "process/read",
            json!({"processId": "pages", "afterSeq": 1, "maxBytes": 8}),
        )
        .await;
    assert_eq!(rest["chunks"].as_array().unwrap().len(), 2);
    assert_eq!(rest["nextSeq"], 4);
}

/// `trace` (the client's span context) is accepted on `process/start` and becomes the parent
/// field of the launch span, so the daemon's log lines of that launch carry it.
#[tokio::test]
async fn start_records_the_client_trace_as_the_launch_span_parent() {
    use std::io::Read as _;
    let mut command = Daemon::command(env!("CARGO_BIN_EXE_exec-server"), &[], &[]);
    command
        .env("EXEC_SERVER_LOG", "info")
        .stderr(std::process::Stdio::piped());
    let mut daemon = Daemon::launch(command);
    let mut stderr = daemon.take_stderr().unwrap();
    let (client, _) = daemon.session().await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut params = start_params("traced", &["true"]);
    params["trace"] = json!({"traceparent": traceparent});
    client.call("process/start", params).await;
    let (_, last) = read_all(&client, "traced").await;
    assert_eq!(last["exitCode"], 0, "{last}");
    drop(client);
    drop(daemon);
    let mut log = String::new();
    stderr.read_to_string(&mut log).unwrap();
    let line = log
        .lines()
        .find(|line| line.contains("process started"))
        .unwrap_or_else(|| panic!("no launch log line in {log}"));
    assert!(line.contains(traceparent), "{line}");
}
