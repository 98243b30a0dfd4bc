//! Decoding and materialization of the permission intent into canonical host rules.
//!
//! Every entry becomes zero or more [`Rule`]s on canonical paths (no symbolic link, no `.` or
//! `..`, resolved by the kernel with `realpath`):
//! * `path`: the URI's host path.
//! * `special` `root`: `/`; `minimal`: [`MINIMAL`]; `project_roots` (alias
//!   `current_working_directory`): each workspace root, joined with `subpath`; `tmpdir`:
//!   `temporaryDirectories`, else the daemon's `TMPDIR` (neither: the entry names no path);
//!   `slash_tmp`: `/tmp`. A `subpath` must be relative without `..`. Unknown kinds fail.
//! * `glob_pattern`: the existing matches (see `glob.rs`), per workspace root when relative.
//!
//! Workspace roots and the working directory are anchors, resolved strictly by
//! `super::anchor`: a symbolic link on the way is refused unless it is a system link.
//!
//! A path that does not exist is left out only with `missing_path_behavior: skip` (the members
//! of `minimal` are always optional); otherwise the request fails. A symbolic link is resolved
//! and the rule applies to its target, which is then checked like any path: a `project_roots`
//! or relative-glob path must still lie inside its workspace root after resolution, and write
//! targets go through the daemon-state guard. Among rules on the same path, deny beats write
//! and write beats read; otherwise the deepest rule covering a path decides.
//!
//! Each way an intent cannot be bound is a [`PolicyError`].

use super::anchor::{anchor, AnchorError, Anchored};
use super::glob::{self, GlobError};
use exec_server_protocol::path_uri::PathUriError;
use exec_server_protocol::sandbox::{
    FileSystemEntry, FileSystemPermissions, FileSystemSandboxContext, FsAccess, FsPath,
    MissingPathBehavior, NetworkAccess, PermissionProfile, SpecialKind,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// The platform read set of `minimal`: what dynamically linked programs, shells and common
/// interpreters need to start, and nothing user-specific.
pub(super) const MINIMAL: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/resolv.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/terminfo",
    "/proc",
    "/sys/devices/system/cpu",
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rule {
    pub path: PathBuf,
    pub access: FsAccess,
}

/// The intent bound to this host.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Policy {
    /// Canonical rules; None when the file system is not restricted.
    pub rules: Option<Vec<Rule>>,
    pub network: NetworkAccess,
    /// The process's working directory: canonical (see `super::anchor`) when the file system is
    /// restricted, as requested otherwise.
    pub cwd: PathBuf,
}

/// Why an intent cannot be bound to this host. Every one is the request's fault (-32602).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PolicyError {
    /// A workspace root or the working directory cannot anchor the sandbox.
    #[error(transparent)]
    Anchor(#[from] AnchorError),
    #[error("invalid sandbox permission path URI: {what}: {source}")]
    Uri {
        what: &'static str,
        source: PathUriError,
    },
    #[error("{what} `{}` must not contain `..`", path.display())]
    ParentDir { what: &'static str, path: PathBuf },
    #[error("sandbox subpath `{0}` must be relative and must not contain `..`")]
    Subpath(String),
    #[error(
        "sandbox entry has a special path kind this executor does not support; refusing to run \
         with a partial policy"
    )]
    UnknownKind,
    #[error("sandbox entry: {0}")]
    Glob(#[from] GlobError),
    #[error(
        "sandbox path `{}` does not exist (set missing_path_behavior to `skip` to allow that)",
        path.display()
    )]
    Missing { path: PathBuf },
    #[error("sandbox path `{}` cannot be resolved: {source}", path.display())]
    Unresolvable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "sandbox path `{}` resolves to `{}`, outside its workspace root `{}`",
        path.display(),
        resolved.display(),
        root.display()
    )]
    OutsideRoot {
        path: PathBuf,
        resolved: PathBuf,
        root: PathBuf,
    },
}

/// Whether `sandbox` grants writes anywhere: only write roots are searched for hard links to the
/// daemon's own files (`super::guard`).
pub(super) fn grants_writes(sandbox: &FileSystemSandboxContext) -> bool {
    matches!(
        &sandbox.permissions,
        PermissionProfile::Managed {
            file_system: FileSystemPermissions::Restricted { entries, .. },
            ..
        } if entries.iter().any(|entry| entry.access == FsAccess::Write)
    )
}

