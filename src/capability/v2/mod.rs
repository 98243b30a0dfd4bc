//! `capabilities/discoverV2`: the executor's installed plugins and standalone skills, found
//! where codex's exec-server looks ([`locations`]), each location read as one
//! `capabilityRoots/discoverV1` root (the same scan, limits and sandboxed reads) and then
//! described: skills from their front matter and `agents/openai.yaml` ([`skill`]), named within
//! their plugin's namespace. Nothing is cached: every call reads the files as they are.
//!
//! The reply says that something was left out, never what: one generic warning per location
//! that lost something, as codex does.

mod locations;
mod skill;

use super::{discover_root, is_not_found, parent, plugin_directory, CallBudget, Reader};
use crate::fs::run_routed;
use crate::fs::sandbox::{route, Route};
use crate::rpc::RpcError;
use exec_server_protocol::capability::{
    CapabilityRoot, DiscoverV2Params, DiscoverV2Result, DiscoveredRoot, DiscoveredSkill,
    DiscoveryRoot, ExecutorPlugin, ExecutorSkill, TextFile,
};
use exec_server_protocol::fs::GetMetadataParams;
use exec_server_protocol::methods as m;
use exec_server_protocol::rpc::code;
use exec_server_protocol::sandbox::FileSystemSandboxContext;
use exec_server_protocol::PathUri;
use futures::StreamExt as _;
use locations::{Kind, Location};
use serde_json::Value;

const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;
const MAX_CAPABILITIES: usize = 2_048;
const MAX_WARNINGS: usize = 64;
/// A namespace, `:` and a skill name.
const MAX_QUALIFIED_NAME_CHARS: usize = 64 * 2 + 1;
const LOCATIONS_INCOMPLETE: &str =
    "some capability locations could not be resolved; discovery may be incomplete";
const METADATA_INCOMPLETE: &str =
    "some capability metadata could not be loaded; discovery may be incomplete";
const SIZE_LIMIT: &str = "capability discovery size limit reached";

pub(crate) async fn discover(params: DiscoverV2Params) -> Result<DiscoverV2Result, RpcError> {
    refuse_unenforceable(&params).await?;
    let codex_home = crate::environment_config::codex_home().ok();
    let user_home = std::env::home_dir().filter(|home| home.is_absolute());
    let resolve = move || locations::resolve(codex_home.as_deref(), user_home.as_deref());
    let resolved = tokio::task::spawn_blocking(resolve)
        .await
        .map_err(|err| RpcError::internal(format!("capability locations: {err}")))?;
    let found = resolved.map_err(|err| RpcError::internal(err.to_string()))?;
    let mut reply = DiscoverV2Result::default();
    if !found.warnings.is_empty() {
        reply.warnings.push(LOCATIONS_INCOMPLETE.into());
    }
    let count = found.locations.len();
    let sandbox = &params.sandbox;
    let mut loads = futures::stream::iter(found.locations)
        .map(|location| load(location, sandbox.clone()))
        .buffered(super::CONCURRENT_ROOTS)
        .enumerate();
    let mut budget = Budget::default();
    while let Some((index, found)) = loads.next().await {
        if found.incomplete && reply.warnings.len() < MAX_WARNINGS {
            reply.warnings.push(METADATA_INCOMPLETE.into());
        }
        budget.admit(&mut reply, found.content);
        let full = budget.capabilities == MAX_CAPABILITIES || budget.bytes == MAX_RESPONSE_BYTES;
        if full && index + 1 < count {
            budget.truncated = true;
            break;
        }
    }
    Ok(finish(reply, budget.truncated))
}

/// A sandbox this daemon cannot enforce (an unknown special path, say) is refused before
/// anything is read, as the fs methods refuse it: -32602. codex refuses it when decoding.
async fn refuse_unenforceable(params: &DiscoverV2Params) -> Result<(), RpcError> {
    let route = route(params.sandbox.clone()).map_err(RpcError::from)?;
    if matches!(route, Route::Direct) {
        return Ok(());
    }
    let probe = GetMetadataParams {
        path: params.cwd.clone(),
        follow_symlinks: None,
        sandbox: None,
    };
    match run_routed::<m::FsGetMetadata>(&route, probe)
        .await
        .map_err(RpcError::from)
    {
        Err(err) if err.code == code::INVALID_PARAMS => Err(err),
        _ => Ok(()),
    }
}

