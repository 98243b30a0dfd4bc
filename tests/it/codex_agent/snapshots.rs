//! codex's shell snapshots (`shellSnapshotV2`) as the agent uses them: with the capability
//! and codex's `shell_snapshot` and `shell_snapshot_v2` features (the first alone sends
//! nothing), each `exec_command` carries `shellSnapshot` and runs in
//! the executor's login profile, captured once for the thread. Without the capability (this
//! daemon before issue #42) codex sends a plain login shell, which does not read `.bashrc`, and
//! the commands below fail where codex's own server runs them.

use super::{assert_same, Turn};
use codex_scripted_model::Step;

/// The profile's function and exported variable reach the agent's commands on both
/// executors; the credential it exports does not (excluded by codex's
/// `shell_environment_policy`, which codex sends as `envPolicy`), nor do the snapshot's own
/// variables (`grep -c` counts none and exits 1).
#[tokio::test]
async fn the_agents_commands_run_in_the_login_profile() {
    let outcome = assert_same(
        &Turn::new(vec![
            Step::sh("greet agent; echo var=$PROFILE_VAR"),
            Step::sh("echo token=[$API_TOKEN]; env | grep -c SNAPSHOT_STATE"),
        ])
        .login_profile(
            "export PROFILE_VAR=from-profile\nexport API_TOKEN=profile-token-value\n\
             greet() { echo \"hello $1\"; }\n",
        )
        .config(
            "[features]\nshell_snapshot = true\nshell_snapshot_v2 = true\n\n\
             [shell_environment_policy]\nexclude = [\"API_TOKEN\"]\n",
        ),
    )
    .await;
    let first = outcome.told[0].as_deref().unwrap();
    assert!(first.contains("hello agent\nvar=from-profile"), "{first}");
    let second = outcome.told[1].as_deref().unwrap();
    assert!(second.contains("token=[]\n0"), "{second}");
}
