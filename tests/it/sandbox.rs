//! Sandboxed launches: fail-closed refusals, what the helper applies to the process (session,
//! capabilities, no_new_privs, seccomp, scopes), arg0 and PTY support, process control, and the
//! `sandboxDenied` classifier's false-positive controls.

use crate::common;
use crate::sandbox_support;

use common::*;
use sandbox_support::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn exe_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_exec-server"))
        .canonicalize()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
}

async fn refused(client: &Client, params: Value) -> Value {
    let error = client
        .request("process/start", params)
        .await
        .expect_err("the start must be refused");
    assert_eq!(error["code"], -32602, "{error}");
    error
}

#[tokio::test]
async fn unenforceable_intents_fail_closed_and_nothing_runs() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let marker = d.ws("ran");
    let script = format!("touch {}", marker.display());
    let argv = ["sh", "-c", script.as_str()];
    let with = |sandbox: Value| params("p", &argv, &d.ws, sandbox);

    let unknown = restricted(
        &d.ws,
        vec![entry(
            json!({"type": "special", "value": {"kind": "home_dir"}}),
            "read",
        )],
        "enabled",
    );
    let error = refused(&client, with(unknown)).await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("special path kind"),
        "{error}"
    );

    let mut managed = with(workspace_write(&d.ws, "restricted"));
    managed["enforceManagedNetwork"] = json!(true);
    let error = refused(&client, managed).await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("requires managedNetwork"),
        "{error}"
    );

    let missing = restricted(
        &d.ws,
        vec![
            entry(special("root"), "read"),
            entry(path(&d.ws("missing")), "write"),
        ],
        "enabled",
    );
    let error = refused(&client, with(missing)).await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{error}"
    );

    std::os::unix::fs::symlink(&d.outside, d.ws("escape")).unwrap();
    let symlinked = restricted(
        &d.ws,
        vec![
            entry(special("root"), "read"),
            entry(special_sub("project_roots", "escape"), "write"),
        ],
        "enabled",
    );
    let error = refused(&client, with(symlinked)).await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("outside its workspace root"),
        "{error}"
    );
    let dotdot = restricted(
        &d.ws,
        vec![entry(special_sub("project_roots", "../x"), "write")],
        "enabled",
    );
    refused(&client, with(dotdot)).await;
    assert!(!marker.exists(), "a refused request ran");

    // The skip behaviour is explicit, and then the request runs.
    let skipped = restricted(
        &d.ws,
        vec![
            entry(special("root"), "read"),
            entry(special("project_roots"), "write"),
            json!({"path": path(&d.ws("missing")), "access": "write", "missing_path_behavior": "skip"}),
        ],
        "enabled",
    );
    assert_ok(&run(&client, with(skipped)).await);
    assert!(marker.exists());
}

#[tokio::test]
async fn write_grants_that_expose_the_daemon_binary_are_refused() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let grant = |target: &Path| {
        params(
            "p",
            &["true"],
            &d.ws,
            restricted(
                &d.ws,
                vec![entry(special("root"), "read"), entry(path(target), "write")],
                "enabled",
            ),
        )
    };
    let bin = exe_dir();
    // `/` is not among them: a root write keeps these read-only instead (sandbox_root_write).
    for target in [bin.clone(), bin.parent().unwrap().to_path_buf()] {
        let error = refused(&client, grant(&target)).await;
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("exec-server binary"),
            "{error}"
        );
    }
    // Through a symlink: resolved, then checked again.
    std::os::unix::fs::symlink(&bin, d.ws("bin-link")).unwrap();
    refused(&client, grant(&d.ws("bin-link"))).await;
    // Through a bind mount of the binary's directory.
    let alias = tempfile::tempdir().unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["--bind"])
        .arg(&bin)
        .arg(alias.path())
        .status()
        .unwrap();
    assert!(mounted.success());
    let error = refused(&client, grant(alias.path())).await;
    let _ = std::process::Command::new("umount")
        .arg(alias.path())
        .status();
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("exec-server binary"),
        "{error}"
    );
    // A disjoint workspace is fine.
    assert_ok(&run(&client, grant(&d.ws)).await);
}

#[tokio::test]
async fn the_process_runs_without_privileges_under_seccomp() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sandbox = workspace_write(&d.ws, "restricted");
    let outcome = sh(
        &client,
        "status",
        &d.ws,
        &sandbox,
        "cat /proc/self/status; ps -o pid=,pgid=,sid= -p $$",
    )
    .await;
    assert_ok(&outcome);
    for line in [
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
        "CapInh:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "CapEff:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "CapAmb:\t0000000000000000",
    ] {
        assert!(outcome.output.contains(line), "{line}: {}", outcome.output);
    }
    // The helper made the process a session and group leader, for killpg (in a PID namespace
    // of its own, its init is, and the process is in that group).
    let ids: Vec<&str> = outcome
        .output
        .lines()
        .last()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    if crate::common::own_pid_namespaces() {
        assert_eq!(ids, ["2", "1", "1"], "{ids:?}");
    } else {
        assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    }
    // Later launches take helpers started in the background at idle priority: the program gets
    // the daemon's scheduling back (policy 0, SCHED_OTHER; /proc/PID/stat field 41).
    for run in 0..3 {
        let id = format!("policy{run}");
        let outcome = sh(
            &client,
            &id,
            &d.ws,
            &sandbox,
            "cut -d' ' -f41 /proc/$$/stat",
        )
        .await;
        assert_ok(&outcome);
        assert_eq!(outcome.output.trim(), "0", "{outcome:?}");
    }
}

