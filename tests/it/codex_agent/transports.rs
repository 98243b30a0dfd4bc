//! The ways codex reaches an executor, and a connection lost in the middle of a command.

use super::{assert_same, Reach, Turn};
use codex_scripted_model::Step;
use std::time::Duration;

fn small_turn() -> Turn {
    Turn::new(vec![
        Step::sh("echo via > via.txt; cat via.txt"),
        Step::patch("*** Add File: patched.txt\n+patched\n"),
    ])
}

#[tokio::test]
async fn environments_toml_with_url() {
    let outcome = assert_same(&small_turn().reach(Reach::TomlUrl)).await;
    assert_eq!(outcome.files["work/via.txt"], "via\n");
}

/// codex spawns the executor itself and speaks to it over stdio.
#[tokio::test]
async fn environments_toml_with_program() {
    let outcome = assert_same(&small_turn().reach(Reach::TomlProgram)).await;
    assert_eq!(outcome.files["work/patched.txt"], "patched\n");
}

/// The executor connection is cut while a command runs: codex resumes the session on a new
/// connection and the command's output and exit still reach the model.
#[tokio::test]
async fn connection_cut_mid_command() {
    let outcome = assert_same(
        &Turn::new(vec![
            Step::sh("echo before; sleep 3; echo after > after.txt; echo after"),
            Step::sh("cat after.txt"),
        ])
        .cut_after(Duration::from_millis(1500)),
    )
    .await;
    let told = outcome.told[0].as_deref().unwrap();
    assert!(told.contains("after"), "{told}");
    assert_eq!(outcome.files["work/after.txt"], "after\n");
}
