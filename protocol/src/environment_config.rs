//! `environmentConfig/read`: the executor's own codex configuration and requirements layers
//! (TOML), cut down to the key paths the client asks for, as codex's exec-server answers it.

use crate::PathUri;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Selects configuration and requirements fields by literal TOML key path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentConfigReadParams {
    /// The project directory whose `.codex/config.toml` layers are read.
    pub cwd: PathUri,
    /// Each a non-empty list of keys; at least one path across both lists.
    pub config_paths: Vec<Vec<String>>,
    pub requirements_paths: Vec<Vec<String>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentConfigReadResponse {
    /// The executor user's home, against which `~` in path values expands.
    pub user_home_dir: Option<PathUri>,
    /// The executor's codex home (`CODEX_HOME`, else `~/.codex`).
    pub codex_home_dir: PathUri,
    pub hostname: Option<String>,
    pub config: EnvironmentConfigLayerStack,
    pub requirements: EnvironmentConfigLayerStack,
}

/// Layers from lowest to highest precedence; those with nothing selected are left out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentConfigLayerStack {
    pub layers: Vec<EnvironmentConfigLayer>,
    /// Where the client inserts its cloud-provided layers: after the system layer, if kept.
    pub cloud_insertion_index: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentConfigLayer {
    /// e.g. `user (/home/u/.codex/config.toml)`, `project (/repo/.codex/config.toml)`.
    pub source: String,
    /// The directory relative paths in the layer are taken from.
    pub base_dir: PathUri,
    /// The selected part of the file, in the file's key order.
    pub toml: String,
}
