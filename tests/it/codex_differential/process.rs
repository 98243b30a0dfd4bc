//! Upstream's process tests on the wire (`codex-rs/exec-server/tests/process.rs` and the
//! remote cases of `exec_process.rs`): start, stdin, exit codes and output as an agent's
//! commands see them. A process's notifications come whenever it runs, so replies alone are
//! compared; output is read once the process closed (a read after its last seq waits for
//! that), so both daemons report the same chunks.

use super::{
    assert_equal, assert_same, handshaken, nothing, run_both, run_both_with, Both, Scenario,
};
use crate::common::{Client, TIMEOUT};
use serde_json::{json, Value};

fn start(id: &str, script: &str, pipe_stdin: Option<bool>) -> Value {
    let mut params = json!({"processId": id, "argv": ["/bin/sh", "-c", script],
        "cwd": "file:///", "env": {}, "tty": false, "arg0": null});
    if let Some(pipe) = pipe_stdin {
        params["pipeStdin"] = json!(pipe);
    }
    params
}

fn write(id: &str, chunk: &str, write_id: &str) -> Value {
    json!({"processId": id, "chunk": chunk, "writeId": write_id})
}

/// Reads `id` once its `closed` (seq `last`) is out, then all it retained.
pub(super) fn read_when_closed(scenario: Scenario, first_id: i64, id: &str, last: u64) -> Scenario {
    let wait = json!({"processId": id, "afterSeq": last - 1, "waitMs": 10_000});
    scenario
        .request(first_id, "process/read", wait)
        .then()
        .request(first_id + 1, "process/read", json!({"processId": id}))
}

/// Upstream: `process.rs` `exec_server_starts_process_over_websocket` and `exec_process.rs`
/// `exec_process_starts_and_exits`, `_streams_output` and `_pushes_events`: `sandboxType`
/// `none`, stdout and stderr chunks in order, then exit code 7 and the close.
#[tokio::test]
async fn exec_server_starts_process_and_reports_output_and_exit() {
    let events =
        "printf 'event output\\n'; sleep 0.1; printf 'event err\\n' >&2; sleep 0.1; exit 7";
    let scenario = Scenario::initialized()
        .replies_only()
        .request(1, "process/start", start("proc-1", "true", Some(false)))
        .request(2, "process/start", start("proc-events", events, None))
        .then();
    let scenario = read_when_closed(scenario, 3, "proc-1", 2);
    let scenario = read_when_closed(scenario, 5, "proc-events", 4);
    let replies = assert_same(&scenario, nothing).await;
    assert_eq!(
        replies[0]["result"]["sandboxType"], "none",
        "{}",
        replies[0]
    );
    assert_eq!(replies[5]["result"]["exitCode"], 7, "{}", replies[5]);
}

/// Upstream: `exec_server_defaults_omitted_pipe_stdin_to_closed_stdin` and
/// `exec_process_rejects_write_without_pipe_stdin`: without `pipeStdin` a write is
/// `stdinClosed` and the program reads end of file.
#[tokio::test]
async fn exec_server_defaults_omitted_pipe_stdin_to_closed_stdin() {
    let script = "sleep 0.3; if IFS= read -r line; then printf 'read:%s\\n' \"$line\"; \
        else printf 'eof\\n'; fi";
    let scenario = Scenario::initialized()
        .replies_only()
        .request(1, "process/start", start("p", script, None))
        .then()
        .request(2, "process/write", write("p", "aWdub3JlZAo=", "w"))
        .then();
    let (mut ours, mut codex) = run_both(&read_when_closed(scenario, 3, "p", 3), nothing).await;
    blank_output_seqs(&mut ours, &mut codex, 3);
    assert_equal(&ours, &codex);
    assert_eq!(ours[1]["result"]["status"], "stdinClosed", "{}", ours[1]);
    assert_eq!(ours[3]["result"]["chunks"][0]["chunk"], "ZW9mCg==", "eof");
}

/// Upstream: `exec_server_dedupes_retried_process_write_ids` and
/// `exec_process_write_then_read_without_tty`: a retried `writeId` is accepted again but
/// written once.
#[tokio::test]
async fn exec_server_dedupes_retried_process_write_ids() {
    let script = "IFS= read -r first; IFS= read -r second; \
        printf 'line:%s\\nline:%s\\n' \"$first\" \"$second\"";
    let mut scenario = Scenario::initialized()
        .replies_only()
        .request(1, "process/start", start("p", script, Some(true)))
        .then();
    for (id, (write_id, chunk)) in [
        ("w1", "Zmlyc3QK"),
        ("w1", "Zmlyc3QK"),
        ("w2", "c2Vjb25kCg=="),
    ]
    .into_iter()
    .enumerate()
    {
        scenario = scenario
            .request(2 + id as i64, "process/write", write("p", chunk, write_id))
            .then();
    }
    let (mut ours, mut codex) = run_both(&read_when_closed(scenario, 5, "p", 3), nothing).await;
    blank_output_seqs(&mut ours, &mut codex, 5);
    assert_equal(&ours, &codex);
    assert_eq!(
        ours[5]["result"]["chunks"][0]["chunk"], "bGluZTpmaXJzdApsaW5lOnNlY29uZAo=",
        "{}",
        ours[5]
    );
}

