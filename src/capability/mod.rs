//! `capabilityRoots/discoverV1`: the files a codex client loads from capability roots on the
//! executor (skills, plugin manifests, MCP and apps configuration), found and read in one call,
//! as codex's exec-server does it (`codex-rs/exec-server/src/capability_discovery.rs`): the
//! same scan limits, selection, order, warnings and errors, so the client's plugin and skill
//! loaders see the same bundle from either daemon. `v2` (`capabilities/discoverV2`) reads each
//! of its locations as such a root.
//!
//! Every access is an fs one-shot (`fs/getMetadata`, `fs/walk`, `fs/readFile`) routed once per
//! root through the fs sandbox gate, so a root with a restricting `sandbox` is scanned and read
//! by the confined helper exactly as the fs methods would be.
mod v2;
use crate::fs::sandbox::{route, Route};
use crate::fs::{run_routed, OneShot, READ_FILE_TOO_LARGE};
use crate::rpc::RpcError;
use exec_server_protocol::capability::*;
use exec_server_protocol::fs::{
    GetMetadataParams, Metadata, ReadFileParams, ReadFileResult, WalkEntryKind, WalkOptions,
    WalkParams, WalkResult,
};
use exec_server_protocol::methods as m;
use exec_server_protocol::PathUri;
use futures::StreamExt as _;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
pub(crate) use v2::discover as discover_v2;

const MAX_ROOTS: usize = 128;
/// Roots discovered at once, as codex does.
const CONCURRENT_ROOTS: usize = 8;
const MAX_FILE_BYTES: u64 = 1024 * 1024;
const MAX_BUNDLE_BYTES: u64 = 16 * 1024 * 1024;
/// The files (paths, text, and their members' names) and the warnings of one call's reply, all
/// roots together, as JSON (escapes counted): well below 16 MiB, the frame limit of a default
/// tungstenite client, so that the whole reply reaches one.
const MAX_REPLY_BYTES: u64 = 12 * 1024 * 1024;
/// What a file adds to the reply besides its path and text: the members' names and quotes.
const FILE_OVERHEAD: u64 = 64;
const SKILL_FILE: &str = "SKILL.md";
const SKILL_METADATA: &str = "agents/openai.yaml";
const DEFAULT_MCP_CONFIG: &str = ".mcp.json";
/// The manifest of a plugin directory, first found wins.
const MANIFESTS: [&str; 3] = [
    ".codex-plugin/plugin.json",
    ".claude-plugin/plugin.json",
    ".cursor-plugin/plugin.json",
];

/// codex's scan: 6 levels below the root, counted from 0 as `fs/walk` counts them.
const SCAN: WalkOptions = WalkOptions {
    max_depth: 6,
    max_directories: 2_000,
    max_entries: 20_000,
    follow_directory_symlinks: true,
    prune_hidden_directories: false,
};

pub(crate) async fn discover(params: DiscoverParams) -> Result<DiscoverResult, RpcError> {
    if params.roots.len() > MAX_ROOTS {
        return Err(RpcError::invalid_request(format!(
            "capability root discovery accepts at most {MAX_ROOTS} roots"
        )));
    }
    // Each directory is discovered once: a root naming one already named answers with a
    // pointer to the first instead of the same files again.
    let mut first_of = HashMap::new();
    let mut jobs = Vec::with_capacity(params.roots.len());
    for (index, root) in params.roots.into_iter().enumerate() {
        let first = match merge_key(&root).await {
            Some(key) => first_of
                .entry(key)
                .or_insert((index, root.id.clone()))
                .clone(),
            None => (index, root.id.clone()),
        };
        jobs.push((root, (first.0 != index).then_some(first.1)));
    }
    let budget = CallBudget::default();
    let roots = futures::stream::iter(jobs)
        .map(|(root, first)| {
            let budget = &budget;
            async move {
                match first {
                    None => discover_root(root, budget).await,
                    Some(first) => duplicate(root, &first, budget),
                }
            }
        })
        .buffered(CONCURRENT_ROOTS)
        .collect()
        .await;
    Ok(DiscoverResult { roots })
}

