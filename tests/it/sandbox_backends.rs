//! The sandbox where Landlock is missing or old (docs/sandbox.md, "Backends"): what the daemon
//! reports of the host and of each start, and what it enforces, for daemons started as on
//! gVisor (a seccomp filter answering the Landlock syscalls with ENOSYS), capped at an old ABI,
//! or told to use the mount view. The whole sandbox suite runs again in each of those modes
//! from `.ci/run` (`EXEC_SERVER_TEST_LANDLOCK`); these tests pin down what differs.

use crate::common::*;
use crate::metrics::http_get;
use crate::sandbox_support::*;
use serde_json::{json, Value};

fn start_in(mode: &str, args: &[&str]) -> Daemon {
    let mut command = Daemon::command(env!("CARGO_BIN_EXE_exec-server"), args, &[]);
    in_landlock_mode(&mut command, mode);
    Daemon::launch(command)
}

fn addr(daemon: &Daemon) -> String {
    daemon.url.trim_start_matches("ws://").to_owned()
}

async fn facilities(daemon: &Daemon) -> Value {
    let (client, _) = daemon.session().await;
    client.call("environment/info", json!({})).await["sandbox"].clone()
}

#[tokio::test]
async fn each_host_reports_the_backend_its_kernel_leaves_and_readyz_says_the_same() {
    let kernel = start_in("", &[]);
    let info = facilities(&kernel).await;
    assert_eq!(info["backend"], "landlock", "{info}");
    assert!(info["landlockAbi"].as_i64().unwrap() >= 6, "{info}");
    assert_eq!(info["landlockAbiUsed"], info["landlockAbi"], "{info}");
    for facility in ["userNamespaces", "pidNamespaces", "seccomp"] {
        assert_eq!(info[facility], true, "{facility}: {info}");
    }
    assert!(info["cgroupDelegation"].is_boolean(), "{info}");
    let (status, body) = http_get(&addr(&kernel), "/readyz", None);
    assert_eq!(status, 200);
    let ready: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["sandbox"], info);

    let gvisor = facilities(&start_in("none", &[])).await;
    assert_eq!(gvisor["backend"], "mountView", "{gvisor}");
    assert_eq!(gvisor["landlockAbi"], 0, "{gvisor}");
    let capped = facilities(&start_in("4", &[])).await;
    assert_eq!(capped["backend"], "landlock", "{capped}");
    assert_eq!(capped["landlockAbiUsed"], 4, "{capped}");
    assert_eq!(capped["landlockAbi"], info["landlockAbi"], "{capped}");
    let chosen = facilities(&start_in("mount-view", &[])).await;
    assert_eq!(chosen["backend"], "mountView", "{chosen}");
}

/// Without Landlock the mount view and a PID namespace enforce workspace-write, and every
/// report says which backend did: the start, the audit record, the metric.
#[tokio::test]
async fn without_landlock_the_mount_view_enforces_and_every_report_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let daemon = start_in("none", &["--audit-log", log.to_str().unwrap()]);
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sandbox = workspace_write(&d.ws, "enabled");
    let started = client
        .call(
            "process/start",
            params(
                "w",
                &["sh", "-c", "echo in > inside"],
                &d.ws,
                sandbox.clone(),
            ),
        )
        .await;
    assert_eq!(started["sandboxBackend"], "mountView", "{started}");
    read_all(&client, "w").await;
    assert_eq!(std::fs::read_to_string(d.ws("inside")).unwrap(), "in\n");
    let outside = d.out("f").display().to_string();
    let denied = sh(
        &client,
        "o",
        &d.ws,
        &sandbox,
        &format!("echo x > {outside}"),
    )
    .await;
    assert_denied(&denied, "Read-only file system");
    d.assert_outside_untouched();
    // No pid names the daemon from inside: the sandbox has a PID namespace of its own. (The
    // shell's complaint on stdout: on stderr its order against the echo is a race.)
    let pid = daemon.pid();
    let kill = sh(
        &client,
        "k",
        &d.ws,
        &sandbox,
        &format!("kill -9 {pid} 2>&1; echo $$"),
    )
    .await;
    assert!(kill.output.contains("No such process"), "{kill:?}");
    assert!(kill.output.trim_end().ends_with('2'), "{kill:?}");
    assert!(pid_alive(pid));

    let (_, metrics) = http_get(&addr(&daemon), "/metrics", None);
    assert!(
        metrics.contains("exec_server_sandboxed_launches_total{backend=\"mountView\"} 3"),
        "{metrics}"
    );
    let audit = std::fs::read_to_string(&log).unwrap();
    let starts: Vec<Value> = audit
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|record| record["action"] == "process/start")
        .collect();
    assert_eq!(starts.len(), 3, "{audit}");
    for start in starts {
        assert_eq!(start["sandbox"]["backend"], "mountView", "{start}");
    }
}