/// Whether resolving `sandbox` expands glob patterns.
pub(super) fn expands_globs(sandbox: &FileSystemSandboxContext) -> bool {
    matches!(
        &sandbox.permissions,
        PermissionProfile::Managed {
            file_system: FileSystemPermissions::Restricted { entries, .. },
            ..
        } if entries
            .iter()
            .any(|entry| matches!(entry.path, FsPath::GlobPattern { .. }))
    )
}

/// None when the intent needs no enforcement (disabled, external, or unrestricted with network
/// on); the process then runs unsandboxed.
pub(super) fn resolve(
    sandbox: &FileSystemSandboxContext,
    request_cwd: &Path,
) -> Result<Option<Policy>, PolicyError> {
    let (file_system, network) = match &sandbox.permissions {
        PermissionProfile::Disabled | PermissionProfile::External { .. } => return Ok(None),
        PermissionProfile::Managed {
            file_system,
            network,
        } => (file_system, *network),
    };
    if !file_system.restricts() {
        return Ok((network == NetworkAccess::Restricted).then_some(Policy {
            rules: None,
            network,
            cwd: request_cwd.to_path_buf(),
        }));
    }
    let FileSystemPermissions::Restricted {
        entries,
        glob_scan_max_depth,
    } = file_system
    else {
        unreachable!("an unrestricted file system does not restrict");
    };
    let context = Context::new(sandbox)?;
    let cwd = anchor(request_cwd, "cwd")?;
    let depth = glob_scan_max_depth
        .unwrap_or(glob::DEFAULT_MAX_DEPTH)
        .max(1);
    let mut merged: BTreeMap<PathBuf, FsAccess> = BTreeMap::new();
    for entry in entries {
        for path in context.materialize(entry, depth)? {
            let access = merged.entry(path).or_insert(entry.access);
            *access = strongest(*access, entry.access);
        }
    }
    let rules: Vec<Rule> = merged
        .into_iter()
        .map(|(path, access)| Rule { path, access })
        .collect();

    // A system link this very intent makes writable could be replaced while it runs.
    for anchored in context.anchors.iter().chain(std::iter::once(&cwd)) {
        if let Some(link) = anchored
            .links
            .iter()
            .find(|link| effective(&rules, link) == Some(FsAccess::Write))
        {
            return Err(AnchorError::WritableLink {
                what: anchored.what,
                path: anchored.requested.clone(),
                link: link.clone(),
            }
            .into());
        }
    }
    Ok(Some(Policy {
        rules: Some(rules),
        network,
        cwd: cwd.canonical,
    }))
}

fn strongest(a: FsAccess, b: FsAccess) -> FsAccess {
    let rank = |access| match access {
        FsAccess::Read => 0,
        FsAccess::Write => 1,
        FsAccess::Deny => 2,
    };
    if rank(a) >= rank(b) {
        a
    } else {
        b
    }
}

/// The access the deepest rule covering `path` gives (None: no rule covers it).
pub(super) fn effective(rules: &[Rule], path: &Path) -> Option<FsAccess> {
    rules
        .iter()
        .filter(|rule| path.starts_with(&rule.path))
        .max_by_key(|rule| rule.path.components().count())
        .map(|rule| rule.access)
}

struct Context {
    workspace_roots: Vec<PathBuf>,
    anchors: Vec<Anchored>,
    temporary_directories: Vec<PathBuf>,
}

/// A host path to resolve, and the directory it must stay inside after resolution.
struct Candidate {
    path: PathBuf,
    anchor: Option<PathBuf>,
}

