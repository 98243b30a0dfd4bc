//! Upstream's sandboxed `process/start` cases (`codex-rs/exec-server/tests/exec_process.rs`,
//! the `remote_*` ones): a profile that reads only the platform (`minimal`) and the workspace,
//! the program's own `arg0`, a tty, a hostile `PATH`, and a profile whose workspace roots are
//! empty. Replies only; output is read once the process closed.

use super::process::{chunks_until_closed, read_when_closed, text};
use super::{assert_same, Both, Scenario};
use crate::common::Client;
use serde_json::{json, Value};
use std::path::Path;

/// Upstream's profile: `minimal` and `project_roots` readable, the workspace the only root.
fn read_workspace(roots: Value) -> Value {
    let entry = |kind: &str| {
        let path = json!({"type": "special", "value": {"kind": kind}});
        json!({"path": path, "access": "read"})
    };
    json!({
        "permissions": {"type": "managed", "network": "restricted", "file_system": {
            "type": "restricted", "entries": [entry("minimal"), entry("project_roots")]}},
        "cwd": "file://{root}/workspace",
        "workspaceRoots": roots,
        "windowsSandboxLevel": "disabled",
    })
}

fn sandboxed(id: &str, argv: &[&str], env: Value, sandbox: Value) -> Value {
    json!({"processId": id, "argv": argv, "cwd": "file://{root}/workspace", "env": env,
        "tty": false, "sandbox": sandbox})
}

fn workspace(root: &Path) {
    std::fs::create_dir(root.join("workspace")).unwrap();
    std::fs::write(root.join("workspace/allowed.txt"), "allowed").unwrap();
    std::fs::write(root.join("denied.txt"), "denied").unwrap();
    let hostile = root.join("workspace/codex-linux-sandbox");
    std::fs::write(&hostile, "#!/bin/sh\nprintf hostile").unwrap();
    let mut mode = std::fs::metadata(&hostile).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut mode, 0o755);
    std::fs::set_permissions(&hostile, mode).unwrap();
}

/// Upstream: `remote_sandboxed_process_preserves_custom_arg0`,
/// `remote_process_keeps_sandbox_helper_visible_with_restricted_reads` and
/// `remote_tty_process_uses_configured_sandbox_helper_with_hostile_path`: under a profile that
/// reads only the platform and the workspace the program sees its own `arg0`, cannot read
/// outside, reads inside, and a `codex-linux-sandbox` first on `PATH` changes nothing.
#[tokio::test]
async fn sandboxed_processes_read_the_workspace_only_as_upstream() {
    let roots = || json!(["file://{root}/workspace"]);
    let path = std::env::var("PATH").unwrap();
    let script = "printf '%s' \"$0\"; if /bin/cat \"$DENIED\" >/dev/null 2>&1; then exit 42; fi";
    let mut arg0 = sandboxed(
        "arg0",
        &["/bin/sh", "-c", script],
        json!({"PATH": path, "DENIED": "{root}/denied.txt"}),
        read_workspace(roots()),
    );
    arg0["arg0"] = json!("custom-arg0");
    let cat = ["/bin/cat", "{root}/workspace/allowed.txt"];
    let restricted = sandboxed("cat", &cat, json!({"PATH": path}), read_workspace(roots()));
    let hostile_path = json!({"PATH": format!("{{root}}/workspace:{path}")});
    let mut tty = sandboxed("tty", &cat, hostile_path, read_workspace(roots()));
    tty["tty"] = json!(true);
    let scenario = Scenario::initialized()
        .replies_only()
        .request(1, "process/start", arg0)
        .request(2, "process/start", restricted)
        .request(3, "process/start", tty)
        .then();
    let scenario = read_when_closed(scenario, 4, "arg0", 3);
    let scenario = read_when_closed(scenario, 6, "cat", 3);
    let scenario = read_when_closed(scenario, 8, "tty", 3);
    let replies = assert_same(&scenario, workspace).await;
    let last = |at: usize| &replies[at]["result"];
    assert_eq!(
        last(4)["chunks"][0]["chunk"],
        "Y3VzdG9tLWFyZzA=",
        "{}",
        last(4)
    );
    assert_eq!(last(4)["exitCode"], 0, "{}", last(4));
    assert_eq!(last(6)["chunks"][0]["chunk"], "YWxsb3dlZA==", "{}", last(6));
    assert_eq!(last(8)["chunks"][0]["chunk"], "YWxsb3dlZA==", "{}", last(8));
}

/// Upstream: `remote_process_preserves_empty_workspace_roots`: with no workspace roots a
/// `project_roots` entry grants nothing, not even the cwd: here not even the shell runs. Both
/// report a denied, non-zero exit without output; the code differs on purpose
/// (docs/protocol.md: ours exits 126 as a shell would, upstream's launcher panics with 101).
#[tokio::test]
async fn remote_process_preserves_empty_workspace_roots() {
    let both = Both::start();
    let mut outcomes = Vec::new();
    for url in both.urls() {
        let dir = crate::common::scratch_dir();
        workspace(dir.path());
        let root = dir.path().to_str().unwrap();
        let mut sandbox = read_workspace(json!([]));
        let entries = &mut sandbox["permissions"]["file_system"]["entries"];
        entries.as_array_mut().unwrap().remove(0);
        let script = format!("/bin/cat {root}/workspace/allowed.txt 2>/dev/null");
        let path = json!({"PATH": std::env::var("PATH").unwrap()});
        let start = sandboxed("p", &["/bin/sh", "-c", &script], path, sandbox);
        let start: Value =
            serde_json::from_str(&start.to_string().replace("{root}", root)).unwrap();
        let client = Client::connect(url).await;
        client.initialize(None).await.unwrap();
        let mut started = client.call("process/start", start).await;
        // This daemon's addition: which backend enforced it.
        started.as_object_mut().unwrap().remove("sandboxBackend");
        let (chunks, last) = chunks_until_closed(&client, "p").await;
        let stdout = text(&chunks, Some("stdout"));
        outcomes.push(json!({"started": started, "stdout": stdout,
            "failed": last["exitCode"] != 0, "sandboxDenied": last["sandboxDenied"]}));
        if outcomes.len() == 1 {
            assert_eq!(last["exitCode"], 126, "{last}");
        }
    }
    assert_eq!(outcomes[0], outcomes[1]);
    assert_eq!(outcomes[0]["failed"], true);
}