/// What makes two roots one: the same directory, read the same way. A root read directly is
/// known by its canonical directory; one read under a restricting sandbox by its path and its
/// sandbox as given, since resolving its links outside the sandbox would tell the client what
/// the sandbox hides. None: the root is discovered on its own.
async fn merge_key(root: &CapabilityRoot) -> Option<(std::path::PathBuf, String)> {
    match route(root.sandbox.clone()).ok()? {
        Route::Direct => {
            let directory = tokio::fs::canonicalize(root.path.to_path().ok()?)
                .await
                .ok()?;
            // Anything else fails on its own, with its own error.
            let is_directory = tokio::fs::metadata(&directory).await.ok()?.is_dir();
            is_directory.then_some((directory, String::new()))
        }
        Route::Confined(_) => {
            let sandbox = serde_json::to_string(&root.sandbox).ok()?;
            Some((root.path.to_path().ok()?, sandbox))
        }
    }
}

/// The answer for a root naming the directory of root `first`, discovered there.
fn duplicate(root: CapabilityRoot, first: &str, budget: &CallBudget) -> DiscoveredRoot {
    let mut warnings = Vec::new();
    budget.warn(
        &mut warnings,
        format!(
            "capability root {} is the directory of root `{first}`; its files are listed there",
            root.path
        ),
    );
    DiscoveredRoot {
        id: root.id,
        path: root.path,
        plugin: None,
        skills: Vec::new(),
        namespace_manifests: Vec::new(),
        warnings,
        error: None,
    }
}

/// The bytes one call's reply may spend on its roots' files and warnings, all roots together
/// (beyond codex, whose bound is per root: 128 roots made 2 GiB).
#[derive(Default)]
struct CallBudget {
    spent: AtomicU64,
}

impl CallBudget {
    fn fits(&self, bytes: u64) -> bool {
        self.spent.load(Ordering::Relaxed).saturating_add(bytes) <= MAX_REPLY_BYTES
    }

    /// Adds `warning` to `warnings` if it fits; once one does not, says so, once.
    fn warn(&self, warnings: &mut Vec<String>, warning: String) {
        if self.spend(json_len(&warning)) {
            warnings.push(warning);
        } else {
            Self::full(warnings);
        }
    }

    /// Notes in `warnings`, once, that something was left out for this budget.
    fn full(warnings: &mut Vec<String>) {
        let full = format!("capability discovery reply exceeds the {MAX_REPLY_BYTES}-byte limit");
        if !warnings.contains(&full) {
            warnings.push(full);
        }
    }

    /// Spends `bytes` if they fit.
    fn spend(&self, bytes: u64) -> bool {
        let spend = |spent: u64| {
            spent
                .checked_add(bytes)
                .filter(|&total| total <= MAX_REPLY_BYTES)
        };
        (self.spent)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, spend)
            .is_ok()
    }
}

async fn discover_root(root: CapabilityRoot, budget: &CallBudget) -> DiscoveredRoot {
    let mut found = DiscoveredRoot {
        id: root.id,
        path: root.path.clone(),
        plugin: None,
        skills: Vec::new(),
        namespace_manifests: Vec::new(),
        warnings: Vec::new(),
        error: None,
    };
    let path = root.path;
    let route = match route(root.sandbox) {
        Ok(route) => route,
        Err(err) => {
            found.error = Some(format!(
                "failed to inspect capability root {path}: {}",
                RpcError::from(err).message
            ));
            return found;
        }
    };
    let mut reader = Reader {
        route,
        bytes: 0,
        budget,
        warnings: Vec::new(),
    };
    match reader.metadata(&path).await {
        Ok(meta) if meta.is_directory => {}
        Ok(_) => {
            found.error = Some(format!("capability root {path} is not a directory"));
            return found;
        }
        Err(err) => {
            found.error = Some(format!(
                "failed to inspect capability root {path}: {}",
                err.message
            ));
            return found;
        }
    }
    match reader.scan(&path).await {
        Ok(scanned) => reader.bundle(&path, scanned, &mut found).await,
        Err(err) => {
            found.error = Some(format!(
                "failed to scan capability root {path}: {}",
                err.message
            ));
            return found;
        }
    }
    found.warnings = reader.warnings;
    found
}