/// The new root of the mount view alone: only the grants are there, and what is missing
/// from it fails as Landlock's refusal would be reported.
#[tokio::test]
async fn a_profile_that_does_not_read_the_root_sees_only_its_grants() {
    let daemon = start_in("none", &[]);
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sandbox = restricted(
        &d.ws,
        vec![
            entry(special("minimal"), "read"),
            entry(special("project_roots"), "write"),
        ],
        "restricted",
    );
    let root = sh(&client, "root", &d.ws, &sandbox, "ls /; echo rc=$?").await;
    assert!(root.output.contains("Permission denied"), "{root:?}");
    // The host's links are there (`/bin` -> `usr/bin`), so `/bin/sh` runs.
    let listed = sh(
        &client,
        "ls",
        &d.ws,
        &sandbox,
        "/bin/ls -d /usr /etc/passwd /bin/sh",
    )
    .await;
    assert_ok(&listed);
    let hidden = sh(&client, "home", &d.ws, &sandbox, "cat /etc/hostname").await;
    assert_denied(&hidden, "No such file or directory");
    let exec = run(
        &client,
        params("x", &["/usr/bin/true"], &d.ws, sandbox.clone()),
    )
    .await;
    assert_eq!(exec.code, 0, "{exec:?}");
    let refused = run(
        &client,
        params(
            "r",
            &[env!("CARGO_BIN_EXE_exec-server"), "--version"],
            &d.ws,
            sandbox,
        ),
    )
    .await;
    assert_eq!(refused.code, 126, "{refused:?}");
    assert!(refused.denied, "{refused:?}");
}

#[tokio::test]
async fn an_operator_who_requires_landlock_gets_refusals_naming_it_where_it_is_too_old() {
    let daemon = start_in("1", &["--sandbox-backend", "landlock"]);
    let info = facilities(&daemon).await;
    assert_eq!(info["backend"], Value::Null, "{info}");
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let error = client
        .request(
            "process/start",
            params("p", &["true"], &d.ws, workspace_write(&d.ws, "restricted")),
        )
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32602, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("--sandbox-backend landlock needs Landlock ABI 2"),
        "{message}"
    );
}

/// The sandbox suites and attack tests, run again by this test binary itself in another
/// Landlock mode: each asserts the outcome it asserts under Landlock, or the difference
/// docs/sandbox.md names for that mode (see `own_pid_namespaces`, `landlock_fs`, `landlock_abi`).
const SUITES: &[&str] = &[
    "sandbox::",
    "sandbox_fs::",
    "sandbox_fs_ops::",
    "sandbox_net::",
    "sandbox_managed_net::",
    "sandbox_scale::",
    "hardening_procs::",
    "sandbox_root_write::",
    "codex_differential::process_sandbox::",
    "codex_differential::root_write::",
];

fn suite_in(mode: &str, extra: &[&str]) {
    // A file, not a pipe: a daemon a failing test leaves behind would hold a pipe open.
    let log = tempfile::NamedTempFile::new().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(SUITES)
        .args(extra)
        // One at a time: the rest of the run goes on beside it on the machine's 2 cores, and
        // timing-bound tests there (receipts, input waits) fail when 4 tests share them.
        .args(["--skip", "sandbox_backends::", "--test-threads", "1"])
        .env(LANDLOCK_MODE_VAR, mode)
        .stdin(std::process::Stdio::null())
        .stdout(log.reopen().unwrap())
        .stderr(log.reopen().unwrap())
        .status()
        .unwrap();
    let output = std::fs::read_to_string(log.path()).unwrap_or_default();
    let summary: Vec<&str> = output
        .lines()
        .filter(|line| line.starts_with("test ") && !line.ends_with(" ok"))
        .collect();
    assert!(
        status.success(),
        "the sandbox suites in Landlock mode {mode}: {summary:#?}\n{output}"
    );
    assert!(output.contains(" passed; 0 failed"), "{output}");
}

/// One mode after another (four at once would crowd the rest of the run off 2 cores): as on
/// gVisor (the codex agent's workspace-write and read-only scenarios too), Debian 12 (ABI 2),
/// Ubuntu 24.04 (ABI 4), and with the mount view chosen on this kernel.
#[test]
fn the_sandbox_suites_hold_without_landlock_at_old_abis_and_with_the_mount_view() {
    suite_in(
        "none",
        &["codex_agent::sandboxes::", "codex_agent::commands::"],
    );
    suite_in("2", &[]);
    suite_in("4", &[]);
    suite_in("mount-view", &[]);
}
