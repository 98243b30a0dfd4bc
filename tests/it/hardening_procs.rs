//! Issue #26, tried as an attacker would: stray signals to the daemon's supervisors, a
//! supervisor killed from outside, an upgrade to a binary another user could have written, and
//! host Unix sockets reached from a sandbox whose network is restricted.

use crate::common::*;
use crate::process_tree::{all_running, assert_all_gone, detaching_script, gone, tags};
use crate::sandbox_support;
use serde_json::{json, Value};

/// What a careless `pkill -SIG -f exec-server` may send: every signal whose default ends or
/// stops a process (glibc's reserved 32 and 33 and real-time ones included), but the fault
/// signals, which keep their handling.
const STRAY: &[i32] = &[
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGPIPE,
    libc::SIGALRM,
    libc::SIGTERM,
    libc::SIGSTKFLT,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGIO,
    libc::SIGPWR,
    libc::SIGABRT,
    32,
    33,
    34,
    64,
];

/// Signals 32 and 33 in a `/proc/PID/status` mask.
const GLIBC_INTERNAL: u64 = 0b11 << 31;

/// `future`, which must end within the harness's timeout (a stopped supervisor never answers).
async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(TIMEOUT, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: timed out"))
}

/// The parent of `pid`.
fn parent(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat_fields(&stat)[1].parse().unwrap()
}

/// `argv` on the three launch paths of a supervisor: posix_spawn (plain pipes), a fork (a
/// terminal) and a sandbox helper.
fn launches(id: &str, argv: &[&str], dirs: &sandbox_support::Dirs) -> [Value; 3] {
    let plain = start_params(&format!("{id}-plain"), argv);
    let mut tty = start_params(&format!("{id}-tty"), argv);
    tty["tty"] = json!(true);
    let sandboxed = sandbox_support::params(
        &format!("{id}-sandboxed"),
        argv,
        &dirs.ws,
        sandbox_support::workspace_write(&dirs.ws, "restricted"),
    );
    [plain, tty, sandboxed]
}

/// A tree that detaches (tagged with test `n`), whose shell first prints its parent: the
/// supervisor.
fn tree_script(n: u32) -> String {
    format!("echo $PPID; {}", detaching_script(&tags(n)))
}

/// Starts the tree of `tree_script(n)` with `params`; returns its id, its supervisor's pid (the
/// first line it prints) and the pids of its sleeps.
async fn start_tree(client: &Client, params: Value, n: u32) -> (String, i32, Vec<i32>) {
    let id = params["processId"].as_str().unwrap().to_owned();
    client.call("process/start", params).await;
    let read = read_until(client, &id, 0, |bytes| bytes.contains(&b'\n')).await;
    let text = String::from_utf8_lossy(&read.bytes);
    let supervisor = text.lines().next().unwrap().trim().parse().unwrap();
    (id, supervisor, all_running(&tags(n)).await)
}

#[tokio::test]
async fn stray_signals_leave_supervisors_serving_and_programs_their_default_signal_state() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dirs = sandbox_support::Dirs::new();
    let script = tree_script(201);
    for params in launches("stray", &["sh", "-c", &script], &dirs) {
        let (id, supervisor, pids) = start_tree(&client, params, 201).await;
        let fork_server = parent(supervisor);
        for signal in STRAY {
            for pid in [supervisor, fork_server] {
                // SAFETY: plain syscall on the daemon's own processes.
                unsafe { libc::kill(pid, *signal) };
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(pid_alive(supervisor), "{id}: the supervisor died");
        assert!(pid_alive(fork_server), "{id}: the fork server died");
        let state = std::fs::read_to_string(format!("/proc/{supervisor}/stat")).unwrap();
        assert_eq!(stat_fields(&state)[0], "S", "{id}: the supervisor stopped");
        assert!(pids.iter().all(|pid| !gone(*pid)), "{id}: the tree died");
        // Still the tree's supervisor: terminate ends it all and says so.
        let reply = client
            .call("process/terminate", json!({"processId": id}))
            .await;
        assert_eq!(reply["running"], true, "{id}");
        let (_, last) = within(&id, read_all(&client, &id)).await;
        assert_eq!(last["reason"], "terminated", "{id}: {last}");
        assert!(last.get("cleanupUnconfirmed").is_none(), "{id}: {last}");
        assert_all_gone(&pids, "every process of the tree to be gone").await;
    }
    // What the supervisors take, their programs do not inherit: a fresh signal state.
    let status = ["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"];
    for params in launches("state", &status, &dirs) {
        let id = params["processId"].as_str().unwrap().to_owned();
        client.call("process/start", params).await;
        let (bytes, _) = read_all(&client, &id).await;
        let text = String::from_utf8_lossy(&bytes);
        let mask = |field: &str| {
            let line = text.lines().find(|line| line.starts_with(field)).unwrap();
            u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
        };
        assert_eq!(mask("SigBlk"), 0, "{id}: {text}");
        // glibc's posix_spawn (2.36) ignores its own 32 and 33 in every child it spawns,
        // whatever the parent does; nothing else may be ignored.
        assert_eq!(mask("SigIgn") & !GLIBC_INTERNAL, 0, "{id}: {text}");
    }
}

#[tokio::test]
async fn a_supervisor_killed_from_outside_takes_its_tree_with_it() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dirs = sandbox_support::Dirs::new();
    let script = tree_script(211);
    for params in launches("killed", &["sh", "-c", &script], &dirs) {
        let (id, supervisor, pids) = start_tree(&client, params, 211).await;
        // SAFETY: plain syscall on the daemon's own process.
        unsafe { libc::kill(supervisor, libc::SIGKILL) };
        // The daemon noticed: the process is reported ended.
        let (_, last) = within(&id, read_all(&client, &id)).await;
        assert_eq!(last["exited"], true, "{id}: {last}");
        // And nothing of the tree goes on untracked (a detached member reparented to init
        // would).
        assert_all_gone(&pids, &format!("{id}: the orphaned tree to be ended")).await;
    }
}
