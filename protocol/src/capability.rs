//! `capabilityRoots/discoverV1`: what a codex client loads from executor-side capability
//! roots (skills, plugins, MCP and apps configuration), gathered in one call per batch of roots.
//! Absent optional members are `null` on the wire, as codex sends them.

use crate::sandbox::FileSystemSandboxContext;
use crate::PathUri;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverParams {
    /// At most 128.
    pub roots: Vec<CapabilityRoot>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityRoot {
    /// The client's name for the root, echoed in its result.
    pub id: String,
    pub path: PathUri,
    /// Scan and read under this intent, as the fs methods do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<FileSystemSandboxContext>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverResult {
    /// One per root, in request order.
    pub roots: Vec<DiscoveredRoot>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredRoot {
    pub id: String,
    pub path: PathUri,
    /// The root's own plugin, when it has a manifest.
    pub plugin: Option<DiscoveredPlugin>,
    /// Every `SKILL.md` below the root, by path.
    pub skills: Vec<DiscoveredSkill>,
    /// The manifest naming the root's skills (its own or its nearest ancestor's) first, then
    /// one per plugin directory found below it.
    pub namespace_manifests: Vec<TextFile>,
    /// Files left out and parts of the scan that failed.
    pub warnings: Vec<String>,
    /// Why nothing was discovered under this root.
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TextFile {
    pub path: PathUri,
    pub contents: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredPlugin {
    pub manifest: TextFile,
    pub mcp_config: Option<TextFile>,
    pub apps_config: Option<TextFile>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredSkill {
    pub instructions: TextFile,
    /// `agents/openai.yaml` beside the `SKILL.md`.
    pub metadata: Option<TextFile>,
}

/// `capabilities/discoverV2`: the executor's installed plugins and its standalone skills, each
/// described (front matter, `agents/openai.yaml`), as codex's exec-server answers it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverV2Params {
    /// The client's working directory; project skills are not part of the answer.
    pub cwd: PathUri,
    /// Read the plugins and skills under this intent, as the fs methods do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<FileSystemSandboxContext>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverV2Result {
    /// One per installed plugin (its active version), by id.
    pub plugins: Vec<ExecutorPlugin>,
    /// The skills outside plugins, root by root, each root's by path.
    pub skills: Vec<ExecutorSkill>,
    /// Generic: they say that something was left out, not what.
    pub warnings: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorPlugin {
    /// `<plugin>@<marketplace>`, from the cache directory's names.
    pub id: String,
    pub display_name: String,
    pub remote_plugin_id: Option<String>,
    /// The version directory chosen.
    pub version: String,
    pub root: PathUri,
    pub files: DiscoveredPlugin,
    /// Named `<namespace>:<skill>`.
    pub skills: Vec<ExecutorSkill>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorSkill {
    pub name: String,
    pub description: String,
    pub short_description: Option<String>,
    /// The `SKILL.md`.
    pub path: PathUri,
    /// Where a standalone skill was found; absent for a plugin's skills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery_root: Option<DiscoveryRoot>,
    pub dependencies: Option<SkillDependencies>,
    pub policy: Option<SkillPolicy>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryRoot {
    /// `codex-home-skills` or `user-agent-skills`.
    pub id: String,
    pub path: PathUri,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkillDependencies {
    pub tools: Vec<SkillToolDependency>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkillToolDependency {
    #[serde(rename = "type")]
    pub kind: String,
    pub value: String,
    pub description: Option<String>,
    pub transport: Option<String>,
    pub command: Option<String>,
    pub url: Option<String>,
    /// Always null: codex's server does not read it from `agents/openai.yaml` either.
    pub oauth_callback_port: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkillPolicy {
    pub allow_implicit_invocation: Option<bool>,
    /// `codex`, `chatgpt` or `atlas`.
    pub products: Vec<String>,
}