#[tokio::test]
async fn the_daemon_cannot_be_signalled_or_traced_from_the_sandbox() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sandbox = workspace_write(&d.ws, "enabled");
    let pid = daemon.pid();
    let script = format!(
        "kill -0 {pid}; echo probe=$?; kill -9 {pid}; kill -9 -1; sleep 30 & kill $!; wait $!; echo own=$?; exit 1"
    );
    let outcome = sh(&client, "kill", &d.ws, &sandbox, &script).await;
    assert!(outcome.output.contains("probe=1"), "{outcome:?}");
    assert!(outcome.output.contains("own=143"), "{outcome:?}");
    if crate::common::own_pid_namespaces() {
        // The daemon is not in the sandbox's PID namespace: no pid names it there.
        assert!(outcome.output.contains("No such process"), "{outcome:?}");
    } else {
        assert!(outcome.denied, "{outcome:?}");
    }
    let trace = format!(
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nrc = libc.ptrace(16, {pid}, 0, 0)\nprint('ptrace', rc, os.strerror(ctypes.get_errno()))\nbuf = ctypes.create_string_buffer(8)\niov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)\nrc = libc.process_vm_readv({pid}, iov, 1, iov, 1, 0)\nprint('vm_readv', rc, os.strerror(ctypes.get_errno()))\nraise SystemExit(1)"
    );
    let traced = py(&client, "trace", &d.ws, &sandbox, &trace).await;
    assert_denied(&traced, "ptrace -1 Operation not permitted");
    assert!(
        traced
            .output
            .contains("vm_readv -1 Operation not permitted"),
        "{traced:?}"
    );
    assert!(pid_alive(pid), "the daemon died");
    assert_ok(&sh(&client, "after", &d.ws, &sandbox, "true").await);
}

#[tokio::test]
async fn arg0_is_preserved_across_the_helper() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let mut request = params(
        "arg0",
        &["sh", "-c", "tr '\\0' ' ' < /proc/$$/cmdline"],
        &d.ws,
        workspace_write(&d.ws, "enabled"),
    );
    request["arg0"] = json!("custom-shell");
    let outcome = run(&client, request).await;
    assert_ok(&outcome);
    assert!(
        outcome.output.starts_with("custom-shell -c "),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn pty_processes_are_sandboxed_too() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let out = d.out("f").display().to_string();
    let mut request = params(
        "tty",
        &[
            "sh",
            "-c",
            &format!("tty; test -t 0 && echo interactive; echo hi > /dev/tty; echo pwned > {out}"),
        ],
        &d.ws,
        workspace_write(&d.ws, "restricted"),
    );
    request["tty"] = json!(true);
    let outcome = run(&client, request).await;
    assert!(outcome.output.contains("/dev/pts/"), "{outcome:?}");
    assert!(outcome.output.contains("interactive"), "{outcome:?}");
    assert!(outcome.output.contains("hi\r\n"), "{outcome:?}");
    assert_denied(&outcome, "Read-only file system");
    d.assert_outside_untouched();
}

#[tokio::test]
async fn terminate_kills_the_sandboxed_group() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let request = params(
        "t",
        &[
            "sh",
            "-c",
            "sleep 100 & echo $! > pids; echo $$ >> pids; wait",
        ],
        &d.ws,
        workspace_write(&d.ws, "enabled"),
    );
    assert_eq!(
        client.call("process/start", request).await["sandboxType"],
        "linuxSeccomp"
    );
    let pids = d.ws("pids");
    eventually("pids written", || {
        std::fs::read_to_string(&pids).is_ok_and(|t| t.lines().count() == 2)
    })
    .await;
    let pids: Vec<i32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let pids = host_pids(daemon.pid(), &pids);
    assert_eq!(
        client
            .call("process/terminate", json!({"processId": "t"}))
            .await["running"],
        true
    );
    let (_, last) = read_all(&client, "t").await;
    assert_eq!(last["exitCode"], 137);
    assert_eq!(last["sandboxDenied"], false, "a kill is not a denial");
    eventually("the group is gone", || {
        pids.iter().all(|pid| !pid_alive(*pid))
    })
    .await;
}

