//! A process is its whole tree: whatever detaches (a new session, a double fork, `nohup`)
//! is found, counted and killed with it, on terminate, session expiry, daemon shutdown and
//! daemon death, and never left a zombie.

use crate::common;
use crate::sandbox_support;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

/// Unique `sleep` arguments per test (tests of this file run at once in one machine).
pub(crate) fn tags(test: u32) -> [String; 3] {
    [1, 2, 3].map(|n| format!("{}{test:03}{n}", 4242))
}

/// `setsid`, a `nohup` double fork that ignores HUP and TERM, and a plain foreground child.
pub(crate) fn detaching_script(tags: &[String; 3]) -> String {
    format!(
        "setsid sleep {} & (trap '' HUP TERM; nohup sleep {} >/dev/null 2>&1 &); sleep {}",
        tags[0], tags[1], tags[2]
    )
}

/// Pids of live or zombie `sleep ARG` processes (a zombie keeps its pid and comm, not its
/// cmdline, so zombies are found by the pids seen while they ran; see [`assert_all_gone`]).
pub(crate) fn sleeps(arg: &str) -> Vec<i32> {
    let wanted = format!("sleep\0{arg}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            cmdline.ends_with(wanted.as_bytes()).then_some(pid)
        })
        .collect()
}

/// Waits until every tagged sleep runs; returns their pids.
pub(crate) async fn all_running(tags: &[String; 3]) -> Vec<i32> {
    let mut pids = Vec::new();
    eventually("every sleep of the tree to run", || {
        pids = tags.iter().flat_map(|tag| sleeps(tag)).collect();
        pids.len() == 3
    })
    .await;
    pids
}

/// Not running, and not a zombie either: no /proc entry is left.
pub(crate) fn gone(pid: i32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

pub(crate) async fn assert_all_gone(pids: &[i32], what: &str) {
    eventually(what, || pids.iter().all(|pid| gone(*pid))).await;
}

async fn start_tree(client: &Client, id: &str, tags: &[String; 3], tty: bool) -> Vec<i32> {
    let mut params = start_params(id, &["sh", "-c", &detaching_script(tags)]);
    params["tty"] = json!(tty);
    client.call("process/start", params).await;
    all_running(tags).await
}

#[tokio::test]
async fn terminate_kills_every_detached_descendant_before_the_exit_is_reported() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    for (n, tty) in [(1, false), (2, true)] {
        let tags = tags(n);
        let id = format!("tree-{n}");
        let pids = start_tree(&client, &id, &tags, tty).await;
        let reply = client
            .call("process/terminate", json!({"processId": id}))
            .await;
        assert_eq!(reply["running"], true);
        let events = client.events_until_closed(&id).await;
        let exited = events
            .iter()
            .find(|e| e["method"] == "process/exited")
            .unwrap();
        // The daemon confirmed the tree gone before it reported the exit.
        let left: Vec<_> = pids.iter().filter(|pid| !gone(**pid)).collect();
        assert!(left.is_empty(), "tty {tty}: left {left:?} after {exited}");
        assert_eq!(exited["params"]["reason"], "terminated");
        assert_eq!(exited["params"]["signal"], 9);
        assert!(exited["params"].get("cleanupUnconfirmed").is_none());
    }
}

#[tokio::test]
async fn a_sandboxed_process_tree_is_contained() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dirs = sandbox_support::Dirs::new();
    let tags = tags(3);
    let params = sandbox_support::params(
        "sandboxed",
        &["sh", "-c", &detaching_script(&tags)],
        &dirs.ws,
        sandbox_support::workspace_write(&dirs.ws, "restricted"),
    );
    let started = client.call("process/start", params).await;
    assert_eq!(started["sandboxType"], "linuxSeccomp");
    let pids = all_running(&tags).await;
    client
        .call("process/terminate", json!({"processId": "sandboxed"}))
        .await;
    client.events_until_closed("sandboxed").await;
    let left: Vec<_> = pids.iter().filter(|pid| !gone(**pid)).collect();
    assert!(left.is_empty(), "left {left:?}");
}

