//! The daemon survives itself: killed (even by SIGKILL) and started again on its state
//! directory, it adopts every session and process, with the trees still running, their output
//! kept whole and their stdin writes applied once.

use crate::common::{self, *};
use serde_json::{json, Value};
use std::time::Duration;

/// A daemon keeping its state in `dir`.
fn daemon_on(dir: &std::path::Path) -> Daemon {
    Daemon::start_with(&[], &[("EXEC_SERVER_STATE_DIR", dir.to_str().unwrap())])
}

/// SIGKILL, as a crash or the OOM killer would.
fn crash(mut daemon: Daemon) {
    daemon.send_signal(libc::SIGKILL);
    daemon.wait_exit(TIMEOUT).expect("the daemon died");
}

/// The pid `process/list` shows for `id`.
async fn listed_pid(client: &Client, id: &str) -> i64 {
    let list = client.call("process/list", json!({})).await;
    let process = list["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["processId"] == id)
        .unwrap_or_else(|| panic!("{id} is not listed: {list}"))
        .clone();
    process["pid"].as_i64().unwrap()
}

/// Reads `id` from `after` until `enough` says the bytes so far suffice (or it closed), none
/// of it evicted; returns the bytes, the last seq read and the last result.
async fn read_until(
    client: &Client,
    id: &str,
    after: u64,
    enough: impl Fn(&[u8]) -> bool,
) -> (Vec<u8>, u64, Value) {
    let read = common::read_until(client, id, after, enough).await;
    assert!(!read.truncated, "{}", read.last);
    (read.bytes, read.after, read.last)
}

fn numbers(count: usize) -> Vec<u8> {
    (1..=count)
        .map(|i| format!("{i}\n"))
        .collect::<String>()
        .into_bytes()
}

#[tokio::test]
async fn a_killed_daemon_loses_no_line_and_no_process() {
    let state = private_tempdir();
    let daemon = daemon_on(state.path());
    let (client, session) = daemon.session().await;
    let script = "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); echo $i; \
                  [ $((i % 100)) = 0 ] && sleep 0.05; done";
    client
        .call(
            "process/start",
            start_params("count", &["sh", "-c", script]),
        )
        .await;
    let pid = listed_pid(&client, "count").await;
    // Mid-stream: some lines read, more to come.
    let (mut seen, after, _) = read_until(&client, "count", 0, |bytes| bytes.len() > 2000).await;
    crash(daemon);
    assert!(pid_alive(pid as i32), "the process died with the daemon");
    // Output goes on while no daemon runs.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let daemon = daemon_on(state.path());
    let client = daemon.resume(&session).await;
    assert_eq!(listed_pid(&client, "count").await, pid);
    let (rest, _, last) = read_until(&client, "count", after, |_| false).await;
    seen.extend(rest);
    assert_eq!(
        String::from_utf8_lossy(&seen),
        String::from_utf8_lossy(&numbers(3000))
    );
    assert_eq!(last["exitCode"], 0, "{last}");
}

/// `process/write` of `data` as `write_id`; returns the status.
async fn write(client: &Client, id: &str, write_id: &str, data: &[u8]) -> Value {
    let result = client
        .call(
            "process/write",
            json!({"processId": id, "writeId": write_id, "chunk": b64(data)}),
        )
        .await;
    result["status"].clone()
}

#[tokio::test]
async fn a_write_retried_across_a_restart_lands_once() {
    let state = private_tempdir();
    let daemon = daemon_on(state.path());
    let (client, session) = daemon.session().await;
    let mut params = start_params("cat", &["cat"]);
    params["pipeStdin"] = json!(true);
    client.call("process/start", params).await;
    write(&client, "cat", "first", b"one\n").await;
    let (_, after, _) = read_until(&client, "cat", 0, |bytes| bytes == b"one\n").await;
    crash(daemon);

    let daemon = daemon_on(state.path());
    let client = daemon.resume(&session).await;
    // The client never saw the first write's reply: it retries it.
    assert_eq!(write(&client, "cat", "first", b"one\n").await, "accepted");
    assert_eq!(write(&client, "cat", "second", b"two\n").await, "accepted");
    client
        .call("process/closeStdin", json!({"processId": "cat"}))
        .await;
    let (rest, _, last) = read_until(&client, "cat", after, |_| false).await;
    assert_eq!(String::from_utf8_lossy(&rest), "two\n");
    assert_eq!(last["exitCode"], 0, "{last}");
}

#[tokio::test]
async fn a_terminal_session_survives_with_its_scrollback() {
    let state = private_tempdir();
    let daemon = daemon_on(state.path());
    let (client, session) = daemon.session().await;
    let mut params = start_params("shell", &["bash", "--norc", "--noprofile", "-i"]);
    params["tty"] = json!(true);
    params["env"]["PS1"] = json!("$ ");
    client.call("process/start", params).await;
    let pid = listed_pid(&client, "shell").await;
    write(&client, "shell", "1", b"echo before-$((40+2))\n").await;
    let contains =
        |needle: &'static str| move |bytes: &[u8]| String::from_utf8_lossy(bytes).contains(needle);
    read_until(&client, "shell", 0, contains("before-42")).await;
    crash(daemon);

    let daemon = daemon_on(state.path());
    let client = daemon.resume(&session).await;
    assert_eq!(listed_pid(&client, "shell").await, pid);
    // The scrollback from the first daemon is all there.
    let (scrollback, after, _) = read_until(&client, "shell", 0, contains("before-42")).await;
    assert!(String::from_utf8_lossy(&scrollback).contains("echo before-"));
    write(&client, "shell", "2", b"echo after-$((1+1)); exit 7\n").await;
    let (rest, _, last) = read_until(&client, "shell", after, |_| false).await;
    assert!(
        String::from_utf8_lossy(&rest).contains("after-2"),
        "{rest:?}"
    );
    assert_eq!(last["exitCode"], 7, "{last}");
}

#[tokio::test]
async fn a_process_that_ends_while_no_daemon_runs_is_reported_whole() {
    let state = private_tempdir();
    let daemon = daemon_on(state.path());
    let (client, session) = daemon.session().await;
    let script = "echo early; sleep 0.3; echo late >&2; exit 3";
    client
        .call(
            "process/start",
            start_params("short", &["sh", "-c", script]),
        )
        .await;
    read_until(&client, "short", 0, |bytes| bytes == b"early\n").await;
    crash(daemon);
    tokio::time::sleep(Duration::from_millis(800)).await;

    let daemon = daemon_on(state.path());
    let client = daemon.resume(&session).await;
    let (bytes, _, last) = read_until(&client, "short", 0, |_| false).await;
    assert_eq!(String::from_utf8_lossy(&bytes), "early\nlate\n");
    assert_eq!(last["exitCode"], 3, "{last}");
}

#[tokio::test]
async fn an_adopted_session_still_expires_and_kills_its_tree() {
    let state = private_tempdir();
    let daemon = daemon_on(state.path());
    let client = Client::connect(&daemon.url).await;
    let result = client
        .request(
            "initialize",
            json!({"clientName": "e2e", "onDisconnect": "keep", "sessionTtlMs": 1500}),
        )
        .await
        .unwrap();
    client.notify("initialized", json!({})).await;
    assert!(result["sessionId"].is_string());
    client
        .call(
            "process/start",
            start_params("sleeper", &["sh", "-c", "sleep 600 & exec sleep 600"]),
        )
        .await;
    let pid = listed_pid(&client, "sleeper").await as i32;
    crash(daemon);
    let _daemon = daemon_on(state.path());
    assert!(pid_alive(pid));
    eventually("the expired session's tree to be killed", || {
        !pid_alive(pid)
    })
    .await;
    let processes = state.path().join("processes");
    eventually("the process's state to be removed", || {
        kept_processes(&processes) == 0
    })
    .await;
}

#[tokio::test]
async fn a_sandbox_can_neither_read_the_state_dir_nor_reach_a_supervisor() {
    let state = private_tempdir();
    let daemon = daemon_on(state.path());
    let (client, _) = daemon.session().await;
    let mut params = start_params(
        "secret",
        &["sh", "-c", "echo the-secret-$((6*7)); exec cat"],
    );
    params["pipeStdin"] = json!(true);
    client.call("process/start", params).await;
    read_until(&client, "secret", 0, |bytes| bytes == b"the-secret-42\n").await;
    let processes = state.path().join("processes");
    let dir = std::fs::read_dir(&processes)
        .unwrap()
        .flatten()
        .find(|entry| !entry.file_name().to_string_lossy().starts_with('.'))
        .unwrap()
        .path();
    // Everything readable, as the common workspace-write profile has it.
    let dirs = crate::sandbox_support::Dirs::new();
    let sandbox = crate::sandbox_support::workspace_write(&dirs.ws, "enabled");
    let probe = format!(
        "cat {dir}/out.0; ls {state}; python3 -c 'import socket; \
         s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect(\"{dir}/sock\"); print(\"connected\", s.recv(1))'",
        dir = dir.display(),
        state = state.path().display()
    );
    let outcome = crate::sandbox_support::sh(&client, "probe", &dirs.ws, &sandbox, &probe).await;
    assert!(!outcome.output.contains("the-secret-42"), "{outcome:?}");
    assert!(!outcome.output.contains("version"), "listed: {outcome:?}");
    assert!(!outcome.output.contains("connected"), "{outcome:?}");
    assert_ne!(outcome.code, 0, "{outcome:?}");
    // The supervisor is untouched: the process still runs and takes input.
    write(&client, "secret", "w", b"still\n").await;
    read_until(&client, "secret", 0, |bytes| bytes.ends_with(b"still\n")).await;
}

/// Open descriptors of `pid`.
fn descriptors(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[tokio::test]
async fn retained_exited_processes_hold_no_descriptors() {
    for state in [None, Some("none")] {
        let args: Vec<&str> = state.map_or(vec![], |s| vec!["--state-dir", s]);
        let daemon = Daemon::start_with(&args, &[]);
        let (client, _) = daemon.session().await;
        client
            .call("process/start", start_params("warm", &["true"]))
            .await;
        client.events_until_closed("warm").await;
        let before = descriptors(daemon.pid());
        for n in 0..40 {
            let id = format!("p{n}");
            client
                .call("process/start", start_params(&id, &["true"]))
                .await;
            client.events_until_closed(&id).await;
        }
        // Still retained (readable), yet holding nothing open (a few descriptors come and go:
        // the spare process directories made ahead).
        let read = client
            .call("process/read", json!({"processId": "p0"}))
            .await;
        assert_eq!(read["closed"], true, "{read}");
        let after = descriptors(daemon.pid());
        assert!(
            after <= before + 15,
            "{state:?}: {before} descriptors before, {after} after 40 retained processes"
        );
    }
}

#[tokio::test]
async fn a_timeout_still_ends_an_adopted_process_on_time() {
    let state = private_tempdir();
    let daemon = daemon_on(state.path());
    let (client, session) = daemon.session().await;
    let mut params = start_params("slow", &["sleep", "600"]);
    params["limits"] = json!({"timeoutMs": 1500});
    let started = std::time::Instant::now();
    client.call("process/start", params).await;
    crash(daemon);

    let daemon = daemon_on(state.path());
    let client = daemon.resume(&session).await;
    let (_, _, last) = tokio::time::timeout(TIMEOUT, read_until(&client, "slow", 0, |_| false))
        .await
        .expect("the timeout ends the adopted process");
    assert_eq!(last["reason"], "timeout", "{last}");
    // Counted from the start, not from the adoption.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(10),
        "{took:?}"
    );
}

/// A busy stream's last chunk is journaled only before a reader sees it (it may still grow):
/// a crash mid-stream, with that chunk unjournaled and the client attached, still loses and
/// repeats nothing for a client that resumes from the last seq it decoded.
#[tokio::test]
async fn a_crash_while_attached_to_a_busy_stream_loses_and_repeats_nothing() {
    let state = private_tempdir();
    let daemon = daemon_on(state.path());
    let (client, session) = daemon.session().await;
    // 100 bursts of 10,000 lines: chunks grow while the client lags behind, and the stream
    // is still busy when the daemon dies.
    let script = "i=0; while [ $i -lt 100 ]; do seq $((i*10000+1)) $((i*10000+10000)); \
                  i=$((i+1)); sleep 0.02; done";
    client
        .call("process/start", start_params("busy", &["sh", "-c", script]))
        .await;
    let (mut seen, mut after) = (Vec::new(), 0);
    while seen.len() < 1_500_000 {
        let event = client.next_notification().await;
        assert_eq!(event["params"]["processId"], "busy", "{event}");
        if event["method"] == "process/output" {
            seen.extend(unb64(&event["params"]["chunk"]));
        }
        let seq = event["params"]["seq"].as_u64().unwrap();
        assert_eq!(seq, after + 1, "no gap before the crash");
        after = seq;
    }
    crash(daemon);

    let daemon = daemon_on(state.path());
    let client = daemon.resume(&session).await;
    let (rest, _, last) = read_until(&client, "busy", after, |_| false).await;
    seen.extend(rest);
    let expected: String = (1..=1_000_000).map(|i| format!("{i}\n")).collect();
    assert!(
        seen == expected.as_bytes(),
        "{} bytes against {}; first difference at {:?}",
        seen.len(),
        expected.len(),
        seen.iter()
            .zip(expected.as_bytes())
            .position(|(a, b)| a != b)
    );
    assert_eq!(last["exitCode"], 0, "{last}");
}

/// The inode numbers of the directories in the state directory's `processes`.
fn process_dir_inodes(state: &std::path::Path) -> Vec<u64> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::read_dir(state.join("processes"))
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap().ino())
        .collect()
}