impl Context {
    fn new(sandbox: &FileSystemSandboxContext) -> Result<Self, PolicyError> {
        // Only a bad URI matters here: roots are never defaulted to the cwd.
        if let Some(uri) = sandbox.policy_cwd() {
            host_path(uri, "sandbox cwd")?;
        }
        let anchors: Vec<Anchored> = sandbox
            .policy_workspace_roots()
            .iter()
            .map(|uri| {
                Ok(anchor(
                    &host_path(uri, "workspace root")?,
                    "workspace root",
                )?)
            })
            .collect::<Result<_, PolicyError>>()?;
        let workspace_roots = anchors
            .iter()
            .map(|anchored| anchored.canonical.clone())
            .collect();
        let temporary_directories = if sandbox.temporary_directories.is_empty() {
            std::env::var_os("TMPDIR")
                .filter(|dir| Path::new(dir).is_absolute())
                .map(PathBuf::from)
                .into_iter()
                .collect()
        } else {
            sandbox
                .temporary_directories
                .iter()
                .map(|uri| host_path(uri, "temporary directory"))
                .collect::<Result<_, _>>()?
        };
        Ok(Self {
            workspace_roots,
            anchors,
            temporary_directories,
        })
    }

    fn materialize(
        &self,
        entry: &FileSystemEntry,
        depth: u32,
    ) -> Result<Vec<PathBuf>, PolicyError> {
        let skip_missing = entry.missing_path_behavior == Some(MissingPathBehavior::Skip);
        let (candidates, optional) = match &entry.path {
            FsPath::Path { path } => (vec![plain(host_path(path, "sandbox path")?)], false),
            FsPath::GlobPattern { pattern } => return self.expand_glob(pattern, depth),
            FsPath::Special { value } => {
                let subpath = value.subpath.as_deref().map(checked_subpath).transpose()?;
                let join = |base: &Path| match &subpath {
                    Some(sub) => base.join(sub),
                    None => base.to_path_buf(),
                };
                match value.kind {
                    SpecialKind::Root => (vec![plain(join(Path::new("/")))], false),
                    SpecialKind::Minimal => (
                        MINIMAL
                            .iter()
                            .map(|path| plain(join(Path::new(path))))
                            .collect(),
                        true,
                    ),
                    SpecialKind::ProjectRoots => (
                        self.workspace_roots
                            .iter()
                            .map(|root| Candidate {
                                path: join(root),
                                anchor: Some(root.clone()),
                            })
                            .collect(),
                        false,
                    ),
                    // With no temporary directory known the entry names no path, whatever its
                    // access: a grant of nothing and a deny of nothing (codex's server does
                    // the same).
                    SpecialKind::Tmpdir => (
                        self.temporary_directories
                            .iter()
                            .map(|dir| plain(join(dir)))
                            .collect(),
                        false,
                    ),
                    SpecialKind::SlashTmp => (vec![plain(join(Path::new("/tmp")))], false),
                    SpecialKind::Unknown => return Err(PolicyError::UnknownKind),
                }
            }
        };
        let mut paths = Vec::new();
        for candidate in candidates {
            if let Some(path) = resolve_candidate(&candidate, skip_missing || optional)? {
                paths.push(path);
            }
        }
        Ok(paths)
    }

    fn expand_glob(&self, pattern: &str, depth: u32) -> Result<Vec<PathBuf>, PolicyError> {
        let bases: Vec<Option<&PathBuf>> = if Path::new(pattern).is_absolute() {
            vec![None]
        } else {
            self.workspace_roots.iter().map(Some).collect()
        };
        let mut paths = Vec::new();
        for base in bases {
            let matches = glob::expand(pattern, base.map_or(Path::new("/"), |b| b), depth)?;
            for path in matches {
                let candidate = Candidate {
                    path,
                    anchor: base.cloned(),
                };
                // A match vanishing between the scan and the resolution is simply not there.
                if let Some(path) = resolve_candidate(&candidate, true)? {
                    paths.push(path);
                }
            }
        }
        Ok(paths)
    }
}

fn plain(path: PathBuf) -> Candidate {
    Candidate { path, anchor: None }
}

fn host_path(
    uri: &exec_server_protocol::PathUri,
    what: &'static str,
) -> Result<PathBuf, PolicyError> {
    let path = uri
        .to_path()
        .map_err(|source| PolicyError::Uri { what, source })?;
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(PolicyError::ParentDir { what, path });
    }
    Ok(path)
}

fn checked_subpath(subpath: &str) -> Result<PathBuf, PolicyError> {
    let path = Path::new(subpath);
    if path.is_absolute()
        || path
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(PolicyError::Subpath(subpath.to_owned()));
    }
    Ok(path.to_path_buf())
}

