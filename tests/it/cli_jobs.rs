//! `exec-server run` as a shell user meets it, through pipes: exit codes by a shell's
//! conventions, timeouts, limits and sandboxes; `--detach`, `attach`, `ps` and `kill`. Each run
//! that ends leaves no session and no process on the daemon.

use crate::cli::{assert_nothing_left, census, cli, text};
use crate::common::{self, Daemon};
use crate::process_tree::{sleeps, tags};
use serde_json::json;

#[test]
fn run_exits_as_a_shell_would() {
    let daemon = Daemon::start();
    let cases: [(&[&str], i32, &str); 6] = [
        (&["true"], 0, ""),
        (&["false"], 1, ""),
        (&["no-such-command-here"], 127, "No such file or directory"),
        (&["/etc/passwd"], 126, "Permission denied"),
        (&["sh", "-c", "kill -9 $$"], 128 + 9, ""),
        (&["sh", "-c", "kill -TERM $$"], 128 + 15, ""),
    ];
    for (command, code, message) in cases {
        let mut args = vec!["run", "--"];
        args.extend(command);
        let output = cli(&daemon, &args, b"");
        assert_eq!(output.status.code(), Some(code), "{command:?}: {output:?}");
        assert!(text(&output.stderr).contains(message), "{output:?}");
    }
    assert_nothing_left(&daemon);
}