/// One location's part of the reply, and whether it lost something.
struct Found {
    content: Content,
    incomplete: bool,
}

enum Content {
    Plugin(Box<ExecutorPlugin>),
    Skills(Vec<ExecutorSkill>),
}

impl Found {
    fn nothing(incomplete: bool) -> Self {
        let content = Content::Skills(Vec::new());
        Self {
            content,
            incomplete,
        }
    }
}

/// Reads the location as a discoverV1 root under `sandbox`: one that is missing, not a
/// directory, or hidden by the sandbox is simply not there.
async fn load(location: Location, sandbox: Option<FileSystemSandboxContext>) -> Found {
    let (Ok(root), Ok(route)) = (PathUri::from_path(&location.root), route(sandbox.clone())) else {
        return Found::nothing(true);
    };
    let budget = CallBudget::default();
    let reader = Reader {
        route,
        bytes: 0,
        budget: &budget,
        warnings: Vec::new(),
    };
    match reader.metadata(&root).await {
        Ok(meta) if meta.is_directory => {}
        Ok(_) => return Found::nothing(false),
        Err(err) if is_not_found(&err) || is_denied(&err) => return Found::nothing(false),
        Err(_) => return Found::nothing(true),
    }
    let id = String::new();
    let discovered = discover_root(
        CapabilityRoot {
            id,
            path: root,
            sandbox,
        },
        &budget,
    )
    .await;
    describe(location, discovered)
}

/// EACCES or EPERM: what a sandbox that hides the location answers.
fn is_denied(err: &RpcError) -> bool {
    let errno = (err.data.as_ref())
        .and_then(|data| data.get("errno"))
        .and_then(Value::as_i64);
    matches!(errno, Some(errno) if errno == i64::from(libc::EACCES) || errno == i64::from(libc::EPERM))
        || err.message.contains("Permission denied")
}

fn describe(location: Location, discovered: DiscoveredRoot) -> Found {
    let mut incomplete = !discovered.warnings.is_empty() || discovered.error.is_some();
    let namespaces = namespaces(&discovered.namespace_manifests);
    let mut skills = Vec::new();
    for found in discovered.skills {
        match describe_skill(found, &namespaces) {
            Ok(skill) => skills.push(skill),
            Err(_) => incomplete = true,
        }
    }
    let content = match location.kind {
        Kind::Skills(id) => {
            let discovery_root =
                PathUri::from_path(&location.root)
                    .ok()
                    .map(|path| DiscoveryRoot {
                        id: id.into(),
                        path,
                    });
            for skill in &mut skills {
                skill.discovery_root = discovery_root.clone();
            }
            Content::Skills(skills)
        }
        Kind::Plugin(installed) => {
            // An installed plugin without a readable manifest is not one.
            let Some(files) = discovered.plugin else {
                return Found::nothing(true);
            };
            let Ok(manifest) = serde_json::from_str::<Value>(&files.manifest.contents) else {
                return Found::nothing(true);
            };
            let root = discovered.path;
            let display_name = (manifest.pointer("/interface/displayName"))
                .and_then(Value::as_str)
                .filter(|name| !name.trim().is_empty())
                .map(str::to_owned)
                .or_else(|| namespace_of(&namespaces, &root).map(str::to_owned))
                .unwrap_or_else(|| directory_name(&root).unwrap_or_default());
            Content::Plugin(Box::new(ExecutorPlugin {
                id: installed.id,
                display_name,
                remote_plugin_id: installed.remote_plugin_id,
                version: installed.version,
                root,
                files,
                skills,
            }))
        }
    };
    Found {
        content,
        incomplete,
    }
}

/// Each plugin directory's namespace, first manifest first: its `name`, else the directory's.
fn namespaces(manifests: &[TextFile]) -> Vec<(PathUri, String)> {
    let mut found: Vec<(PathUri, String)> = Vec::new();
    for manifest in manifests {
        let Some(directory) = plugin_directory(&manifest.path) else {
            continue;
        };
        let Ok(parsed) = serde_json::from_str::<Value>(&manifest.contents) else {
            continue;
        };
        let name = match parsed.get("name") {
            None | Some(Value::Null) => "",
            Some(Value::String(name)) => name,
            Some(_) => continue,
        };
        let name = match name.trim().is_empty() {
            true => match directory_name(&directory) {
                Some(name) => name,
                None => continue,
            },
            false => name.to_owned(),
        };
        if !found.iter().any(|(seen, _)| seen == &directory) {
            found.push((directory, name));
        }
    }
    found
}

