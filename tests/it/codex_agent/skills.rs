//! Skills on the executor (`capabilityDiscoveryV2`): with the capability and codex's feature
//! `executor_capability_discovery_v2`, codex asks the executor for its installed skills
//! (`capabilities/discoverV2`) and lists them to the model. codex 0.171.0 asks only an executor
//! whose `executorVersion` is at least 0.164.0, which this daemon's is (the codex release whose
//! protocol it speaks); before issue #42 it answered neither.

use super::{assert_same, Turn};
use codex_scripted_model::Step;

const SKILL: &str = "---\nname: executor-skill\ndescription: Deploys from the executor. \
                     Use when asked to ship.\n---\n# Deploy\nRun ./deploy.\n";

/// A skill in the executor's `CODEX_HOME/skills` reaches the model's instructions, named and
/// described as codex's own server reports it.
#[tokio::test]
async fn a_skill_on_the_executor_reaches_the_model() {
    let outcome = assert_same(
        &Turn::new(vec![Step::sh("echo done")])
            .executor_file("skills/executor-skill/SKILL.md", SKILL)
            .config("[features]\nexecutor_capability_discovery_v2 = true\n")
            .recording_methods("capabilities/"),
    )
    .await;
    let listed = outcome.skill_docs.join("\n");
    assert!(
        listed.contains("executor-skill") && listed.contains("Deploys from the executor."),
        "the model was not told of the executor's skill: {listed}"
    );
    let methods = outcome.methods.unwrap();
    assert!(
        methods.contains_key("capabilities/discoverV2"),
        "{methods:?}"
    );
}
