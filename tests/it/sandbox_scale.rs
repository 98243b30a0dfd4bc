//! Sandboxed launches as orchestrators run them: many connections starting sandboxed commands
//! in one git workspace at once, while other sessions write and remove the very names the
//! sandboxes protect (`.codex`, `.agents`), and some of the launches attack those names.

use crate::common;
use crate::sandbox_support;

use common::*;
use sandbox_support::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Tries every protected name from inside, for about a third of a second, and prints
/// `BREACH <what>` for each attempt that got through.
const ATTACK: &str = r#"
i=0
while [ $i -lt 30 ]; do
  i=$((i+1))
  (echo pwned >> .git/config) 2>/dev/null && echo BREACH-git-config
  mkdir .codex 2>/dev/null && echo BREACH-mkdir-codex
  (echo pwned > .codex/config.toml) 2>/dev/null && echo BREACH-codex-config
  (echo pwned > .agents/skill.md) 2>/dev/null && echo BREACH-agents
  rm -rf .vscode 2>/dev/null; mkdir .vscode 2>/dev/null && echo BREACH-mkdir-vscode
  ln -s /tmp .agents 2>/dev/null && echo BREACH-link-agents
  sleep 0.01
done
echo done
"#;

/// One client's run: `starts` sandboxed starts, every fifth an attack; returns what went wrong.
async fn launches(daemon: &Daemon, ws: PathBuf, client_no: usize, starts: usize) -> Vec<String> {
    let (client, _) = daemon.session().await;
    let sandbox = workspace_write(&ws, "restricted");
    let mut problems = Vec::new();
    for start in 0..starts {
        let id = format!("c{client_no}-{start}");
        let attack = start % 5 == 2;
        let argv: &[&str] = if attack {
            &["sh", "-c", ATTACK]
        } else {
            &["/bin/true"]
        };
        if let Err(error) = client
            .request("process/start", params(&id, argv, &ws, sandbox.clone()))
            .await
        {
            problems.push(format!("{id}: start refused: {error}"));
            continue;
        }
        let (bytes, last) = read_all(&client, &id).await;
        let output = String::from_utf8_lossy(&bytes);
        if last["exitCode"] != 0 || (attack && !output.ends_with("done\n")) {
            problems.push(format!("{id}: exit {} output {output:?}", last["exitCode"]));
        }
        if output.contains("BREACH") {
            problems.push(format!("{id}: the attack got through: {output}"));
        }
    }
    problems
}

/// Another session, meanwhile: creates, fills and removes `.codex` and `.agents` with plain
/// (unsandboxed) fs calls, and tries to write into them with sandboxed ones, until `stop`.
/// Returns every call whose outcome was wrong.
async fn churn(daemon: &Daemon, ws: PathBuf, stop: Arc<AtomicBool>) -> Vec<String> {
    let (client, _) = daemon.session().await;
    let sandbox = workspace_write(&ws, "restricted");
    let mut problems = Vec::new();
    let mut rounds = 0;
    while !stop.load(Ordering::Relaxed) || rounds < 3 {
        rounds += 1;
        for name in [".codex", ".agents"] {
            let dir = ws.join(name);
            let plain = [
                (
                    "fs/createDirectory",
                    json!({"path": uri(&dir), "recursive": true}),
                ),
                (
                    "fs/writeFile",
                    json!({"path": uri(&dir.join("notes.md")), "dataBase64": b64(b"notes")}),
                ),
                (
                    "fs/remove",
                    json!({"path": uri(&dir), "recursive": true, "force": true}),
                ),
            ];
            for (method, params) in plain {
                if let Err(error) = client.request(method, params.clone()).await {
                    problems.push(format!("{method} {params}: {error}"));
                }
            }
            // Under the workspace-write intent the protected name stays read-only.
            let write = json!({"path": uri(&dir.join("config.toml")),
                "dataBase64": b64(b"pwned"), "sandbox": sandbox});
            if let Ok(result) = client.request("fs/writeFile", write).await {
                problems.push(format!("a sandboxed write into {name} succeeded: {result}"));
            }
        }
        let write = json!({"path": uri(&ws.join("scratch.txt")),
            "dataBase64": b64(b"ok"), "sandbox": sandbox});
        if let Err(error) = client.request("fs/writeFile", write).await {
            problems.push(format!(
                "a sandboxed write into the workspace failed: {error}"
            ));
        }
    }
    problems
}