#[tokio::test]
async fn a_descendant_that_outlives_its_leader_is_counted_kept_by_terminate_then_killed() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let tag = tags(4)[0].clone();
    let script = format!("sleep {tag} >/dev/null 2>&1 & exit 0");
    client
        .call(
            "process/start",
            start_params("server", &["sh", "-c", &script]),
        )
        .await;
    let (_, last) = read_all(&client, "server").await;
    assert_eq!(last["exitCode"], 0);
    assert_eq!(last["reason"], "exited");
    eventually("the background sleep", || sleeps(&tag).len() == 1).await;
    let pid = sleeps(&tag)[0];
    let read = client
        .call("process/read", json!({"processId": "server"}))
        .await;
    assert_eq!(read["liveDescendants"], 1, "{read}");
    // `process/terminate` after the exit leaves the background job running, as codex's
    // server does (codex's agent terminates every command once it has read its exit).
    let reply = client
        .call("process/terminate", json!({"processId": "server"}))
        .await;
    assert_eq!(reply["running"], false);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        sleeps(&tag),
        [pid],
        "terminate after the exit killed the background job"
    );
    // Closed, exited, and still its tree: the `kill` signal reaches it.
    client
        .call(
            "process/signal",
            json!({"processId": "server", "signal": "kill"}),
        )
        .await;
    assert_all_gone(&[pid], "the background sleep to be killed and reaped").await;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let read: Value = client
            .call("process/read", json!({"processId": "server"}))
            .await;
        if read.get("liveDescendants").is_none() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still live: {read}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn session_expiry_kills_every_detached_descendant() {
    let daemon = Daemon::start_with(&["--session-ttl", "300ms"], &[]);
    let (client, _) = daemon.session().await;
    let pids = start_tree(&client, "tree", &tags(5), false).await;
    let background = tags(6)[0].clone();
    client
        .call(
            "process/start",
            start_params(
                "bg",
                &[
                    "sh",
                    "-c",
                    &format!("sleep {background} >/dev/null 2>&1 & exit 0"),
                ],
            ),
        )
        .await;
    eventually("the background sleep", || sleeps(&background).len() == 1).await;
    let mut all = pids;
    all.extend(sleeps(&background));
    client.abort();
    assert_all_gone(&all, "the trees to die with their session").await;
}