/// codex numbers a process's output after its exit's seq or before it, as the two race there
/// (1 or 2, 2 or 3); ours always before. Seqs only order events: the output chunks of reply
/// `reply` are compared without them.
fn blank_output_seqs(ours: &mut [Value], codex: &mut [Value], reply: usize) {
    for replies in [ours, codex] {
        let chunks = replies[reply]["result"]["chunks"].as_array_mut().unwrap();
        for chunk in chunks {
            chunk["seq"] = json!("{seq}");
        }
    }
}

/// Upstream: `exec_process_signal_interrupts_process`: `process/signal` `interrupt` reaches
/// the program's trap once it is ready, and its exit code is the trap's.
#[tokio::test]
async fn exec_process_signal_interrupts_process() {
    let script = "trap 'printf \"signal:2\\n\"; exit 7' INT; printf 'ready\\n'; \
        while :; do sleep 0.05; done";
    let ready = json!({"processId": "p", "afterSeq": 0, "waitMs": 10_000});
    let scenario = Scenario::initialized()
        .replies_only()
        .request(1, "process/start", start("p", script, None))
        .then()
        .request(2, "process/read", ready)
        .then()
        .request(
            3,
            "process/signal",
            json!({"processId": "p", "signal": "interrupt"}),
        )
        .then();
    let (mut ours, mut codex) = run_both(&read_when_closed(scenario, 4, "p", 4), nothing).await;
    blank_output_seqs(&mut ours, &mut codex, 4);
    assert_equal(&ours, &codex);
    assert_eq!(ours[4]["result"]["exitCode"], 7, "{}", ours[4]);
}

/// Upstream: `exec_server_resumes_detached_session_without_killing_processes`: a process
/// outlives its connection; a second connection resumes the session (retrying while the first
/// is still attached, -32010), gets the same session id, finds the process running and
/// terminates it.
#[tokio::test]
async fn exec_server_resumes_detached_session_without_killing_processes() {
    let both = Both::start();
    let mut outcomes = Vec::new();
    for url in both.urls() {
        outcomes.push(resumed_session(url).await);
    }
    assert_equal(&outcomes[0], &outcomes[1]);
    assert_eq!(
        outcomes[0],
        [
            json!({"exited": false, "closed": false, "failure": null}),
            json!({"running": true})
        ]
    );
}

/// What a resumed session says of the process its first connection started.
async fn resumed_session(url: &str) -> Vec<Value> {
    let first = Client::connect(url).await;
    let session = first.initialize(None).await.unwrap();
    let start = start("proc-resume", "IFS= read -r line", Some(true));
    first.call("process/start", start).await;
    first.close().await;
    let second = Client::connect(url).await;
    let resumed = tokio::time::timeout(TIMEOUT, async {
        loop {
            match second.initialize(Some(&session)).await {
                Ok(resumed) => break resumed,
                Err(error) if error["code"] == -32010 => {
                    tokio::time::sleep(std::time::Duration::from_millis(25)).await;
                }
                Err(error) => panic!("resume failed: {error}"),
            }
        }
    })
    .await
    .expect("the session detaches in time");
    assert_eq!(resumed, session);
    let read = json!({"processId": "proc-resume", "afterSeq": null, "waitMs": 0});
    let read = second.call("process/read", read).await;
    let terminate = json!({"processId": "proc-resume"});
    vec![
        json!({"exited": read["exited"], "closed": read["closed"], "failure": read["failure"]}),
        second.call("process/terminate", terminate).await,
    ]
}

/// Every chunk `id` sent until it closed, read with long polls, and the last read.
pub(super) async fn chunks_until_closed(client: &Client, id: &str) -> (Vec<Value>, Value) {
    let (mut chunks, mut after_seq) = (Vec::new(), Value::Null);
    loop {
        let read = json!({"processId": id, "afterSeq": after_seq, "waitMs": 2_000});
        let read = client.call("process/read", read).await;
        chunks.extend(read["chunks"].as_array().unwrap().iter().cloned());
        if read["closed"] == true {
            return (chunks, read);
        }
        after_seq = json!(read["nextSeq"].as_u64().unwrap() - 1);
    }
}

