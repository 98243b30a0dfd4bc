//! The project layers of `environmentConfig/read`: each `.codex/config.toml` from the project
//! root down to `cwd`, included only in a directory the user or system config trusts
//! (`projects."<dir>".trust_level = "trusted"`, looked up for the directory, then the project
//! root, then the repository root), as codex's loader finds them.
//!
//! Beyond codex, which follows any link: a project's files are the repository's, not the
//! user's, so a `.codex` or `config.toml` that resolves outside the project root (a symlink to
//! another user's or the system's files) is not read at all.

use super::{parent, read_text, Layer, CONFIG_FILE};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use toml::{Table, Value};

const DEFAULT_ROOT_MARKER: &str = ".git";
const DOT_CODEX: &str = ".codex";
/// Keys a repository may not set, as codex strips them: where credentials go, which commands
/// run on events, and profiles.
const DENIED_KEYS: [&str; 12] = [
    "openai_base_url",
    "chatgpt_base_url",
    "apps_mcp_product_sku",
    "responses_api_metadata",
    "model_provider",
    "model_providers",
    "notify",
    "profile",
    "profiles",
    "experimental_realtime_webrtc_call_base_url",
    "experimental_realtime_ws_base_url",
    "otel",
];

pub(super) fn layers(discovery: &Table, cwd: &Path, codex_home: &Path) -> io::Result<Vec<Layer>> {
    let root = project_root(cwd, &root_markers(discovery)?);
    let trust = Trust::new(discovery, &root, cwd);
    let real_root = canonical(&root);
    let real_codex_home = canonical(codex_home);
    let mut dirs: Vec<&Path> = Vec::new();
    for dir in cwd.ancestors() {
        dirs.push(dir);
        if dir == root {
            break;
        }
    }
    let mut layers = Vec::new();
    for dir in dirs.into_iter().rev() {
        let dot_codex = dir.join(DOT_CODEX);
        if !dot_codex.is_dir()
            || dot_codex == codex_home
            || canonical(&dot_codex) == real_codex_home
        {
            continue;
        }
        if !trust.trusts(dir) {
            continue;
        }
        let file = dot_codex.join(CONFIG_FILE);
        if let Ok(real) = std::fs::canonicalize(&file) {
            if !real.starts_with(&real_root) {
                tracing::warn!(
                    file = %file.display(),
                    "environmentConfig/read: project config resolves outside its project root; not read"
                );
                continue;
            }
        }
        let Some(text) = read_text(&file)? else {
            continue;
        };
        let mut config: Table = toml::from_str(&text).map_err(|err| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "Error parsing project config file {}: {err}",
                    file.display()
                ),
            )
        })?;
        strip_denied(&mut config);
        layers.push(Layer {
            source: format!("project ({})", file.display()),
            base_dir: parent(&file),
            toml: config,
        });
    }
    Ok(layers)
}

/// `project_root_markers` from the config, else `.git`.
fn root_markers(discovery: &Table) -> io::Result<Vec<String>> {
    let Some(value) = discovery.get("project_root_markers") else {
        return Ok(vec![DEFAULT_ROOT_MARKER.to_owned()]);
    };
    let markers = value.as_array().and_then(|markers| {
        markers
            .iter()
            .map(|marker| marker.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
    });
    markers.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "project_root_markers must be an array of strings",
        )
    })
}

/// The nearest directory holding a marker (a `.git` directory only with its `HEAD`), else
/// `cwd` itself.
fn project_root(cwd: &Path, markers: &[String]) -> PathBuf {
    for dir in cwd.ancestors() {
        for marker in markers {
            let path = dir.join(marker);
            let Ok(metadata) = std::fs::metadata(&path) else {
                continue;
            };
            if marker == DEFAULT_ROOT_MARKER && metadata.is_dir() && !path.join("HEAD").exists() {
                continue;
            }
            return dir.to_path_buf();
        }
    }
    cwd.to_path_buf()
}

/// The checkout's repository root: the main checkout's for a linked worktree (whose `.git`
/// file names `<repo>/.git/worktrees/<name>`), else the checkout's own.
fn repository_root(cwd: &Path) -> Option<PathBuf> {
    let base = if cwd.is_dir() { cwd } else { cwd.parent()? };
    for dir in base.ancestors() {
        let dot_git = dir.join(DEFAULT_ROOT_MARKER);
        let Ok(metadata) = std::fs::metadata(&dot_git) else {
            continue;
        };
        if metadata.is_dir() {
            if dot_git.join("HEAD").exists() {
                return Some(dir.to_path_buf());
            }
            continue;
        }
        let text = std::fs::read_to_string(&dot_git).ok()?;
        let git_dir = dir.join(text.strip_prefix("gitdir:")?.trim());
        let worktrees = git_dir.parent()?;
        if worktrees.file_name()? != "worktrees" {
            return Some(dir.to_path_buf());
        }
        return worktrees.parent()?.parent().map(Path::to_path_buf);
    }
    None
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// A path's keys in `projects`: its canonical form, then the path as given.
fn trust_keys(path: &Path) -> Vec<String> {
    let given = path.to_string_lossy().into_owned();
    let real = canonical(path).to_string_lossy().into_owned();
    if real == given {
        vec![real]
    } else {
        vec![real, given]
    }
}

struct Trust {
    /// Whether each `projects` key with a `trust_level` is trusted.
    projects: HashMap<String, bool>,
    /// The project root's keys, then the repository root's.
    fallback_keys: Vec<String>,
}

impl Trust {
    fn new(discovery: &Table, root: &Path, cwd: &Path) -> Self {
        let projects = discovery
            .get("projects")
            .and_then(Value::as_table)
            .into_iter()
            .flatten()
            .filter_map(|(key, project)| {
                let level = project.get("trust_level")?.as_str()?;
                Some((key.clone(), level == "trusted"))
            })
            .collect();
        let mut fallback_keys = trust_keys(root);
        fallback_keys.extend(
            repository_root(cwd)
                .iter()
                .flat_map(|repo| trust_keys(repo)),
        );
        Self {
            projects,
            fallback_keys,
        }
    }

    /// The first key found decides, trusted or not.
    fn trusts(&self, dir: &Path) -> bool {
        trust_keys(dir)
            .iter()
            .chain(&self.fallback_keys)
            .find_map(|key| self.projects.get(key))
            .copied()
            .unwrap_or(false)
    }
}

/// What codex's loader takes out of a project layer (with no credential broker configured).
fn strip_denied(config: &mut Table) {
    for key in DENIED_KEYS {
        config.remove(key);
    }
    if let Some(features) = config.get_mut("features").and_then(Value::as_table_mut) {
        features.remove("respect_system_proxy");
        if let Some(proxy) = features
            .get_mut("network_proxy")
            .and_then(Value::as_table_mut)
        {
            proxy.remove("credential_broker");
        }
    }
    let chat = config
        .get_mut("tui")
        .and_then(|tui| tui.get_mut("keymap"))
        .and_then(|keymap| keymap.get_mut("chat"))
        .and_then(Value::as_table_mut);
    if let Some(chat) = chat {
        chat.remove("previous_permission_mode");
        chat.remove("next_permission_mode");
    }
}