fn namespace_of<'a>(namespaces: &'a [(PathUri, String)], directory: &PathUri) -> Option<&'a str> {
    let found = namespaces.iter().find(|(seen, _)| seen == directory);
    found.map(|(_, name)| name.as_str())
}

/// The last component of `path`, decoded.
fn directory_name(path: &PathUri) -> Option<String> {
    let host = path.to_path().ok()?;
    Some(host.file_name()?.to_str()?.to_owned())
}

/// The skill as described, named within the nearest enclosing plugin's namespace. Err: why it
/// is left out.
fn describe_skill(
    found: DiscoveredSkill,
    namespaces: &[(PathUri, String)],
) -> Result<ExecutorSkill, String> {
    let path = found.instructions.path;
    let directory = parent(&path);
    let directory_name = directory.as_ref().and_then(directory_name);
    let front = skill::frontmatter(&found.instructions.contents, directory_name.as_deref())?;
    let mut name = front.name;
    let mut ancestor = directory;
    while let Some(directory) = ancestor {
        if let Some(namespace) = namespace_of(namespaces, &directory) {
            name = format!("{namespace}:{name}");
            if name.chars().count() > MAX_QUALIFIED_NAME_CHARS {
                return Err(format!(
                    "qualified name exceeds {MAX_QUALIFIED_NAME_CHARS} characters"
                ));
            }
            break;
        }
        ancestor = parent(&directory);
    }
    let (dependencies, policy) = match found.metadata {
        Some(metadata) => skill::metadata(&metadata.contents),
        None => (None, None),
    };
    Ok(ExecutorSkill {
        name,
        description: front.description,
        short_description: front.short_description,
        path,
        discovery_root: None,
        dependencies,
        policy,
    })
}

/// What the reply has taken so far: capabilities (a plugin and each of its skills count) and
/// their bytes as JSON.
#[derive(Default)]
struct Budget {
    capabilities: usize,
    bytes: usize,
    truncated: bool,
}

impl Budget {
    fn take(&mut self, capabilities: usize, bytes: usize) -> bool {
        if self.capabilities + capabilities > MAX_CAPABILITIES
            || self.bytes + bytes > MAX_RESPONSE_BYTES
        {
            self.truncated = true;
            return false;
        }
        self.capabilities += capabilities;
        self.bytes += bytes;
        true
    }

    /// Adds what fits of `content` to `reply`.
    fn admit(&mut self, reply: &mut DiscoverV2Result, content: Content) {
        match content {
            Content::Plugin(mut plugin) => {
                let room = MAX_CAPABILITIES - self.capabilities;
                if room == 0 {
                    self.truncated = true;
                    return;
                }
                // The plugin itself counts too.
                self.truncated |= plugin.skills.len() > room - 1;
                plugin.skills.truncate(room - 1);
                if self.take(1 + plugin.skills.len(), json_len(&plugin)) {
                    reply.plugins.push(*plugin);
                }
            }
            Content::Skills(skills) => {
                for skill in skills {
                    if self.capabilities == MAX_CAPABILITIES {
                        self.truncated = true;
                        return;
                    }
                    if self.take(1, json_len(&skill)) {
                        reply.skills.push(skill);
                    }
                }
            }
        }
    }
}

fn json_len(value: &impl serde::Serialize) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |json| json.len())
}

/// Plugins by id, the warnings bounded, and the whole within [`MAX_RESPONSE_BYTES`]: what did
/// not fit is dropped from the end, with [`SIZE_LIMIT`] first among the warnings.
fn finish(mut reply: DiscoverV2Result, truncated: bool) -> DiscoverV2Result {
    reply
        .plugins
        .sort_by(|a, b| (a.id.cmp(&b.id)).then_with(|| a.root.as_str().cmp(b.root.as_str())));
    reply.warnings.truncate(MAX_WARNINGS);
    if truncated || json_len(&reply) > MAX_RESPONSE_BYTES {
        reply.warnings.truncate(MAX_WARNINGS - 1);
        reply.warnings.insert(0, SIZE_LIMIT.into());
        while json_len(&reply) > MAX_RESPONSE_BYTES {
            if reply.warnings.len() > 1 {
                reply.warnings.truncate(1);
            } else if reply.skills.pop().is_none() && reply.plugins.pop().is_none() {
                break;
            }
        }
    }
    reply
}