#[tokio::test]
async fn a_start_cut_off_by_a_disconnect_is_tracked_and_killed() {
    let daemon = Daemon::start_with(&["--session-ttl", "200ms"], &[]);
    let dirs = sandbox_support::Dirs::new();
    let tag = tags(7)[0].clone();
    for n in 0..10 {
        let (client, _) = daemon.session().await;
        let params = sandbox_support::params(
            &format!("cut-{n}"),
            &["sh", "-c", &format!("setsid sleep {tag} & sleep {tag}")],
            &dirs.ws,
            sandbox_support::workspace_write(&dirs.ws, "restricted"),
        );
        client
            .send_text(json!({"id": 1, "method": "process/start", "params": params}).to_string())
            .await;
        tokio::time::sleep(Duration::from_millis(n * 3)).await;
        client.abort();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    eventually("every cut-off start's tree to be killed", || {
        sleeps(&tag).is_empty()
    })
    .await;
}

#[tokio::test]
async fn daemon_sigterm_kills_every_tree_and_refuses_new_sessions() {
    let mut daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let tags = tags(8);
    let pids = start_tree(&client, "tree", &tags, false).await;
    daemon.send_signal(libc::SIGTERM);
    // The client still connected hears of the end before its connection closes.
    let events = client.events_until_closed("tree").await;
    let exited = events
        .iter()
        .find(|event| event["method"] == "process/exited")
        .expect("an exit before the close");
    assert_eq!(exited["params"]["reason"], "shutdown", "{events:?}");
    assert!(daemon.wait_exit(TIMEOUT).is_some(), "the daemon exits");
    let left: Vec<_> = pids.iter().filter(|pid| !gone(**pid)).collect();
    assert!(left.is_empty(), "left {left:?} after the daemon's shutdown");
}

/// A plain, a PTY and a sandboxed tree, each with detached members; their pids.
async fn start_three_trees(client: &Client, dirs: &sandbox_support::Dirs, test: u32) -> Vec<i32> {
    let mut pids = start_tree(client, "plain", &tags(test), false).await;
    pids.extend(start_tree(client, "pty", &tags(test + 1), true).await);
    let sandboxed = tags(test + 2);
    client
        .call(
            "process/start",
            sandbox_support::params(
                "sandboxed",
                &["sh", "-c", &detaching_script(&sandboxed)],
                &dirs.ws,
                sandbox_support::workspace_write(&dirs.ws, "enabled"),
            ),
        )
        .await;
    pids.extend(all_running(&sandboxed).await);
    pids
}

#[tokio::test]
async fn trees_die_with_a_daemon_that_keeps_no_state_killed_by_sigkill() {
    let mut daemon = Daemon::start_with(&["--state-dir", "none"], &[]);
    let (client, _) = daemon.session().await;
    let dirs = sandbox_support::Dirs::new();
    let pids = start_three_trees(&client, &dirs, 9).await;
    daemon.send_signal(libc::SIGKILL);
    assert!(daemon.wait_exit(TIMEOUT).is_some());
    // Re-parented to init (or this test's subreaper), which reaps them.
    eventually("every tree to die with its daemon", || {
        pids.iter().all(|pid| !pid_alive(*pid))
    })
    .await;
}

#[tokio::test]
async fn trees_outlive_a_daemon_killed_by_sigkill_and_its_successor_ends_them() {
    let state = private_tempdir();
    let env = [(STATE_DIR_VAR, state.path().to_str().unwrap())];
    let mut daemon = Daemon::start_with(&[], &env);
    let (client, session) = daemon.session().await;
    let dirs = sandbox_support::Dirs::new();
    let pids = start_three_trees(&client, &dirs, 120).await;
    daemon.send_signal(libc::SIGKILL);
    assert!(daemon.wait_exit(TIMEOUT).is_some());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dead: Vec<_> = pids.iter().filter(|pid| !pid_alive(**pid)).collect();
    assert!(dead.is_empty(), "{dead:?} died with the daemon");
    let successor = Daemon::start_with(&[], &env);
    let client = successor.resume(&session).await;
    for id in ["plain", "pty", "sandboxed"] {
        client
            .call("process/terminate", json!({"processId": id}))
            .await;
    }
    // Detached members included: the adopted supervisors still hold every tree.
    eventually("every adopted tree to be killed", || {
        pids.iter().all(|pid| !pid_alive(*pid))
    })
    .await;
}

/// The `process/exited` params of a process that ran to its close.
async fn exited(client: &Client, id: &str) -> Value {
    let events = client.events_until_closed(id).await;
    events
        .into_iter()
        .find(|e| e["method"] == "process/exited")
        .expect("an exit before the close")["params"]
        .clone()
}

#[tokio::test]
async fn a_timeout_kills_the_tree_with_reason_timeout() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let mut params = start_params("sleep", &["sleep", "10"]);
    params["limits"] = json!({"timeoutMs": 200});
    let began = std::time::Instant::now();
    client.call("process/start", params).await;
    let exit = exited(&client, "sleep").await;
    assert!(
        began.elapsed() < Duration::from_secs(1),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(exit["reason"], "timeout");
    assert_eq!(exit["exitCode"], 137);
    assert_eq!(exit["signal"], 9);
    assert!(exit["usage"]["wallMs"].as_u64().unwrap() >= 200, "{exit}");

    // The whole tree, however it detached (a timeout long enough to see all of it start).
    let tags = tags(12);
    let mut params = start_params("slow", &["sh", "-c", &detaching_script(&tags)]);
    params["limits"] = json!({"timeoutMs": 3000});
    client.call("process/start", params).await;
    let pids = all_running(&tags).await;
    let exit = exited(&client, "slow").await;
    assert_eq!(exit["reason"], "timeout");
    let left: Vec<_> = pids.iter().filter(|pid| !gone(**pid)).collect();
    assert!(left.is_empty(), "left {left:?}");
}

#[tokio::test]
async fn exits_report_their_reason_signal_and_tree_usage() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    // The hashing runs in a grandchild (the pipeline's), reaped by the shell: still the tree's.
    client
        .call(
            "process/start",
            start_params(
                "hash",
                &[
                    "sh",
                    "-c",
                    "head -c 200000000 /dev/zero | sha256sum >/dev/null",
                ],
            ),
        )
        .await;
    let exit = exited(&client, "hash").await;
    assert_eq!(exit["reason"], "exited");
    assert_eq!(exit["exitCode"], 0);
    assert!(exit.get("signal").is_none());
    let usage = &exit["usage"];
    assert!(usage["userCpuMs"].as_u64().unwrap() > 0, "{usage}");
    // Supervisors serve one launch after another (the one just freed is taken first): each
    // process's usage is its own tree's, not what its supervisor ran before.
    let own_usage = |id: &'static str, argv: &'static [&'static str]| {
        let client = &client;
        async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            client.call("process/start", start_params(id, argv)).await;
            exited(client, id).await["usage"].clone()
        }
    };
    let after = own_usage("after-hash", &["true"]).await;
    assert!(
        after["userCpuMs"].as_u64().unwrap() < 50,
        "{after} after {usage}"
    );

    client
        .call(
            "process/start",
            start_params(
                "hog",
                &[
                    "python3",
                    "-c",
                    "b = b'x' * (110 << 20); import os; os._exit(3)",
                ],
            ),
        )
        .await;
    let exit = exited(&client, "hog").await;
    assert_eq!(exit["exitCode"], 3);
    assert!(
        exit["usage"]["maxRssKib"].as_u64().unwrap() >= 100 * 1024,
        "{exit}"
    );
    let read = client
        .call("process/read", json!({"processId": "hog"}))
        .await;
    assert_eq!(read["reason"], "exited");
    assert!(read.get("liveDescendants").is_none(), "{read}");
    let after = own_usage("after-hog", &["true"]).await;
    assert!(after["maxRssKib"].as_u64().unwrap() < 50 * 1024, "{after}");

    client
        .call(
            "process/start",
            start_params("self-killed", &["sh", "-c", "kill -TERM $$"]),
        )
        .await;
    let exit = exited(&client, "self-killed").await;
    assert_eq!(exit["reason"], "signaled");
    assert_eq!(exit["signal"], 15);
    assert_eq!(exit["exitCode"], 143);
}