/// A program the sandbox refuses to execute is a started process that exits 126 (as from a
/// shell) with `sandboxDenied`, on `process/exited` and `process/read` alike: the codex client's
/// approve-and-retry flow reads the exit, not a start error.
#[tokio::test]
async fn a_program_the_sandbox_refuses_to_execute_exits_126_denied() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    // Only the workspace is granted: /bin/cat can be neither read nor executed.
    let workspace_only = restricted(&d.ws, vec![entry(path(&d.ws), "write")], "enabled");
    let started = client
        .call(
            "process/start",
            params("cat", &["/bin/cat", "f"], &d.ws, workspace_only.clone()),
        )
        .await;
    assert_eq!(started["sandboxType"], "linuxSeccomp", "{started}");
    let events = client.events_until_closed("cat").await;
    let methods: Vec<&str> = events
        .iter()
        .map(|e| e["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        ["process/output", "process/exited", "process/closed"],
        "{events:?}"
    );
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["params"]["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3], "{events:?}");
    assert_eq!(events[0]["params"]["stream"], "stderr", "{events:?}");
    assert_eq!(
        String::from_utf8_lossy(&output_of(&events)),
        "exec-server: cannot execute `/bin/cat`: Permission denied (refused by the sandbox)\n"
    );
    assert_eq!(events[1]["params"]["exitCode"], 126, "{events:?}");
    assert_eq!(events[1]["params"]["sandboxDenied"], true, "{events:?}");
    let (bytes, last) = read_all(&client, "cat").await;
    assert!(
        String::from_utf8_lossy(&bytes).contains("refused by the sandbox"),
        "{last}"
    );
    assert_eq!(last["exitCode"], 126, "{last}");
    assert_eq!(last["sandboxDenied"], true, "{last}");
    // On a PTY alike.
    let mut on_tty = params("tty", &["/bin/cat"], &d.ws, workspace_only.clone());
    on_tty["tty"] = json!(true);
    let outcome = run(&client, on_tty).await;
    assert_eq!(outcome.code, 126, "{outcome:?}");
    assert_denied(&outcome, "refused by the sandbox");
    // A program that does not exist is a start error, sandboxed or not, and registers nothing.
    let error = client
        .request(
            "process/start",
            params("none", &["no-such-program-xyz"], &d.ws, workspace_only),
        )
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32603, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("No such file or directory"),
        "{error}"
    );
    assert_eq!(error["data"]["sandboxDenied"], false, "{error}");
    assert_ok(
        &sh(
            &client,
            "none",
            &d.ws,
            &workspace_write(&d.ws, "enabled"),
            "true",
        )
        .await,
    );
}

#[tokio::test]
async fn profiles_that_restrict_nothing_run_unsandboxed_and_are_never_denied() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let fake =
        "echo '/etc/shadow: Permission denied'; echo 'sandbox: Operation not permitted'; exit 1";
    for (id, sandbox) in [
        ("none", Value::Null),
        ("disabled", json!({"permissions": {"type": "disabled"}})),
        (
            "external",
            json!({"permissions": {"type": "external", "network": "restricted"}}),
        ),
        (
            "unrestricted",
            json!({"permissions": {"type": "managed", "network": "enabled", "file_system": {"type": "unrestricted"}}}),
        ),
        (
            "full-write",
            restricted(&d.ws, vec![entry(special("root"), "write")], "enabled"),
        ),
    ] {
        let started = client
            .call(
                "process/start",
                params(id, &["sh", "-c", fake], &d.ws, sandbox),
            )
            .await;
        assert_eq!(started["sandboxType"], "none", "{id}");
        let events = client.events_until_closed(id).await;
        let exited = events
            .iter()
            .find(|e| e["method"] == "process/exited")
            .unwrap();
        assert_eq!(exited["params"]["exitCode"], 1);
        assert_eq!(exited["params"]["sandboxDenied"], false, "{id}");
    }
    // Network off with an unrestricted file system: sandboxed for the network only.
    let out = d.out("f").display().to_string();
    let net_only = json!({"permissions": {"type": "managed", "network": "restricted", "file_system": {"type": "unrestricted"}}});
    let outcome = py(
        &client,
        "net-only",
        &d.ws,
        &net_only,
        &format!("import socket\nopen('{out}', 'a').close()\nsocket.socket()"),
    )
    .await;
    assert_denied(&outcome, "Operation not permitted");
}

#[tokio::test]
async fn the_classifier_ignores_failures_the_sandbox_did_not_cause() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::write(d.ws("locked"), "x").unwrap();
    std::fs::set_permissions(
        d.ws("locked"),
        std::os::unix::fs::PermissionsExt::from_mode(0o000),
    )
    .unwrap();
    let sandbox = workspace_write(&d.ws, "restricted");
    let locked = d.ws("locked").display().to_string();
    let controls = [
        ("false", "false".to_owned()),
        ("grep", "grep nomatch /etc/hostname".to_owned()),
        ("ls", "ls /nonexistent".to_owned()),
        (
            "words",
            "echo 'sandbox: permission denied'; echo landlock seccomp; exit 1".to_owned(),
        ),
        ("inside", format!("cat {locked}")),
        (
            "inside-echo",
            format!("echo '{locked}: Permission denied' >&2; exit 1"),
        ),
        ("exit2", "exit 2".to_owned()),
    ];
    let runs = controls
        .iter()
        .map(|(id, script)| sh(&client, id, &d.ws, &sandbox, script));
    for ((id, _), outcome) in controls.iter().zip(futures::future::join_all(runs).await) {
        assert_ne!(outcome.code, 0, "{id}: {outcome:?}");
        assert!(
            !outcome.denied,
            "{id} was classified as a denial: {outcome:?}"
        );
    }
    // The exited notification carries the verdict too.
    let started = client
        .call(
            "process/start",
            params(
                "notify",
                &["sh", "-c", "echo x > /etc/exec-server-test"],
                &d.ws,
                sandbox,
            ),
        )
        .await;
    assert_eq!(started["sandboxType"], "linuxSeccomp");
    let events = client.events_until_closed("notify").await;
    let exited = events
        .iter()
        .find(|e| e["method"] == "process/exited")
        .unwrap();
    assert_eq!(exited["params"]["sandboxDenied"], true, "{events:?}");
    assert!(!Path::new("/etc/exec-server-test").exists());
}

