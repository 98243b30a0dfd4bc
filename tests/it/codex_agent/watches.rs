//! Missing-path watches (`fsWatchMissing`) as the agent uses them: with the capability, codex
//! asks for one `fs/watchMissing` over the paths it found missing instead of polling them.

use super::{assert_same, Turn};
use codex_scripted_model::Step;

/// A turn whose commands create a file codex found missing when it started (AGENTS.md): codex
/// asks this daemon for what it asks its own server, one missing-path watch included.
#[tokio::test]
async fn the_agent_watches_the_paths_it_found_missing() {
    let outcome = assert_same(
        &Turn::new(vec![
            Step::sh("echo later > AGENTS.md && echo made"),
            Step::sh("cat AGENTS.md"),
        ])
        .recording_methods("fs/"),
    )
    .await;
    assert!(outcome.told[1].as_deref().unwrap().contains("later"));
    let methods = outcome.methods.unwrap();
    assert_eq!(methods.get("fs/watchMissing"), Some(&1), "{methods:?}");
}
