//! `run --sandbox/--writable/--network`: the permission profile of `process/start`, built from
//! two named presets (as codex's `read-only` and `workspace-write`) or read from a JSON file.

use anyhow::Context as _;
use exec_server_client::path_uri;
use exec_server_client::protocol::sandbox::{
    FileSystemEntry, FileSystemPermissions, FileSystemSandboxContext, FsAccess, FsPath,
    NetworkAccess, PermissionProfile, SpecialKind, SpecialPath, WindowsSandboxLevel,
};
use exec_server_client::protocol::PathUri;
use std::path::PathBuf;

/// `--sandbox`.
#[derive(Clone, Debug)]
pub(crate) enum Sandbox {
    /// Read everything, write nothing (but `--writable` directories).
    ReadOnly,
    /// Read everything, write the working directory, /tmp and `--writable` directories.
    WorkspaceWrite,
    /// A `FileSystemSandboxContext` (or just its `permissions`) as JSON, as the protocol has it.
    Profile(PathBuf),
}

pub(super) fn parse_sandbox(text: &str) -> Result<Sandbox, String> {
    Ok(match text {
        "read-only" => Sandbox::ReadOnly,
        "workspace-write" => Sandbox::WorkspaceWrite,
        path if path.ends_with(".json") || std::path::Path::new(path).is_file() => {
            Sandbox::Profile(PathBuf::from(path))
        }
        other => {
            return Err(format!(
                "`{other}` is neither read-only, workspace-write nor a PROFILE.json file"
            ))
        }
    })
}

/// `--network`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Network {
    On,
    Off,
}

/// The `sandbox` of `process/start` for these flags, anchored at `cwd`; None runs unsandboxed.
/// A sandbox has the network off unless `--network on`; `--network off` alone confines only
/// the network.
pub(super) fn context(
    sandbox: Option<&Sandbox>,
    writable: &[String],
    network: Option<Network>,
    cwd: &PathUri,
) -> anyhow::Result<Option<FileSystemSandboxContext>> {
    let access = match network {
        Some(Network::On) => NetworkAccess::Enabled,
        _ => NetworkAccess::Restricted,
    };
    let extra = writable
        .iter()
        .map(|dir| {
            Ok(entry(
                FsPath::Path {
                    path: path_uri(dir)?,
                },
                FsAccess::Write,
            ))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut entries = vec![special(SpecialKind::Root, FsAccess::Read)];
    let file_system = match sandbox {
        None if !extra.is_empty() => anyhow::bail!("--writable needs --sandbox"),
        None if network == Some(Network::Off) => FileSystemPermissions::Unrestricted,
        None => return Ok(None),
        Some(Sandbox::Profile(path)) => return profile(path, extra, network, cwd).map(Some),
        Some(Sandbox::ReadOnly) => restricted(entries, extra),
        Some(Sandbox::WorkspaceWrite) => {
            entries.push(special(SpecialKind::ProjectRoots, FsAccess::Write));
            entries.push(special(SpecialKind::SlashTmp, FsAccess::Write));
            restricted(entries, extra)
        }
    };
    let permissions = PermissionProfile::Managed {
        file_system,
        network: access,
    };
    Ok(Some(anchored(permissions, cwd)))
}

fn profile(
    path: &std::path::Path,
    extra: Vec<FileSystemEntry>,
    network: Option<Network>,
    cwd: &PathUri,
) -> anyhow::Result<FileSystemSandboxContext> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the profile {}", path.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let bad = |err| anyhow::anyhow!("{} is not a sandbox profile: {err}", path.display());
    let mut context = if value.get("permissions").is_some() {
        serde_json::from_value::<FileSystemSandboxContext>(value).map_err(bad)?
    } else {
        anchored(serde_json::from_value(value).map_err(bad)?, cwd)
    };
    if let PermissionProfile::Managed {
        file_system,
        network: access,
    } = &mut context.permissions
    {
        if let FileSystemPermissions::Restricted { entries, .. } = file_system {
            entries.extend(extra);
        } else if !extra.is_empty() {
            anyhow::bail!("--writable needs a profile whose file system is restricted");
        }
        match network {
            Some(Network::On) => *access = NetworkAccess::Enabled,
            Some(Network::Off) => *access = NetworkAccess::Restricted,
            None => {}
        }
    } else if !extra.is_empty() || network.is_some() {
        anyhow::bail!("--writable and --network need a managed profile");
    }
    Ok(context)
}

/// The policy's cwd and its one workspace root are the run's cwd (roots are never implied).
fn anchored(permissions: PermissionProfile, cwd: &PathUri) -> FileSystemSandboxContext {
    FileSystemSandboxContext {
        permissions,
        cwd: Some(cwd.clone()),
        workspace_roots: vec![cwd.clone()],
        policy_context: None,
        windows_sandbox_level: WindowsSandboxLevel::Disabled,
        windows_sandbox_private_desktop: false,
        use_legacy_landlock: false,
        user_home_dir: None,
        temporary_directories: Vec::new(),
        windows_sandbox_proxy_settings_mode: None,
    }
}

fn restricted(
    mut entries: Vec<FileSystemEntry>,
    extra: Vec<FileSystemEntry>,
) -> FileSystemPermissions {
    entries.extend(extra);
    FileSystemPermissions::Restricted {
        entries,
        glob_scan_max_depth: None,
    }
}

fn special(kind: SpecialKind, access: FsAccess) -> FileSystemEntry {
    let path = FsPath::Special {
        value: SpecialPath {
            kind,
            subpath: None,
        },
    };
    entry(path, access)
}

fn entry(path: FsPath, access: FsAccess) -> FileSystemEntry {
    FileSystemEntry {
        path,
        access,
        missing_path_behavior: None,
    }
}