/// The helper runs with an empty environment: loader variables meant for the program cannot
/// act on it (a library planted in a writable workspace would otherwise run before the
/// sandbox). The program still gets them.
#[tokio::test]
async fn the_client_environment_reaches_the_program_only() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let mut request = params(
        "env",
        &["sh", "-c", "echo \"var=$MY_VAR\""],
        &d.ws,
        workspace_write(&d.ws, "enabled"),
    );
    request["env"]["LD_PRELOAD"] = json!("/nonexistent-exec-server-preload.so");
    request["env"]["MY_VAR"] = json!("kept");
    let outcome = run(&client, request).await;
    assert_ok(&outcome);
    assert!(outcome.output.contains("var=kept"), "{outcome:?}");
    assert_eq!(
        outcome.output.matches("cannot be preloaded").count(),
        1,
        "{outcome:?}"
    );
}

/// The sandbox helpers waiting for a launch: the fork server's children named `exec-sandbox`.
fn idle_helpers(daemon: i32) -> Vec<i32> {
    let pids = |parent: i32| -> Vec<i32> {
        children_of(parent)
            .iter()
            .filter_map(|stat| stat.split_whitespace().next()?.parse().ok())
            .collect()
    };
    pids(daemon)
        .into_iter()
        .flat_map(pids)
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|name| name.trim_end() == "exec-sandbox")
        })
        .collect()
}

/// Waits until the daemon has `count` (or more) helpers waiting, and returns them.
async fn wait_for_idle_helpers(daemon: i32, count: usize) -> Vec<i32> {
    let mut helpers = Vec::new();
    eventually(&format!("{count} idle helpers"), || {
        helpers = idle_helpers(daemon);
        helpers.len() >= count
    })
    .await;
    helpers
}

#[tokio::test]
async fn idle_helpers_leave_with_the_daemon_however_it_ends() {
    for signal in [libc::SIGTERM, libc::SIGKILL] {
        let mut daemon = Daemon::start();
        let (client, _) = daemon.session().await;
        let d = Dirs::new();
        for network in ["restricted", "enabled"] {
            let outcome = sh(
                &client,
                network,
                &d.ws,
                &workspace_write(&d.ws, network),
                "true",
            )
            .await;
            assert_ok(&outcome);
        }
        // Both network modes keep helpers waiting (each launch starts its replacements).
        let helpers = wait_for_idle_helpers(daemon.pid(), 6).await;
        daemon.send_signal(signal);
        assert!(
            daemon.wait_exit(TIMEOUT).is_some(),
            "the daemon did not exit"
        );
        eventually("no idle helper left", || {
            helpers.iter().all(|pid| !pid_alive(*pid))
        })
        .await;
    }
}

/// Scheduling policy (proc(5) field 41) of each thread of `pid`; 5 is SCHED_IDLE.
fn thread_policies(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .filter_map(|stat| stat_fields(&stat).get(38).map(|policy| policy.to_string()))
        .collect()
}

/// A daemon (still root) with every capability but `capability`, which is out of its
/// bounding set.
fn daemon_without(capability: libc::c_ulong) -> Daemon {
    use std::os::unix::process::CommandExt as _;
    let mut command = Daemon::command(env!("CARGO_BIN_EXE_exec-server"), &[], &[]);
    // SAFETY: prctl is async-signal-safe and touches no memory.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Daemon::launch(command)
}

#[tokio::test]
async fn without_cap_sys_nice_helpers_start_at_the_daemons_own_priority() {
    const CAP_SYS_NICE: libc::c_ulong = 23;
    let daemon = daemon_without(CAP_SYS_NICE);
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    // Replacements for this launch start in the background. SCHED_IDLE, which a privileged
    // daemon uses for them, could not be left again without CAP_SYS_NICE: neither by the
    // daemon's thread that spawns them nor by the helper once handed out.
    for run in 0..5 {
        let sandbox = workspace_write(&d.ws, "restricted");
        let outcome = sh(&client, &format!("p{run}"), &d.ws, &sandbox, "true").await;
        assert_ok(&outcome);
    }
    for pid in wait_for_idle_helpers(daemon.pid(), 3).await {
        assert_eq!(thread_policies(pid), ["0"], "helper {pid}");
    }
    let policies = thread_policies(daemon.pid());
    assert!(policies.iter().all(|policy| policy == "0"), "{policies:?}");
}

/// A daemon that can make namespaces but not drop capabilities (a container without
/// CAP_SETPCAP) cannot build a sandbox: it says so up front instead of failing every start.
#[tokio::test]
async fn without_cap_setpcap_the_daemon_offers_no_sandbox_and_says_why() {
    const CAP_SETPCAP: libc::c_ulong = 8;
    let daemon = daemon_without(CAP_SETPCAP);
    let client = daemon.client().await;
    let init = client
        .call("initialize", json!({"clientName": "test"}))
        .await;
    let capabilities = &init["environmentInfo"]["capabilities"];
    assert_eq!(capabilities["linuxSandbox"], false, "{init}");
    client.notify("initialized", json!({})).await;
    let ws = tempfile::tempdir().unwrap();
    let marker = ws.path().join("ran");
    let script = format!("touch {}", marker.display());
    let sandbox = restricted(
        ws.path(),
        vec![entry(special("root"), "read")],
        "restricted",
    );
    let error = refused(
        &client,
        params("p", &["sh", "-c", &script], ws.path(), sandbox),
    )
    .await;
    assert_eq!(error["code"], -32602, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "sandbox intent cannot be enforced on this executor: the daemon cannot drop \
             capabilities"
        ),
        "{error}"
    );
    assert!(!marker.exists(), "a refused start ran");
}