/// Canonicalizes a candidate; Ok(None) when it is missing and may be skipped.
fn resolve_candidate(
    candidate: &Candidate,
    skip_missing: bool,
) -> Result<Option<PathBuf>, PolicyError> {
    let raw = &candidate.path;
    let canonical = match std::fs::canonicalize(raw) {
        Ok(path) => path,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound && skip_missing => return Ok(None),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(PolicyError::Missing { path: raw.clone() })
        }
        Err(source) => {
            return Err(PolicyError::Unresolvable {
                path: raw.clone(),
                source,
            })
        }
    };
    if let Some(anchor) = &candidate.anchor {
        if !canonical.starts_with(anchor) {
            return Err(PolicyError::OutsideRoot {
                path: raw.clone(),
                resolved: canonical,
                root: anchor.clone(),
            });
        }
    }
    Ok(Some(canonical))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn context(value: serde_json::Value) -> FileSystemSandboxContext {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn project_roots_materialize_per_workspace_root_and_symlinks_must_stay_inside() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), a.path().join("link")).unwrap();
        std::fs::create_dir(b.path().join("sub")).unwrap();
        let uri = |p: &Path| format!("file://{}", p.display());
        let sandbox = |subpath: &str| {
            context(json!({
                "permissions": {"type": "managed", "network": "enabled", "file_system": {
                    "type": "restricted", "entries": [
                        {"path": {"type": "special", "value": {"kind": "project_roots", "subpath": subpath}}, "access": "write", "missing_path_behavior": "skip"}
                    ]}},
                "workspaceRoots": [uri(a.path()), uri(b.path())],
            }))
        };
        let policy = resolve(&sandbox("sub"), Path::new("/")).unwrap().unwrap();
        let rules = policy.rules.unwrap();
        assert_eq!(rules.len(), 1, "the missing a/sub is skipped");
        assert_eq!(rules[0].path, b.path().canonicalize().unwrap().join("sub"));
        let err = resolve(&sandbox("link"), Path::new("/")).unwrap_err();
        assert!(
            err.to_string().contains("outside its workspace root"),
            "{err:?}"
        );
        let err = resolve(&sandbox("../x"), Path::new("/")).unwrap_err();
        assert!(err.to_string().contains("must not contain `..`"), "{err:?}");
    }

    #[test]
    fn precedence_and_deepest_rule() {
        let rules = vec![
            Rule {
                path: "/".into(),
                access: FsAccess::Read,
            },
            Rule {
                path: "/w".into(),
                access: FsAccess::Write,
            },
            Rule {
                path: "/w/.git".into(),
                access: FsAccess::Read,
            },
        ];
        assert_eq!(effective(&rules, Path::new("/etc")), Some(FsAccess::Read));
        assert_eq!(effective(&rules, Path::new("/w/a")), Some(FsAccess::Write));
        assert_eq!(
            effective(&rules, Path::new("/w/.git/config")),
            Some(FsAccess::Read)
        );
        assert_eq!(
            effective(&rules, Path::new("/w/.gitx")),
            Some(FsAccess::Write)
        );
        assert_eq!(strongest(FsAccess::Write, FsAccess::Deny), FsAccess::Deny);
        assert_eq!(strongest(FsAccess::Write, FsAccess::Read), FsAccess::Write);
    }

    #[test]
    fn unknown_kinds_and_missing_paths_fail_closed() {
        let unknown = context(
            json!({"permissions": {"type": "managed", "network": "enabled",
            "file_system": {"type": "restricted", "entries": [
                {"path": {"type": "special", "value": {"kind": "future_kind"}}, "access": "read"}]}}}),
        );
        assert!(resolve(&unknown, Path::new("/")).is_err());
        let missing = context(
            json!({"permissions": {"type": "managed", "network": "enabled",
            "file_system": {"type": "restricted", "entries": [
                {"path": {"type": "path", "path": "file:///definitely/not/here"}, "access": "read"}]}}}),
        );
        let err = resolve(&missing, Path::new("/")).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err:?}");
        let unrestricted = context(
            json!({"permissions": {"type": "managed", "network": "enabled",
            "file_system": {"type": "unrestricted"}}}),
        );
        assert_eq!(resolve(&unrestricted, Path::new("/")).unwrap(), None);
    }
}