/// What the scan of a root selected.
struct Scanned {
    /// Every `SKILL.md`, by URI string.
    skills: Vec<PathUri>,
    /// Every plugin manifest, by plugin directory and then [`MANIFESTS`] priority.
    manifests: Vec<PathUri>,
}

/// One root's reads: through its sandbox route, within its byte budget and the call's, with
/// its warnings.
struct Reader<'call> {
    route: Route,
    /// Bytes of the root's bundle so far.
    bytes: u64,
    budget: &'call CallBudget,
    warnings: Vec<String>,
}

impl Reader<'_> {
    fn warn(&mut self, warning: String) {
        self.budget.warn(&mut self.warnings, warning);
    }

    async fn call<M: OneShot, T: DeserializeOwned>(
        &self,
        params: M::Params,
    ) -> Result<T, RpcError> {
        let value = run_routed::<M>(&self.route, params).await?;
        serde_json::from_value(value)
            .map_err(|err| RpcError::internal(format!("{} reply: {err}", M::NAME)))
    }

    async fn metadata(&self, path: &PathUri) -> Result<Metadata, RpcError> {
        let params = GetMetadataParams {
            path: path.clone(),
            follow_symlinks: None,
            sandbox: None,
        };
        self.call::<m::FsGetMetadata, _>(params).await
    }

    async fn scan(&mut self, root: &PathUri) -> Result<Scanned, RpcError> {
        let params = WalkParams {
            path: root.clone(),
            options: SCAN,
            sandbox: None,
        };
        let walk: WalkResult = self.call::<m::FsWalk, _>(params).await?;
        for error in walk.errors {
            self.warn(format!(
                "failed to scan capability path {}: {}",
                error.path, error.message
            ));
        }
        if walk.truncated {
            self.warn(format!(
                "capability scan reached its traversal limit (root: {root})"
            ));
        }
        let files = walk
            .entries
            .into_iter()
            .filter(|entry| entry.kind == WalkEntryKind::File)
            .map(|entry| entry.path);
        let (mut skills, mut manifests) = (Vec::new(), Vec::new());
        for file in files {
            if basename(&file) == Some(SKILL_FILE) {
                skills.push(file);
            } else if manifest_priority(&file).is_some() {
                manifests.push(file);
            }
        }
        skills.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        manifests.sort_by_key(|manifest| {
            let directory = plugin_directory(manifest).map(|dir| dir.as_str().to_owned());
            (directory, manifest_priority(manifest))
        });
        Ok(Scanned { skills, manifests })
    }

    /// Fills `found` from what the scan selected: the plugin, its namespaces, the skills.
    async fn bundle(&mut self, root: &PathUri, scanned: Scanned, found: &mut DiscoveredRoot) {
        let own = self.first_manifest(root).await;
        let inherited = match &own {
            Some(manifest) => Some(manifest.clone()),
            None => self.ancestor_manifest(root).await,
        };
        let mut seen = Vec::new();
        if let Some(manifest) = inherited {
            seen.extend(plugin_directory(&manifest.path));
            found.namespace_manifests.push(manifest);
        }
        for manifest in scanned.manifests {
            let Some(directory) = plugin_directory(&manifest) else {
                continue;
            };
            if seen.contains(&directory) {
                continue;
            }
            seen.push(directory);
            found.namespace_manifests.extend(self.read(manifest).await);
        }
        if let Some(manifest) = own {
            found.plugin = Some(self.plugin(root, manifest).await);
        }
        for instructions in scanned.skills {
            let metadata = parent(&instructions).and_then(|dir| join(&dir, SKILL_METADATA));
            let Some(instructions) = self.read(instructions).await else {
                continue;
            };
            let metadata = match metadata {
                Some(path) => self.read(path).await,
                None => None,
            };
            found.skills.push(DiscoveredSkill {
                instructions,
                metadata,
            });
        }
    }

    async fn first_manifest(&mut self, directory: &PathUri) -> Option<TextFile> {
        for relative in MANIFESTS {
            let Some(path) = join(directory, relative) else {
                continue;
            };
            if let Some(manifest) = self.read(path).await {
                return Some(manifest);
            }
        }
        None
    }

    /// A root inside a plugin takes its namespace from the nearest enclosing manifest.
    async fn ancestor_manifest(&mut self, root: &PathUri) -> Option<TextFile> {
        let mut ancestor = parent(root);
        while let Some(directory) = ancestor {
            if let Some(manifest) = self.first_manifest(&directory).await {
                return Some(manifest);
            }
            ancestor = parent(&directory);
        }
        None
    }

    /// The root's plugin: its manifest, and the MCP and apps files it names. Inline MCP
    /// servers (an object) mean no MCP file at all, not even the default `.mcp.json`.
    async fn plugin(&mut self, root: &PathUri, manifest: TextFile) -> DiscoveredPlugin {
        let declared: serde_json::Value =
            serde_json::from_str(&manifest.contents).unwrap_or_default();
        let mut declared_path = |field: &str| match declared.get(field) {
            Some(serde_json::Value::String(path)) => match declared_file(root, path) {
                Ok(path) => Some(path),
                Err(why) => {
                    self.warn(format!("ignoring {field} in {}: {why}", manifest.path));
                    None
                }
            },
            _ => None,
        };
        let mcp_path = declared_path("mcpServers");
        let apps_path = declared_path("apps");
        let inline_mcp = declared.get("mcpServers").is_some_and(|v| v.is_object());
        let mcp_path = match (inline_mcp, mcp_path) {
            (true, _) => None,
            (false, Some(path)) => Some(path),
            (false, None) => join(root, DEFAULT_MCP_CONFIG),
        };
        let mcp_config = match mcp_path {
            Some(path) => self.read(path).await,
            None => None,
        };
        let apps_config = match apps_path {
            Some(path) => self.read(path).await,
            None => None,
        };
        DiscoveredPlugin {
            manifest,
            mcp_config,
            apps_config,
        }
    }

    /// The file's text, or nothing: missing files silently, others with a warning.
    async fn read(&mut self, path: PathUri) -> Option<TextFile> {
        let bytes = match &self.route {
            Route::Direct => self.read_direct(&path).await?,
            Route::Confined(_) => self.read_confined(&path).await?,
        };
        let size = bytes.len() as u64;
        if self.bytes + size > MAX_BUNDLE_BYTES {
            self.warn(over_budget());
            return None;
        }
        match String::from_utf8(bytes) {
            Ok(contents) => {
                let cost = json_len(path.as_str()) + json_len(&contents) + FILE_OVERHEAD;
                if !self.budget.spend(cost) {
                    CallBudget::full(&mut self.warnings);
                    return None;
                }
                self.bytes += size;
                Some(TextFile { path, contents })
            }
            Err(err) => {
                let err = err.utf8_error();
                self.warn(format!("capability file {path} is not UTF-8: {err}"));
                None
            }
        }
    }

    /// Sized first, so that an oversized file is never read.
    async fn read_direct(&mut self, path: &PathUri) -> Option<Vec<u8>> {
        let meta = match self.metadata(path).await {
            Ok(meta) if meta.is_file => meta,
            Ok(_) => return None,
            Err(err) if is_not_found(&err) => return None,
            Err(err) => {
                let message = err.message;
                self.warn(format!(
                    "failed to inspect capability file {path}: {message}"
                ));
                return None;
            }
        };
        if meta.size > MAX_FILE_BYTES {
            self.warn(format!(
                "capability file {path} exceeds the {MAX_FILE_BYTES}-byte limit"
            ));
            return None;
        }
        if self.bytes + meta.size > MAX_BUNDLE_BYTES {
            self.warn(over_budget());
            return None;
        }
        // Not read at all when it cannot fit in the reply.
        if !self.budget.fits(meta.size) {
            CallBudget::full(&mut self.warnings);
            return None;
        }
        match self.read_file(path).await {
            Ok(bytes) if bytes.len() as u64 <= MAX_FILE_BYTES => Some(bytes),
            Ok(_) => {
                self.warn(format!("capability file {path} exceeded its read limit"));
                None
            }
            Err(err) => {
                let message = err.message;
                self.warn(format!("failed to read capability file {path}: {message}"));
                None
            }
        }
    }

    /// One bounded read by the confined helper; its failures are not detailed, so that the
    /// client learns nothing of what the sandbox hides.
    async fn read_confined(&mut self, path: &PathUri) -> Option<Vec<u8>> {
        match self.read_file(path).await {
            Ok(bytes) => Some(bytes),
            Err(err) if is_not_found(&err) => None,
            Err(err) if err.message.starts_with(READ_FILE_TOO_LARGE) => {
                self.warn("capability file exceeded its authorized read limit".into());
                None
            }
            Err(_) => {
                self.warn(
                    "capability file could not be read through the authorized sandbox".into(),
                );
                None
            }
        }
    }

    async fn read_file(&self, path: &PathUri) -> Result<Vec<u8>, RpcError> {
        let params = ReadFileParams {
            path: path.clone(),
            follow_symlinks: None,
            max_bytes: Some(MAX_FILE_BYTES),
            sandbox: None,
        };
        let read: ReadFileResult = self.call::<m::FsReadFile, _>(params).await?;
        Ok(read.data_base64.0)
    }
}