#[tokio::test]
async fn an_unprivileged_daemon_offers_no_sandbox_and_refuses_restricting_intents() {
    let (daemon, _binary) = Daemon::start_unprivileged();
    let client = daemon.client().await;
    let init = client
        .call("initialize", json!({"clientName": "test"}))
        .await;
    let capabilities = &init["environmentInfo"]["capabilities"];
    assert_eq!(capabilities["linuxSandbox"], false, "{init}");
    assert_eq!(capabilities["sandboxedFileStreaming"], false, "{init}");
    client.notify("initialized", json!({})).await;
    let ws = tempfile::tempdir().unwrap();
    let marker = ws.path().join("ran");
    let script = format!("touch {}", marker.display());
    let network_only = json!({
        "permissions": {"type": "managed", "network": "restricted",
            "file_system": {"type": "unrestricted"}},
        "cwd": uri(ws.path()),
        "windowsSandboxLevel": "disabled",
    });
    let read_only = restricted(ws.path(), vec![entry(special("root"), "read")], "enabled");
    for (id, sandbox) in [("net", network_only), ("fs", read_only)] {
        let argv = ["sh", "-c", script.as_str()];
        let error = refused(&client, params(id, &argv, ws.path(), sandbox)).await;
        let message = error["message"].as_str().unwrap();
        assert!(
            message.starts_with(
                "sandbox intent cannot be enforced on this executor: the daemon cannot create \
                 mount and network namespaces (Operation not permitted"
            ),
            "{error}"
        );
    }
    assert!(!marker.exists(), "a refused start ran");
}

#[test]
fn a_helper_that_cannot_prepare_says_why_instead_of_ready() {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    use std::io::{Read as _, Write as _};
    use std::os::fd::AsRawFd as _;
    use std::os::unix::net::UnixStream;
    use std::os::unix::process::CommandExt as _;
    // The fork server as nobody, whose helper cannot make the network namespace it prepares
    // before any plan.
    let (mut server, theirs) = UnixStream::pair().unwrap();
    let mut fork_server = std::process::Command::new(env!("CARGO_BIN_EXE_exec-server"))
        .arg("__supervise")
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            theirs,
        )))
        .stderr(std::process::Stdio::null())
        .uid(65534)
        .gid(65534)
        .current_dir("/")
        .spawn()
        .unwrap();
    // Its first frame: the paths its helpers hide (none here), and how they enforce.
    let settings = br#"{"hidden":[],"enforcement":{"landlockAbi":7,"landlockFs":true}}"#;
    server
        .write_all(&(settings.len() as u32).to_le_bytes())
        .unwrap();
    server.write_all(settings).unwrap();
    let mut ready = [0u8];
    server.read_exact(&mut ready).unwrap();
    assert_eq!(&ready, b"R");
    // Fork a helper for a restricted network (mode 1), at normal priority, with its control
    // socket and its program's socket.
    let (mut ours, control) = UnixStream::pair().unwrap();
    let (_program, program_end) = UnixStream::pair().unwrap();
    let fds = [control.as_raw_fd(), program_end.as_raw_fd()];
    let request = [std::io::IoSlice::new(b"H\x01\x00")];
    let rights = [ControlMessage::ScmRights(&fds)];
    sendmsg::<()>(
        server.as_raw_fd(),
        &request,
        &rights,
        MsgFlags::empty(),
        None,
    )
    .unwrap();
    drop((control, program_end));
    // Its hello (the pidfd that came with it is discarded), then its failure, then EOF.
    let mut text = Vec::new();
    ours.read_to_end(&mut text).unwrap();
    assert_eq!(text.first(), Some(&b'P'), "{text:?}");
    let text = String::from_utf8_lossy(&text[5..]);
    drop(server);
    assert!(fork_server.wait().unwrap().success());
    let failure: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text:?}"));
    assert_eq!(failure["stage"], "namespaces", "{failure}");
    assert_eq!(failure["errno"], libc::EPERM, "{failure}");
}