/// Every file under `dir` whose contents mention `pwned`.
fn pwned_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file()
                && std::fs::read(entry.path())
                    .is_ok_and(|bytes| bytes.windows(5).any(|window| window == b"pwned"))
            {
                found.push(entry.path());
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_connections_start_sandboxes_in_one_git_workspace_without_spurious_errors() {
    let daemon = Daemon::start();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let status = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&ws)
        .status()
        .unwrap();
    assert!(status.success());
    let config = std::fs::read(ws.join(".git/config")).unwrap();
    let mut problems = Vec::new();
    for (clients, starts) in [(2, 20), (4, 20), (8, 10), (50, 3)] {
        let stop = Arc::new(AtomicBool::new(false));
        let churning = churn(&daemon, ws.clone(), stop.clone());
        let runs = async {
            let runs = (0..clients).map(|client| launches(&daemon, ws.clone(), client, starts));
            let found: Vec<Vec<String>> = futures::future::join_all(runs).await;
            stop.store(true, Ordering::Relaxed);
            found
        };
        let (churned, ran) = tokio::join!(churning, runs);
        let found: Vec<String> = churned
            .into_iter()
            .chain(ran.into_iter().flatten())
            .collect();
        if !found.is_empty() {
            let first: Vec<&String> = found.iter().take(8).collect();
            problems.push(format!(
                "{clients} clients, {} problems: {first:#?}",
                found.len()
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(std::fs::read(ws.join(".git/config")).unwrap(), config);
    assert_eq!(pwned_files(&ws), Vec::<PathBuf>::new());
    // Once every sandbox is gone, none of its placeholders is left.
    eventually("placeholders removed", || {
        !ws.join(".vscode").exists() && !ws.join(".codex").exists() && !ws.join(".agents").exists()
    })
    .await;
}

/// cargo hard-links the binary it builds, and every sandboxed launch used to search each write
/// root for such a link to the daemon's binary (6 launches/s in a 50,000-file workspace, roots
/// over 200,000 entries refused). Nothing is searched now: the kernel refuses every write to a
/// binary that runs, and the daemon and its helpers run it. The attack the search guarded
/// against is made here, through a link inside the write root.
#[tokio::test]
async fn a_hard_link_to_the_daemon_binary_in_a_write_root_cannot_be_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let binary = root.join("bin/exec-server");
    std::fs::create_dir_all(binary.parent().unwrap()).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_exec-server"), &binary).unwrap();
    let ws = root.join("ws");
    std::fs::create_dir_all(ws.join("deep")).unwrap();
    std::fs::hard_link(&binary, ws.join("deep/exec-server")).unwrap();
    let original = std::fs::read(&binary).unwrap();
    let daemon = Daemon::launch(Daemon::command(binary.to_str().unwrap(), &[], &[]));
    let (client, _) = daemon.session().await;
    let sandbox = workspace_write(&ws, "restricted");
    let attack = sh(
        &client,
        "attack",
        &ws,
        &sandbox,
        "cd deep; echo x >> exec-server; echo append=$?; : > exec-server; echo truncate=$?; \
         cp /bin/true exec-server; echo cp=$?; \
         dd if=/dev/zero of=exec-server bs=1 count=1 conv=notrunc 2>&1; echo dd=$?; \
         chmod 4755 exec-server; echo setuid=$?",
    )
    .await;
    for step in ["append", "truncate", "cp", "dd", "setuid"] {
        assert!(
            !attack.output.contains(&format!("{step}=0")),
            "{step} went through: {attack:?}"
        );
    }
    assert!(attack.output.contains("Text file busy"), "{attack:?}");
    assert!(
        std::fs::read(&binary).unwrap() == original,
        "the binary changed"
    );
    // The daemon goes on launching sandboxes from the same binary.
    assert_ok(&sh(&client, "after", &ws, &sandbox, "echo ok > ok.txt").await);
    assert_eq!(std::fs::read_to_string(ws.join("ok.txt")).unwrap(), "ok\n");
}