/// The length of `text` inside a JSON string: what it adds to the reply (serde_json's escapes).
fn json_len(text: &str) -> u64 {
    let escaped = |byte: &u8| match byte {
        b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
        0..=0x1f => 6,
        _ => 1,
    };
    text.as_bytes().iter().map(escaped).sum()
}

fn over_budget() -> String {
    format!("capability root bundle exceeds the {MAX_BUNDLE_BYTES}-byte limit")
}

fn is_not_found(err: &RpcError) -> bool {
    err.code == exec_server_protocol::rpc::code::NOT_FOUND
}

/// A manifest's `./relative` path below `root`, or why it is ignored.
fn declared_file(root: &PathUri, declared: &str) -> Result<PathUri, &'static str> {
    const BELOW: &str = "path must remain below the capability root";
    let relative = declared
        .strip_prefix("./")
        .ok_or("path must start with `./`")?;
    if relative.is_empty() || relative.split(['/', '\\']).any(|part| part == "..") {
        return Err(BELOW);
    }
    join(root, relative)
        .filter(|path| path.as_str().starts_with(root.as_str()))
        .ok_or(BELOW)
}

/// Its place among [`MANIFESTS`], if `path` is a plugin manifest.
fn manifest_priority(path: &PathUri) -> Option<usize> {
    let directory = basename(&parent(path)?)?.to_owned();
    if basename(path) != Some("plugin.json") {
        return None;
    }
    MANIFESTS
        .iter()
        .position(|manifest| manifest.strip_suffix("/plugin.json") == Some(directory.as_str()))
}

/// The plugin directory a manifest belongs to (`<dir>/.codex-plugin/plugin.json`).
fn plugin_directory(manifest: &PathUri) -> Option<PathUri> {
    parent(&parent(manifest)?)
}

fn basename(path: &PathUri) -> Option<&str> {
    path.as_str()
        .rsplit('/')
        .next()
        .filter(|name| !name.is_empty())
}

fn parent(path: &PathUri) -> Option<PathUri> {
    let host = path.to_path().ok()?;
    PathUri::from_path(host.parent()?).ok()
}

fn join(directory: &PathUri, relative: &str) -> Option<PathUri> {
    PathUri::from_path(&directory.to_path().ok()?.join(relative)).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn json_len_is_the_length_serde_json_writes() {
        let every_byte: String = (0..128u8).map(char::from).collect();
        for text in [
            "",
            "plain",
            "a \"quoted\" \\ path\n",
            "\u{7f}é\u{1}",
            &every_byte,
        ] {
            let written = serde_json::to_string(text).unwrap().len() as u64 - 2;
            assert_eq!(super::json_len(text), written, "{text:?}");
        }
    }
}