/// `--timeout` ends the whole tree, background children included, and exits 124.
#[test]
fn run_timeout_ends_the_tree_and_exits_124() {
    let daemon = Daemon::start();
    let [child, parent, _] = tags(171);
    let script = format!("sleep {child} & sleep {parent}");
    let started = std::time::Instant::now();
    let output = cli(
        &daemon,
        &["run", "--timeout", "1s", "--", "sh", "-c", &script],
        b"",
    );
    assert_eq!(output.status.code(), Some(124), "{output:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(sleeps(&child).is_empty() && sleeps(&parent).is_empty());
    assert_nothing_left(&daemon);
}

#[test]
fn run_limits_processes_and_memory() {
    let daemon = Daemon::start();
    let forks = "for i in 1 2 3 4 5 6; do sleep 1 & done; wait";
    let output = cli(
        &daemon,
        &["run", "--max-processes", "3", "--", "sh", "-c", forks],
        b"",
    );
    assert_ne!(output.status.code(), Some(0), "{output:?}");
    assert!(text(&output.stderr).contains("fork"), "{output:?}");
    let hog = "x = bytearray(300 << 20)";
    let output = cli(
        &daemon,
        &["run", "--max-memory", "64M", "--", "python3", "-c", hog],
        b"",
    );
    assert_eq!(output.status.code(), Some(128 + 9), "{output:?}");
    assert!(
        text(&output.stderr).contains("the memory limit was reached"),
        "{output:?}"
    );
    let output = cli(&daemon, &["run", "--max-memory", "lots", "--", "true"], b"");
    assert_eq!(output.status.code(), Some(2), "a usage error: {output:?}");
    assert_nothing_left(&daemon);
}

#[test]
fn run_sandbox_presets_writable_dirs_network_and_a_profile_file() {
    // workspace-write grants /tmp, and the daemon refuses a write grant over its state dir or
    // its own binary, which a checkout under /tmp (as CI's may be) puts there: this daemon
    // keeps no state and runs from a copy outside.
    let bin_dir = common::scratch_dir();
    let binary = bin_dir.path().join("exec-server");
    std::fs::copy(env!("CARGO_BIN_EXE_exec-server"), &binary).unwrap();
    let env = [(common::STATE_DIR_VAR, "none")];
    let daemon = Daemon::launch(Daemon::command(binary.to_str().unwrap(), &[], &env));
    let dir = common::scratch_dir();
    let (work, extra) = (dir.path().join("work"), dir.path().join("extra"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&extra).unwrap();
    let (work_s, extra_s) = (work.to_str().unwrap(), extra.to_str().unwrap());
    let write = |flags: &[&str], target: &str| {
        let mut args = vec!["run", "--cwd", work_s];
        args.extend(flags);
        let script = format!("echo x > {target}/out");
        args.extend(["--", "sh", "-c", &script]);
        cli(&daemon, &args, b"").status.code()
    };
    assert_ne!(write(&["--sandbox", "read-only"], work_s), Some(0));
    assert!(!work.join("out").exists());
    assert_eq!(write(&["--sandbox", "workspace-write"], work_s), Some(0));
    assert_ne!(write(&["--sandbox", "workspace-write"], extra_s), Some(0));
    let writable = ["--sandbox", "read-only", "--writable", extra_s];
    assert_eq!(write(&writable, extra_s), Some(0));
    assert!(extra.join("out").exists());

    // Network off: a namespace of its own, with only its loopback.
    let interfaces = |flags: &[&str]| {
        let mut args = vec!["run"];
        args.extend(flags);
        args.extend(["--", "sh", "-c", "grep -c : /proc/net/dev"]);
        text(&cli(&daemon, &args, b"").stdout)
    };
    assert_eq!(interfaces(&["--network", "off"]), "1\n");
    assert_eq!(interfaces(&["--sandbox", "read-only"]), "1\n");
    assert_ne!(
        interfaces(&["--sandbox", "read-only", "--network", "on"]),
        "1\n"
    );

    // A profile file: the protocol's permission profile, here writing `extra` only.
    let profile = dir.path().join("profile.json");
    let uri = common::file_uri(&extra);
    let permissions = json!({"type": "managed", "network": "restricted", "file_system": {
        "type": "restricted", "entries": [
            {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
            {"path": {"type": "path", "path": uri}, "access": "write"}]}});
    std::fs::write(&profile, permissions.to_string()).unwrap();
    let profile_flag = ["--sandbox", profile.to_str().unwrap()];
    assert_eq!(write(&profile_flag, extra_s), Some(0));
    assert_ne!(write(&profile_flag, work_s), Some(0));
    let output = cli(&daemon, &["run", "--writable", extra_s, "--", "true"], b"");
    assert!(
        text(&output.stderr).contains("--writable needs --sandbox"),
        "{output:?}"
    );
    assert_nothing_left(&daemon);
}

/// `--detach` leaves exactly one session with one process; `ps` shows it, `kill` ends it and
/// `attach` replays its output to its end.
#[test]
fn detach_then_ps_attach_and_kill() {
    let daemon = Daemon::start();
    let [tag, _, _] = tags(172);
    let script = format!("echo started; sleep 0.2; echo oops >&2; sleep {tag}");
    let output = cli(
        &daemon,
        &["run", "--detach", "--", "sh", "-c", &script],
        b"",
    );
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let printed = text(&output.stdout);
    let ids: Vec<&str> = printed.split_whitespace().collect();
    let [session, process] = ids[..] else {
        panic!("{printed}")
    };
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        common::eventually("the sleep", || sleeps(&tag).len() == 1).await;
        let other = daemon.resume(session).await;
        let listed = other.call("process/list", json!({})).await;
        let processes = listed["processes"].as_array().unwrap();
        assert_eq!(processes.len(), 1, "{listed}");
        assert_eq!(processes[0]["processId"], process);
        assert_eq!(processes[0]["state"], "running");
        other.close().await;
    });
    assert_eq!(census(&daemon).0, 1, "exactly one session");

    let ps = cli(&daemon, &["ps", "--session", session], b"");
    let table = text(&ps.stdout);
    assert!(
        table.lines().nth(1).unwrap().starts_with(process),
        "{table}"
    );
    assert!(table.contains(&format!("sleep {tag}")), "{table}");

    // A session has one connection at a time: `kill` while `attach` holds it is refused.
    // Ended by `kill`, the process is replayed to its end by `attach`.
    let killed = cli(&daemon, &["kill", session, process], b"");
    assert_eq!(killed.status.code(), Some(0), "{killed:?}");
    let attached = cli(&daemon, &["attach", session, process], b"");
    assert_eq!(attached.status.code(), Some(128 + 9), "{attached:?}");
    assert_eq!(text(&attached.stdout), "started\n");
    assert_eq!(text(&attached.stderr), "oops\n");
    assert!(sleeps(&tag).is_empty());

    // Replay from a later seq: only what followed it.
    let replay = cli(
        &daemon,
        &["attach", "--from-seq", "2", session, process],
        b"",
    );
    assert_eq!(text(&replay.stdout), "", "{replay:?}");
    assert_eq!(text(&replay.stderr), "oops\n", "{replay:?}");
    let missing = cli(&daemon, &["attach", session, "nope"], b"");
    assert_eq!(missing.status.code(), Some(255));
    assert!(text(&missing.stderr).contains("has no process nope"));
}

/// `kill --signal` sends one signal to the process alone.
/// `attach` follows a running process to its end and exits with its code.
#[test]
fn attach_follows_a_running_process_to_its_end() {
    let daemon = Daemon::start();
    let script = "echo one; sleep 1; echo two; exit 3";
    let output = cli(&daemon, &["run", "-d", "--", "sh", "-c", script], b"");
    let printed = text(&output.stdout);
    let ids: Vec<&str> = printed.split_whitespace().collect();
    let attached = cli(&daemon, &["attach", ids[0], ids[1]], b"");
    assert_eq!(attached.status.code(), Some(3), "{attached:?}");
    assert_eq!(text(&attached.stdout), "one\ntwo\n");
}

#[test]
fn kill_with_a_signal() {
    let daemon = Daemon::start();
    let output = cli(&daemon, &["run", "--detach", "--", "sleep", "30"], b"");
    let printed = text(&output.stdout);
    let ids: Vec<&str> = printed.split_whitespace().collect();
    let killed = cli(&daemon, &["kill", "--signal", "INT", ids[0], ids[1]], b"");
    assert_eq!(killed.status.code(), Some(0), "{killed:?}");
    let attached = cli(&daemon, &["attach", ids[0], ids[1]], b"");
    assert_eq!(attached.status.code(), Some(128 + 2), "{attached:?}");
    let bad = cli(&daemon, &["kill", "--signal", "USR1", ids[0], ids[1]], b"");
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
}
