//! Portable permission intent: what a process or fs call may touch, as `file:` URIs and symbolic
//! entries. The daemon binds it to its own host and enforces it. Inner keys are snake_case, as in
//! the reference; the context object itself is camelCase.

use crate::PathUri;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileSystemSandboxContext {
    pub permissions: PermissionProfile,
    /// The policy's anchor directory; defaults to the request's cwd. Older clients' field:
    /// `policyContext.cwd` wins when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathUri>,
    /// What `project_roots` entries expand to; empty or absent grants nothing through them
    /// (clients send `[cwd]` when they mean it). Ignored when `policyContext` is present.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workspace_roots: Vec<PathUri>,
    /// Newer clients' source of the policy's cwd and roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_context: Option<PolicyContext>,
    #[serde(default)]
    pub windows_sandbox_level: WindowsSandboxLevel,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub windows_sandbox_private_desktop: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub use_legacy_landlock: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_home_dir: Option<PathUri>,
    /// What `tmpdir` entries expand to; defaults to the daemon's own TMPDIR.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub temporary_directories: Vec<PathUri>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows_sandbox_proxy_settings_mode: Option<String>,
}

/// Where the policy is anchored, as newer clients send it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyContext {
    /// Falls back to the flat `cwd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathUri>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workspace_roots: Vec<PathUri>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WindowsSandboxLevel {
    #[default]
    Disabled,
    RestrictedToken,
    Elevated,
    Mxc,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PermissionProfile {
    /// No sandbox.
    Disabled,
    /// The caller isolates the process itself.
    External { network: NetworkAccess },
    Managed {
        file_system: FileSystemPermissions,
        network: NetworkAccess,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NetworkAccess {
    Restricted,
    Enabled,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FileSystemPermissions {
    Unrestricted,
    Restricted {
        entries: Vec<FileSystemEntry>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        glob_scan_max_depth: Option<u32>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FileSystemEntry {
    pub path: FsPath,
    pub access: FsAccess,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_path_behavior: Option<MissingPathBehavior>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FsAccess {
    Read,
    Write,
    #[serde(alias = "none")]
    Deny,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MissingPathBehavior {
    /// A path that does not exist is left out of the policy.
    Skip,
    /// A path that does not exist fails the request.
    Error,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FsPath {
    Path { path: PathUri },
    GlobPattern { pattern: String },
    Special { value: SpecialPath },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SpecialPath {
    pub kind: SpecialKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subpath: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SpecialKind {
    Root,
    Minimal,
    #[serde(alias = "current_working_directory")]
    ProjectRoots,
    Tmpdir,
    SlashTmp,
    /// A kind this daemon does not know; kept so the request can fail closed with a clear error.
    #[serde(other)]
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedNetwork {
    pub loopback_ports: Vec<u16>,
    pub allow_local_binding: bool,
}

impl FileSystemSandboxContext {
    /// The policy's cwd: `policyContext.cwd`, else the flat `cwd`.
    pub fn policy_cwd(&self) -> Option<&PathUri> {
        self.policy_context
            .as_ref()
            .and_then(|context| context.cwd.as_ref())
            .or(self.cwd.as_ref())
    }

    /// What `project_roots` entries expand to, as sent: `policyContext`'s when present, else
    /// the flat list. Never defaulted to the cwd.
    pub fn policy_workspace_roots(&self) -> &[PathUri] {
        match &self.policy_context {
            Some(context) => &context.workspace_roots,
            None => &self.workspace_roots,
        }
    }

    /// Whether the intent restricts anything this daemon must enforce: a managed profile with
    /// network off, or a restricted file system that is not plain full-disk write. Full-disk
    /// write means a `root` write entry with no entry that narrows it (a `read` or `deny`
    /// elsewhere still restricts, so such a profile is never run unsandboxed). When this is
    /// false the request runs unsandboxed, as in the reference's `should_run_in_sandbox`.
    pub fn restricts(&self) -> bool {
        match &self.permissions {
            PermissionProfile::Disabled | PermissionProfile::External { .. } => false,
            PermissionProfile::Managed {
                file_system,
                network,
            } => file_system.restricts() || *network == NetworkAccess::Restricted,
        }
    }
}

impl FileSystemPermissions {
    /// False for `unrestricted` and for a plain full-disk write grant.
    pub fn restricts(&self) -> bool {
        match self {
            FileSystemPermissions::Unrestricted => false,
            FileSystemPermissions::Restricted { entries, .. } => {
                let root_write = entries.iter().any(|entry| {
                    entry.access == FsAccess::Write
                        && matches!(&entry.path, FsPath::Special { value } if value.kind == SpecialKind::Root && value.subpath.is_none())
                });
                !root_write || entries.iter().any(|entry| entry.access != FsAccess::Write)
            }
        }
    }
}
