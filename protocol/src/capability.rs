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