/// Review finding 3: a sandbox that may write `ws` replaces `ws/pkg` with a link out; a later
/// launch anchored at `ws/pkg` (as its cwd, or as a workspace root) must not get a write grant
/// on the link's target.
#[tokio::test]
async fn a_workspace_root_replaced_by_a_symlink_is_refused() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::create_dir(d.ws("pkg")).unwrap();
    let plant = format!("rm -rf pkg; ln -s {} pkg", d.outside.display());
    let planted = sh(
        &client,
        "plant",
        &d.ws,
        &workspace_write(&d.ws, "enabled"),
        &plant,
    )
    .await;
    assert_ok(&planted);
    let pkg = d.ws("pkg");
    assert!(std::fs::symlink_metadata(&pkg).unwrap().is_symlink());

    let script = format!("echo escaped > {}/escaped", pkg.display());
    let argv = ["sh", "-c", script.as_str()];
    let mut as_root = workspace_write(&d.ws, "enabled");
    as_root["workspaceRoots"] = json!([uri(&pkg)]);
    for (id, cwd, sandbox) in [
        ("as-cwd", &pkg, workspace_write(&pkg, "enabled")),
        ("as-root", &d.ws, as_root),
    ] {
        let error = refused(&client, params(id, &argv, cwd, sandbox)).await;
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("symbolic link `{}`", pkg.display()))
                && message.contains(&d.outside.display().to_string()),
            "{error}"
        );
    }
    d.assert_outside_untouched();

    // System links (root's, in directories only root may change) keep working.
    let system = restricted(
        Path::new("/var/run"),
        vec![
            entry(special("root"), "read"),
            entry(special("project_roots"), "read"),
        ],
        "enabled",
    );
    let outcome = sh(&client, "system", Path::new("/var/run"), &system, "pwd -P").await;
    assert_ok(&outcome);
    assert_eq!(outcome.output.trim(), "/run");
}

/// Review finding 3, raced: a host loop swaps the workspace root with a link out while
/// launches anchored at it run; each launch is refused or writes into the real directory.
#[tokio::test]
async fn a_workspace_root_flipped_during_launches_never_gets_a_write_out() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let (pkg, link) = (d.ws("pkg"), d.ws("pkg-link"));
    std::fs::create_dir(&pkg).unwrap();
    std::os::unix::fs::symlink(&d.outside, &link).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        let cstr = |p: &Path| std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        let (pkg, link) = (cstr(&pkg), cstr(&link));
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: valid NUL-terminated paths; an atomic exchange of the two names.
                let rc = unsafe {
                    libc::syscall(
                        libc::SYS_renameat2,
                        libc::AT_FDCWD,
                        pkg.as_ptr(),
                        libc::AT_FDCWD,
                        link.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
                flips += 1;
            }
            flips
        })
    };
    let (mut ran, mut refused) = (0, 0);
    for launch in 0..30 {
        let id = format!("race{launch}");
        let start = params(
            &id,
            &["sh", "-c", "echo x > escaped-$$"],
            &pkg,
            workspace_write(&pkg, "enabled"),
        );
        match client.request("process/start", start).await {
            Ok(_) => {
                read_all(&client, &id).await;
                ran += 1;
            }
            Err(error) => {
                assert_eq!(error["code"], -32602, "{error}");
                refused += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    eprintln!("{ran} launches ran, {refused} were refused, {flips} flips");
    d.assert_outside_untouched();
}

/// Review finding 6: the helper is the daemon's binary re-executed as root, so a write grant on
/// what the loader reads before it (`/etc/ld.so.preload`, missing here, or a library the
/// daemon maps) would run a sandbox's code as root at the next launch.
#[tokio::test]
async fn write_grants_on_what_the_loader_reads_are_refused() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", daemon.pid())).unwrap();
    let libc = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.contains("/libc.so"))
        .expect("the daemon maps libc");
    let libc = Path::new(libc).canonicalize().unwrap();
    let lib_dir = libc.parent().unwrap().to_path_buf();
    let grant = |target: &Path, script: &str| {
        params(
            "p",
            &["sh", "-c", script],
            &d.ws,
            restricted(
                &d.ws,
                vec![entry(special("root"), "read"), entry(path(target), "write")],
                "enabled",
            ),
        )
    };
    let preload = Path::new("/etc/ld.so.preload");
    assert!(!preload.exists(), "this machine has an ld.so.preload");
    // The attack, made harmless: create and remove the file (an empty one preloads nothing).
    let etc = "test -e /etc/ld.so.preload || { : > /etc/ld.so.preload && rm /etc/ld.so.preload; }";
    let probe = lib_dir.join("exec-server-probe");
    let lib = format!("echo > {0} && rm {0}", probe.display());
    for (target, script, named) in [
        (Path::new("/etc"), etc, "`/etc/ld.so.preload`".to_owned()),
        (
            Path::new("/etc/ld.so.conf.d"),
            "true",
            "`/etc/ld.so.conf.d`".to_owned(),
        ),
        (
            lib_dir.as_path(),
            lib.as_str(),
            format!("`{}/", lib_dir.display()),
        ),
    ] {
        let error = refused(&client, grant(target, script)).await;
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(&named), "{error}");
    }
    assert!(!preload.exists() && !probe.exists());
    // The link through which the kernel finds the loader (PT_INTERP `/lib64/ld-linux...`, on a
    // merged-/usr system a link in `/usr/lib64`): its directory granted, a sandbox could point
    // it at a loader of its own for the next helper. Only tried (`true`), never replaced.
    let interp = Path::new("/usr/lib64/ld-linux-x86-64.so.2");
    if std::fs::symlink_metadata(interp).is_ok_and(|meta| meta.file_type().is_symlink()) {
        let error = refused(&client, grant(interp.parent().unwrap(), "true")).await;
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("a link on the loader's path `/usr/lib64/ld-linux-x86-64.so.2`"),
            "{error}"
        );
    }
    // fs/* calls under a sandbox are guarded the same way.
    let sandbox = restricted(
        &d.ws,
        vec![
            entry(special("root"), "read"),
            entry(path(Path::new("/etc")), "write"),
        ],
        "enabled",
    );
    let error = client
        .request(
            "fs/writeFile",
            json!({"path": uri(&d.ws("f")), "dataBase64": b64(b"x"), "sandbox": sandbox}),
        )
        .await
        .expect_err("the write must be refused");
    assert_eq!(error["code"], -32602, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("`/etc/ld.so.preload`"),
        "{error}"
    );
    // An unrelated directory is still fine.
    assert_ok(&run(&client, grant(&d.ws, "echo ok > ok")).await);
    assert!(d.ws("ok").exists());
}