#[tokio::test]
async fn per_process_limits_apply_and_bad_limits_are_refused() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let mut params = start_params("limited", &["sh", "-c", "ulimit -n; ulimit -t"]);
    params["limits"] = json!({"maxOpenFiles": 64, "maxCpuSeconds": 7});
    client.call("process/start", params).await;
    let (output, _) = read_all(&client, "limited").await;
    assert_eq!(String::from_utf8_lossy(&output), "64\n7\n");

    for (limits, message) in [
        (
            json!({"timeoutMs": 0}),
            "limits.timeoutMs must be between 1 and",
        ),
        (
            json!({"maxOpenFiles": -1}),
            "limits.maxOpenFiles must be between 1 and",
        ),
        (
            json!({"maxCpuSeconds": 1u64 << 40}),
            "limits.maxCpuSeconds must be between 1 and",
        ),
    ] {
        let mut params = start_params("bad", &["true"]);
        params["limits"] = limits.clone();
        let error = client.request("process/start", params).await.unwrap_err();
        assert_eq!(error["code"], -32602, "{limits}: {error}");
        assert!(
            error["message"].as_str().unwrap().starts_with(message),
            "{limits}: {error}"
        );
    }
}

#[tokio::test]
async fn a_memory_hog_dies_alone_with_reason_memory_limit() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let info = client.call("environment/info", json!({})).await;
    assert_eq!(info["capabilities"]["processTreeLimits"], true, "{info}");
    let neighbour = tags(13)[0].clone();
    client
        .call(
            "process/start",
            start_params("neighbour", &["sleep", &neighbour]),
        )
        .await;
    // The allocation happens in a child of the shell: the limit is the tree's.
    let mut params = start_params(
        "hog",
        &[
            "sh",
            "-c",
            "python3 -c \"b = b'x' * (400 << 20)\"; echo survived $?",
        ],
    );
    params["limits"] = json!({"maxMemoryBytes": 64 << 20});
    client.call("process/start", params).await;
    let (output, last) = read_all(&client, "hog").await;
    // The shell carried on after its child was killed for memory.
    // (The shell's own "Killed" may come before or after it, on stderr.)
    let output = String::from_utf8_lossy(&output);
    assert!(output.contains("survived 137\n"), "{output}");
    assert_eq!(last["exitCode"], 0);
    let mut params = start_params("hog2", &["python3", "-c", "b = b'x' * (400 << 20)"]);
    params["limits"] = json!({"maxMemoryBytes": 64 << 20});
    client.call("process/start", params).await;
    let exit = exited(&client, "hog2").await;
    assert_eq!(exit["reason"], "memoryLimit", "{exit}");
    assert_eq!(exit["signal"], 9);
    // Its neighbour and the daemon are untouched.
    assert_eq!(sleeps(&neighbour).len(), 1);
    let read = client
        .call("process/read", json!({"processId": "neighbour"}))
        .await;
    assert_eq!(read["exited"], false);
    client
        .call("process/terminate", json!({"processId": "neighbour"}))
        .await;
}

