//! The executor's own codex configuration (`environmentConfigRead`) as the agent uses it: with
//! the capability, codex reads the executor's `mcp_servers` at startup, to run the executor's
//! HTTP MCP servers there.

use super::{assert_same, Turn};
use codex_scripted_model::Step;

/// An executor whose codex home names an (disabled) HTTP MCP server: codex asks this daemon for
/// its configuration as it asks its own server, and the turn runs the same.
#[tokio::test]
async fn the_agent_reads_the_executors_own_codex_config() {
    let outcome = assert_same(
        &Turn::new(vec![Step::sh("echo configured")])
            .executor_config(
                "[mcp_servers.executor_docs]\nurl = \"http://127.0.0.1:9/mcp\"\nenabled = false\n",
            )
            .recording_methods("environmentConfig/"),
    )
    .await;
    assert!(outcome.told[0].as_deref().unwrap().contains("configured"));
    let methods = outcome.methods.unwrap();
    assert_eq!(
        methods.get("environmentConfig/read"),
        Some(&1),
        "{methods:?}"
    );
}