/// The pid of the (only) process whose argv is `argv`.
fn pid_of(argv: &[&str]) -> Option<i32> {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .find_map(|entry| {
            let pid = entry.file_name().to_str()?.parse().ok()?;
            (std::fs::read(entry.path().join("cmdline")).ok()? == wanted).then_some(pid)
        })
}

/// `/proc/<pid>/limits`' soft and hard limit of `name`.
fn limit(pid: i32, name: &str) -> String {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits.lines().find(|l| l.starts_with(name)).unwrap();
    line.split_whitespace()
        .rev()
        .skip(1)
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A sandboxed process, as uid 0 without capabilities, would pass the same-owner checks of
/// prlimit, setpriority, sched_setaffinity and friends for every root process: the daemon
/// (RLIMIT_NOFILE 8 makes every later start fail, RLIMIT_CPU kills it) and other sessions'
/// processes. It must see and affect its own processes only, with the file system restricted
/// or not (network-only sandbox).
#[tokio::test]
async fn the_sandbox_sees_and_affects_only_its_own_processes() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let (other, _) = daemon.session().await;
    let d = Dirs::new();
    let dpid = daemon.pid();
    let victim = ["sleep", "31.5"];
    let started = other
        .call(
            "process/start",
            params("victim", &victim, &d.ws, workspace_write(&d.ws, "enabled")),
        )
        .await;
    assert_eq!(started["sandboxType"], "linuxSeccomp");
    let mut vpid = None;
    eventually("the other session's process", || {
        vpid = pid_of(&victim);
        vpid.is_some()
    })
    .await;
    let vpid = vpid.unwrap();
    let (nofile, cpu) = (limit(dpid, "Max open files"), limit(dpid, "Max cpu time"));
    let nice = |pid| {
        stat_fields(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap())[16].to_owned()
    };
    let (daemon_nice, victim_nice) = (nice(dpid), nice(vpid));
    let pgrp = unsafe { libc::getpgid(dpid) };
    let probe = format!(
        r#"
import ctypes, errno, os, resource, signal
{PY_ATTEMPT}mask = ctypes.c_ulong(1)
for who, pid in (('daemon', {dpid}), ('other', {vpid})):
    attempt(who + ' nofile', lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, (8, 8)))
    attempt(who + ' cpu', lambda: resource.prlimit(pid, resource.RLIMIT_CPU, (1, 1)))
    attempt(who + ' renice', lambda: os.setpriority(os.PRIO_PROCESS, pid, 19))
    attempt(who + ' affinity', lambda: os.sched_setaffinity(pid, {{0}}))
    attempt(who + ' scheduler', lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0)))
    attempt(who + ' ioprio', lambda: syscall(251, 1, pid, 3 << 13))
    attempt(who + ' migrate', lambda: syscall(256, pid, 64, ctypes.byref(mask), ctypes.byref(mask)))
    attempt(who + ' move_pages', lambda: syscall(279, pid, 0, None, None, None, 0))
    attempt(who + ' kill', lambda: os.kill(pid, signal.SIGKILL))
    print(who, 'visible', os.path.exists('/proc/%d' % pid))
    attempt(who + ' cmdline', lambda: open('/proc/%d/cmdline' % pid).read())
    attempt(who + ' net/tcp', lambda: open('/proc/%d/net/tcp' % pid).read())
