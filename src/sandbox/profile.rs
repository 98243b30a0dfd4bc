//! A listener's own sandbox profile file (`--envd-sandbox`, `--sandboxd-sandbox`): a
//! `process/start` `sandbox` as JSON, or just its `permissions`, applied to every command that
//! listener starts.

use exec_server_protocol::sandbox::{FileSystemSandboxContext, PermissionProfile};
use exec_server_protocol::PathUri;

/// Whether `profile` is a permission profile a listener can apply (checked at start).
pub(crate) fn check(profile: &serde_json::Value) -> anyhow::Result<()> {
    if profile.get("permissions").is_some() {
        serde_json::from_value::<FileSystemSandboxContext>(profile.clone())?;
    } else {
        serde_json::from_value::<PermissionProfile>(profile.clone())?;
    }
    Ok(())
}

/// `profile` anchored at `cwd`: a bare `permissions` object is anchored there (its one
/// workspace root), as `run --sandbox PROFILE.json` does; a whole context is taken as it is.
pub(crate) fn anchored(
    profile: &serde_json::Value,
    cwd: &PathUri,
) -> Option<FileSystemSandboxContext> {
    if profile.get("permissions").is_some() {
        return serde_json::from_value(profile.clone()).ok();
    }
    Some(FileSystemSandboxContext {
        permissions: serde_json::from_value(profile.clone()).ok()?,
        cwd: Some(cwd.clone()),
        workspace_roots: vec![cwd.clone()],
        policy_context: None,
        windows_sandbox_level: Default::default(),
        windows_sandbox_private_desktop: false,
        use_legacy_landlock: false,
        user_home_dir: None,
        temporary_directories: Vec::new(),
        windows_sandbox_proxy_settings_mode: None,
    })
}