#[tokio::test]
async fn a_fork_bomb_is_contained_and_the_daemon_stays_responsive() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    // Checked first: a daemon that ignored `maxProcesses` would let the bomb take the machine.
    let info = client.call("environment/info", json!({})).await;
    assert_eq!(info["capabilities"]["processTreeLimits"], true, "{info}");
    let mut params = start_params("bomb", &["sh", "-c", "b() { b | b & }; b; sleep 1000"]);
    params["limits"] = json!({"maxProcesses": 64, "timeoutMs": 3000});
    client.call("process/start", params).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let probe = daemon.client().await;
    probe.initialize(None).await.unwrap();
    let mut round_trips = Vec::new();
    for _ in 0..21 {
        let began = std::time::Instant::now();
        probe.call("environment/info", json!({})).await;
        round_trips.push(began.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The median: this machine's other tests compete for its cores too.
    round_trips.sort();
    assert!(
        round_trips[10] < Duration::from_millis(50),
        "{round_trips:?}"
    );
    let read = client
        .call("process/read", json!({"processId": "bomb"}))
        .await;
    let live = read["liveDescendants"].as_u64().unwrap();
    // Far below what an unlimited bomb reaches. The count is a walk of a churning tree, not a
    // snapshot: a process may exit and another take its place in the limit during the walk.
    assert!((1..=80).contains(&live), "{read}");
    let exit = exited(&client, "bomb").await;
    assert_eq!(exit["reason"], "timeout");
    assert!(exit.get("cleanupUnconfirmed").is_none(), "{exit}");
    let read = client
        .call("process/read", json!({"processId": "bomb"}))
        .await;
    assert!(read.get("liveDescendants").is_none(), "{read}");
}

/// The `terminate` signal reaches every process of the tree, also one in a session of its own,
/// and what ignores it is killed after the grace.
#[tokio::test]
async fn the_terminate_signal_reaches_the_whole_tree_then_kills_what_ignores_it() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let marker = dir.path().join("terminated");
    let tags = tags(14);
    let script = format!(
        "setsid sh -c 'trap \"echo term > {marker}; exit 0\" TERM; sleep {a} & wait' & \
         sh -c \"trap '' TERM; exec sleep {b}\" & trap '' TERM; sleep {c}",
        marker = marker.display(),
        a = tags[0],
        b = tags[1],
        c = tags[2],
    );
    client
        .call("process/start", start_params("t", &["sh", "-c", &script]))
        .await;
    let pids = all_running(&tags).await;
    let began = std::time::Instant::now();
    client
        .call(
            "process/signal",
            json!({"processId": "t", "signal": "terminate"}),
        )
        .await;
    // The detached shell's trap ran: SIGTERM, not the later kill, reached it.
    eventually("the detached shell to handle SIGTERM", || marker.exists()).await;
    let exit = exited(&client, "t").await;
    assert!(began.elapsed() >= Duration::from_millis(1900), "{exit}");
    assert_eq!(exit["reason"], "terminated", "{exit}");
    assert_eq!(exit["signal"], 9, "{exit}");
    assert_all_gone(&pids, "every process of the tree to be gone").await;
}

/// Whether `ancestor` is above `pid` (following parents through /proc).
fn descends_from(pid: i32, ancestor: i32) -> bool {
    let mut current = pid;
    while current > 1 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{current}/stat")) else {
            return false;
        };
        // Field 4, the parent (fields after the comm's closing parenthesis).
        current = stat_fields(&stat)
            .get(1)
            .and_then(|ppid| ppid.parse().ok())
            .unwrap_or(0);
        if current == ancestor {
            return true;
        }
    }
    false
}

/// Plain supervisors are forked by one fork server per daemon. Concurrent first starts each
/// started one, the spare exited, and the trees it had forked were re-parented to init: out of
/// the daemon's sight for anything that looks for them below it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_starts_keep_every_tree_below_the_daemon() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let tag = tags(15)[0].clone();
    let starts = (0..8).map(|n| {
        client.call(
            "process/start",
            start_params(&format!("p{n}"), &["sleep", &tag]),
        )
    });
    futures::future::join_all(starts).await;
    let mut pids = Vec::new();
    eventually("every sleep to run", || {
        pids = sleeps(&tag);
        pids.len() == 8
    })
    .await;
    let outside: Vec<_> = pids
        .iter()
        .filter(|pid| !descends_from(**pid, daemon.pid()))
        .collect();
    assert!(outside.is_empty(), "trees outside the daemon: {outside:?}");
}