attempt('pgrp renice', lambda: os.setpriority(os.PRIO_PGRP, {pgrp}, 1))
attempt('user renice', lambda: os.setpriority(os.PRIO_USER, 65534, 1))
attempt('user ioprio', lambda: syscall(251, 3, 65534, 3 << 13))
attempt('own nofile', lambda: resource.prlimit(0, resource.RLIMIT_NOFILE, (64, 64)))
attempt('own renice', lambda: os.setpriority(os.PRIO_PROCESS, 0, 19))
attempt('own affinity', lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
child = os.fork() or os._exit(0)
print('own child visible', os.path.exists('/proc/%d' % child))
os.waitpid(child, 0)
print('pids', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == [os.getpid()])
"#
    );
    let net_only = json!({"permissions": {"type": "managed", "network": "restricted",
        "file_system": {"type": "unrestricted"}}, "cwd": uri(&d.ws)});
    for (id, sandbox) in [
        ("restricted-fs", workspace_write(&d.ws, "enabled")),
        ("net-only", net_only),
    ] {
        let outcome = py(&client, id, &d.ws, &sandbox, &probe).await;
        for who in ["daemon", "other"] {
            for call in [
                "nofile",
                "cpu",
                "renice",
                "affinity",
                "scheduler",
                "ioprio",
                "migrate",
                "move_pages",
                "kill",
            ] {
                // In a PID namespace of its own, no pid names another process at all.
                let errno = match call == "kill" && crate::common::own_pid_namespaces() {
                    true => "ESRCH",
                    false => "EPERM",
                };
                let expect = format!("{who} {call} ERR {errno}");
                assert!(
                    outcome.output.contains(&expect),
                    "{id}: {expect}: {outcome:?}"
                );
            }
            assert!(
                outcome.output.contains(&format!("{who} visible False")),
                "{id}: {outcome:?}"
            );
            for file in ["cmdline", "net/tcp"] {
                let expect = format!("{who} {file} ERR ENOENT");
                assert!(
                    outcome.output.contains(&expect),
                    "{id}: {expect}: {outcome:?}"
                );
            }
        }
        for expect in [
            "pgrp renice ERR EPERM",
            "user renice ERR EPERM",
            "user ioprio ERR EPERM",
            "own nofile OK",
            "own renice OK",
            "own affinity OK",
            "own child visible True",
            "pids True",
        ] {
            assert!(
                outcome.output.contains(expect),
                "{id}: {expect}: {outcome:?}"
            );
        }
    }
    assert_eq!(limit(dpid, "Max open files"), nofile);
    assert_eq!(limit(dpid, "Max cpu time"), cpu);
    assert_eq!((nice(dpid), nice(vpid)), (daemon_nice, victim_nice));
    assert!(pid_alive(dpid) && pid_alive(vpid));
    // The daemon still starts processes, sandboxed or not.
    assert_ok(
        &sh(
            &client,
            "after",
            &d.ws,
            &workspace_write(&d.ws, "enabled"),
            "true",
        )
        .await,
    );
    client
        .call("process/start", start_params("plain", &["true"]))
        .await;
    other
        .call("process/terminate", json!({"processId": "victim"}))
        .await;
}

/// Newer clients omit `workspaceRoots` when empty and send `[cwd]` themselves when they mean
/// it, so an absent or empty list grants nothing through `project_roots`, never the cwd.
#[tokio::test]
async fn empty_workspace_roots_grant_nothing_through_project_roots() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::write(d.ws("excluded.txt"), "secret\n").unwrap();
    let script = format!("cat {}", d.ws("excluded.txt").display());
    let entries = || {
        vec![
            entry(special("minimal"), "read"),
            entry(special("project_roots"), "read"),
        ]
    };
    let mut absent = restricted(&d.ws, entries(), "enabled");
    absent.as_object_mut().unwrap().remove("workspaceRoots");
    let mut empty = restricted(&d.ws, entries(), "enabled");
    empty["workspaceRoots"] = json!([]);
    // The same entries under `policyContext`, whose empty roots win over the flat ones.
    let mut context_empty = restricted(&d.ws, entries(), "enabled");
    context_empty["policyContext"] = json!({"cwd": uri(&d.ws)});
    for (id, sandbox) in [
        ("absent", absent),
        ("empty", empty),
        ("context-empty", context_empty),
    ] {
        let outcome = sh(&client, id, &d.ws, &sandbox, &script).await;
        assert_ne!(outcome.code, 0, "{id}: {outcome:?}");
        assert!(!outcome.output.contains("secret"), "{id}: {outcome:?}");
    }
    let granted = restricted(&d.ws, entries(), "enabled");
    let outcome = sh(&client, "granted", &d.ws, &granted, &script).await;
    assert_ok(&outcome);
    assert_eq!(outcome.output, "secret\n");
}

/// `policyContext` is where newer clients put the policy's cwd and roots: it anchors
/// `project_roots` for process/start and stands in for the flat `cwd` on fs calls.
#[tokio::test]
async fn policy_context_anchors_process_and_fs_sandboxes() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sub = d.ws("sub");
    std::fs::create_dir(&sub).unwrap();
    let context_only = json!({
        "permissions": {"type": "managed", "network": "enabled",
            "file_system": {"type": "restricted", "entries": [
                entry(special("root"), "read"),
                entry(special("project_roots"), "write"),
            ]}},
        "policyContext": {"cwd": uri(&d.ws), "workspaceRoots": [uri(&sub)]},
    });
    let script = format!(
        "echo in > {}/in.txt && echo out > {}/out.txt",
        sub.display(),
        d.ws.display()
    );
    let outcome = sh(&client, "ctx", &d.ws, &context_only, &script).await;
    assert_denied(&outcome, "out.txt");
    assert_eq!(std::fs::read_to_string(sub.join("in.txt")).unwrap(), "in\n");
    assert!(!d.ws("out.txt").exists());

    let write = |path: &Path| json!({"path": uri(path), "dataBase64": b64(b"x"), "sandbox": context_only.clone()});
    client
        .request("fs/writeFile", write(&sub.join("fs.txt")))
        .await
        .expect("a write inside the policyContext root");
    assert_eq!(std::fs::read(sub.join("fs.txt")).unwrap(), b"x");
    let error = client
        .request("fs/writeFile", write(&d.ws("fs.txt")))
        .await
        .expect_err("a write outside the policyContext root");
    assert_eq!(error["data"]["sandboxDenied"], true, "{error}");
    assert!(!d.ws("fs.txt").exists());
}