/// Issue 43: a process's directory, once the process is done with, is emptied and taken by a
/// later start instead of removed (a launch creates no file), also by a successor daemon; and
/// what a successor adopts from a recycled directory is its last process alone, with none of
/// an earlier one's output.
#[tokio::test]
async fn process_directories_are_recycled_and_adopted_with_nothing_of_earlier_processes() {
    let state = private_tempdir();
    let daemon = Daemon::start_with(
        &["--exited-retention", "100ms"],
        &[("EXEC_SERVER_STATE_DIR", state.path().to_str().unwrap())],
    );
    let mut seen = std::collections::BTreeSet::new();
    for n in 0..12 {
        // A connection each, which leaves: a process is done with once its events are known
        // to have reached a client (or the client left) and the retention passed.
        let (client, _) = daemon.session().await;
        let id = format!("old{n}");
        let script = format!("echo old-out-{n}; echo old-err-{n} >&2");
        client
            .call("process/start", start_params(&id, &["sh", "-c", &script]))
            .await;
        client.events_until_closed(&id).await;
        client.abort();
        tokio::time::sleep(Duration::from_millis(300)).await;
        seen.extend(process_dir_inodes(state.path()));
    }
    assert!(
        seen.len() <= 6,
        "12 processes one after another made {} process directories",
        seen.len()
    );
    let (client, session) = daemon.session().await;
    client
        .call(
            "process/start",
            start_params("fresh", &["sh", "-c", "echo new; sleep 30"]),
        )
        .await;
    read_until(&client, "fresh", 0, |bytes| bytes == b"new\n").await;
    assert!(seen.is_superset(&process_dir_inodes(state.path()).into_iter().collect()));
    drop(client);
    crash(daemon);

    let daemon = daemon_on(state.path());
    let client = daemon.resume(&session).await;
    let list = client.call("process/list", json!({})).await;
    let ids: Vec<&Value> = (list["processes"].as_array().unwrap().iter())
        .map(|p| &p["processId"])
        .collect();
    assert_eq!(ids, [&json!("fresh")], "{list}");
    let params = json!({"processId": "fresh", "afterSeq": 0, "waitMs": 300});
    let read = client.call("process/read", params).await;
    let chunks = read["chunks"].as_array().unwrap();
    let bytes: Vec<u8> = chunks.iter().flat_map(|c| unb64(&c["chunk"])).collect();
    assert_eq!(String::from_utf8_lossy(&bytes), "new\n", "{read}");
    // The successor takes the spare directories its predecessor left.
    client
        .call("process/start", start_params("after", &["echo", "after"]))
        .await;
    let (bytes, _) = read_all(&client, "after").await;
    assert_eq!(bytes, b"after\n");
    assert!(seen.is_superset(&process_dir_inodes(state.path()).into_iter().collect()));
    client
        .call("process/terminate", json!({"processId": "fresh"}))
        .await;
}