/// The text of the `chunks` of `stream`, or of every stream.
pub(super) fn text(chunks: &[Value], stream: Option<&str>) -> String {
    let bytes: Vec<u8> = chunks
        .iter()
        .filter(|chunk| stream.is_none_or(|stream| chunk["stream"] == stream))
        .flat_map(|chunk| crate::common::unb64(&chunk["chunk"]))
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Everything `id` printed until it closed, and its exit code.
async fn output_until_closed(client: &Client, id: &str) -> (String, Value) {
    let (chunks, last) = chunks_until_closed(client, id).await;
    (text(&chunks, None), last["exitCode"].clone())
}

/// Upstream: `exec_process_write_then_read` (tty): the line written reaches the program
/// through the terminal, whose echo and answer come back joined (their chunks may split
/// differently).
#[tokio::test]
async fn exec_process_write_then_read_on_a_tty() {
    let both = Both::start();
    let mut outcomes = Vec::new();
    for url in both.urls() {
        let client = handshaken(url).await;
        let mut start = start(
            "tty",
            "IFS= read line; printf 'from-stdin:%s\\n' \"$line\"",
            None,
        );
        start["tty"] = json!(true);
        client.call("process/start", start).await;
        client
            .call("process/write", write("tty", "aGVsbG8K", "w"))
            .await;
        outcomes.push(output_until_closed(&client, "tty").await);
    }
    assert_eq!(outcomes[0], outcomes[1]);
    assert!(outcomes[0].0.contains("from-stdin:hello"), "{outcomes:?}");
}

/// Upstream: `exec_process_retains_output_after_exit_until_streams_close` (a background child
/// holding stdout in place of upstream's helper binary): the exit is reported before the
/// output its child writes later, and the process closes only once that child is done.
#[tokio::test]
async fn exec_process_retains_output_after_exit_until_streams_close() {
    let both = Both::start();
    let mut outcomes = Vec::new();
    for url in both.urls() {
        let client = handshaken(url).await;
        let script = "(sleep 0.3; printf 'late output after exit\\n') & exit 0";
        client
            .call("process/start", start("late", script, None))
            .await;
        let first = json!({"processId": "late", "afterSeq": null, "waitMs": 2_000});
        let first = client.call("process/read", first).await;
        let at_exit = json!({"chunks": first["chunks"], "exitCode": first["exitCode"],
            "closed": first["closed"]});
        outcomes.push((at_exit, output_until_closed(&client, "late").await));
    }
    assert_eq!(outcomes[0], outcomes[1]);
    assert_eq!(
        outcomes[0].0,
        json!({"chunks": [], "exitCode": 0, "closed": false})
    );
    assert_eq!(outcomes[0].1 .0, "late output after exit\n");
}

/// Upstream: `exec_server_keeps_control_requests_live_during_long_reads_and_queued_requests`:
/// with `--concurrent-requests 32`, 33 long-polling reads fill the connection's slots (one
/// queued), yet `environment/info` and `environment/status` answer, and `process/terminate`
/// ends the process, which completes every read, the queued one included.
#[tokio::test]
async fn exec_server_keeps_control_requests_live_during_long_reads_and_queued_requests() {
    let read = json!({"id": 0, "method": "process/read", "params":
        {"processId": "p", "afterSeq": null, "maxBytes": null, "waitMs": 600_000}});
    let mut scenario = Scenario::initialized()
        .replies_only()
        .request(1, "process/start", start("p", "sleep 600", None))
        .then();
    for n in 0..33 {
        let mut read = read.clone();
        read["id"] = json!(100 + n);
        // Awaited with the terminate below: they answer only once the process ended.
        scenario = scenario.frame(read.to_string(), 0);
    }
    let terminate = json!({"id": 4, "method": "process/terminate", "params": {"processId": "p"}});
    scenario = scenario
        .request(2, "environment/info", json!({}))
        .request(3, "environment/status", json!({}))
        .then()
        .frame(terminate.to_string(), 1 + 33);
    let args = ["--concurrent-requests", "32"];
    let (ours, codex) = run_both_with(&scenario, nothing, &args, &[]).await;
    // What each daemon reports of itself and of the ended reads is its own; which requests
    // answered, and what the control ones said, compares.
    let outcome = |replies: &[Value]| -> Vec<Value> {
        replies
            .iter()
            .map(|reply| match reply["id"].as_i64() {
                Some(2) => json!({"id": 2, "answered": reply.get("result").is_some()}),
                Some(id) if id >= 100 => json!({"id": id, "ended": reply["result"]["exited"]}),
                _ => reply.clone(),
            })
            .collect()
    };
    assert_equal(&outcome(&ours), &outcome(&codex));
    assert_eq!(ours.len(), 4 + 33, "{ours:?}");
}
