//! codex's sandbox modes, applied by the executor to every command and every file edit of the
//! turn: what lands inside the workspace, what is refused outside it, with and without a
//! `TMPDIR` in the executor's environment (systemd services and most containers have none),
//! and the network axis.

use super::{assert_same, run, Executor, Sandbox, Turn};
use codex_scripted_model::Step;

/// What a workspace-write turn does: writes inside the workspace by command and by patch, and
/// the same outside it, which must be refused and leave nothing behind.
fn workspace_write_turn() -> Turn {
    Turn::new(vec![
        Step::sh("echo inside > inside.txt && cat inside.txt"),
        // The shell's own complaint silenced too: its order against stdout is a race.
        Step::sh("{ echo outside > {run}/outside/cmd.txt; } 2>/dev/null; echo rc=$?"),
        Step::patch("*** Add File: sub/patched.txt\n+patched\n"),
        Step::patch("*** Add File: {run}/outside/patched.txt\n+escaped\n"),
        Step::sh("mkdir -p made/deeper && echo ok > made/deeper/f && cat made/deeper/f"),
        Step::sh("echo \"tmpdir=${TMPDIR:-unset}\"; mktemp > /dev/null && echo mktemp-ok"),
    ])
    .sandbox(Sandbox::WorkspaceWrite { network: false })
}

fn assert_confined(outcome: &super::Outcome) {
    assert_eq!(outcome.files["work/inside.txt"], "inside\n");
    assert_eq!(outcome.files["work/sub/patched.txt"], "patched\n");
    assert_eq!(outcome.files["work/made/deeper/f"], "ok\n");
    assert!(
        !outcome
            .files
            .keys()
            .any(|path| path.starts_with("outside/")),
        "{:?}",
        outcome.files
    );
    let told = outcome.told[1].as_deref().unwrap();
    assert!(told.contains("rc=1"), "{told}");
}

/// Issue 40's first finding: with no TMPDIR the profile's `tmpdir` entry names nothing, and the
/// turn must still run sandboxed instead of every call being refused.
#[tokio::test]
async fn workspace_write_without_tmpdir() {
    let outcome = assert_same(&workspace_write_turn()).await;
    assert_confined(&outcome);
}

#[tokio::test]
async fn workspace_write_with_tmpdir() {
    let outcome = assert_same(&workspace_write_turn().with_tmpdir()).await;
    assert_confined(&outcome);
    assert!(outcome.told[5].as_deref().unwrap().contains("mktemp-ok"));
}

/// Read-only: nothing is written, by command or by patch, inside the workspace or out.
#[tokio::test]
async fn read_only() {
    let outcome = assert_same(
        &Turn::new(vec![
            Step::sh("cat kept.txt; { echo changed > kept.txt; } 2>/dev/null; echo rc=$?"),
            Step::patch("*** Add File: new.txt\n+new\n"),
            Step::patch("*** Update File: kept.txt\n@@\n-kept\n+changed\n"),
        ])
        .sandbox(Sandbox::ReadOnly)
        .file("kept.txt", "kept\n"),
    )
    .await;
    assert_eq!(outcome.files["work/kept.txt"], "kept\n");
    assert!(!outcome.files.contains_key("work/new.txt"));
    assert!(outcome.told[0].as_deref().unwrap().contains("rc=1"));
}

/// A TCP connection to a listener on the host's loopback: refused with the network restricted,
/// made with it allowed.
fn network_turn(port: u16, network: bool) -> Turn {
    Turn::new(vec![Step::sh(format!(
        "(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo connected || echo refused"
    ))])
    .sandbox(Sandbox::WorkspaceWrite { network })
}

#[tokio::test]
async fn network_restricted_and_allowed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let restricted = assert_same(&network_turn(port, false)).await;
    assert!(restricted.told[0].as_deref().unwrap().contains("refused"));
    let allowed = assert_same(&network_turn(port, true)).await;
    assert!(allowed.told[0].as_deref().unwrap().contains("connected"));
}

/// A job a sandboxed command leaves in the background: a deliberate difference
/// (docs/protocol.md). codex's server runs the command in bubblewrap's PID namespace, which ends
/// with the command; this daemon's sandbox keeps the job, confined as the command was, until
/// the tree is killed (`process/signal` `kill`, the session's end, shutdown), as an unsandboxed
/// command's job is kept on both. Everything else of the turn is the same.
#[tokio::test]
async fn background_job_of_a_sandboxed_command() {
    let turn = Turn::new(vec![
        Step::sh("(sleep 0.5; echo late > late.txt) > /dev/null 2>&1 &"),
        Step::sh("sleep 1.5; cat late.txt 2>/dev/null || echo no-late"),
    ])
    .sandbox(Sandbox::WorkspaceWrite { network: false });
    let ours = run(&turn, Executor::Ours).await;
    let codex = run(&turn, Executor::Codex).await;
    assert_eq!(ours.told[0], codex.told[0]);
    assert!(
        ours.told[1].as_deref().unwrap().ends_with("\nlate"),
        "{:?}",
        ours.told[1]
    );
    assert!(
        codex.told[1].as_deref().unwrap().ends_with("\nno-late"),
        "{:?}",
        codex.told[1]
    );
    assert_eq!(ours.files["work/late.txt"], "late\n");
    assert!(!codex.files.contains_key("work/late.txt"));
}
