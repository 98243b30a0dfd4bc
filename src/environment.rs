//! `environment/info` (what this host looks like, and which optional features the daemon has)
//! and `environment/status` (a liveness probe).

use exec_server_protocol::environment::*;
use exec_server_protocol::PathUri;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// The daemon answers, so it is ready: there is nothing it waits for.
pub(crate) fn status() -> EnvironmentStatus {
    EnvironmentStatus {
        status: EnvironmentReadiness::Ready,
    }
}

/// The optional features this daemon really implements. Listed in full, without
/// `..Default::default()`, so adding a bit to the protocol forces a decision here.
pub(crate) fn capabilities() -> EnvironmentCapabilities {
    let sandbox = crate::sandbox::enforceable();
    let root_write = sandbox && crate::sandbox::root_write::supported();
    EnvironmentCapabilities {
        network_proxy_launch: sandbox,
        network_proxy_review_domains: sandbox,
        network_proxy_transparent_tcp: sandbox && crate::netproxy::transparent::available(),
        credential_masking: false,
        credential_masking_custom_providers: false,
        capability_discovery_sandbox: true,
        fs_watch_missing: true,
        capability_discovery_v2: true,
        environment_config_read: true,
        http_header_env_vars: true,
        sandboxed_file_streaming: sandbox,
        shell_snapshot_v2: true,
        windows_mxc: false,
        // A write grant on `/` keeps the daemon's own files read-only and gives a private
        // `/dev` (docs/sandbox.md, "Root write"), where the kernel runs no helper of its own.
        linux_root_write_preserves_devices: root_write,
        linux_approved_root_write_preserves_restrictions: root_write,
        process_resize: true,
        process_close_stdin: true,
        process_signals: true,
        output_retention_indicator: true,
        retention_pause: true,
        file_write_streaming: true,
        fs_atomic_write: true,
        fs_rename: true,
        fs_read_directory_errors: true,
        fs_watch: true,
        linux_sandbox: sandbox,
        process_limits: true,
        process_tree_limits: crate::process::tree_limits_supported(),
        process_start_idempotent: true,
        process_list: true,
        session_disconnect_policy: true,
        process_input_wait: cfg!(target_os = "linux"),
    }
}

/// Which build serves this environment: `sha256:` and the digest of the GNU build ID the linker
/// stamped on this executable (itself a digest of the linked output). Upstream digests its build
/// commit and target, which this crate does not embed; the build ID names the build as well (a
/// rebuild or upgrade changes it, a restart, a move or another user does not). `None` when the
/// executable carries no build ID (linked with `--build-id=none`).
static PROVIDER_ID: LazyLock<Option<String>> = LazyLock::new(|| {
    let digest = ring::digest::digest(&ring::digest::SHA256, &own_build_id()?);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("sha256:{hex}"))
});

/// This executable's GNU build ID, read from its note segment as loaded in memory: no file is
/// read, so it is the running build's even after the file was replaced.
fn own_build_id() -> Option<Vec<u8>> {
    /// Called for each loaded object, the executable first; stops after it.
    unsafe extern "C" fn executable(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        found: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid `info` whose program headers and PT_NOTE segments
        // are mapped for the call; `found` is the `Option` `own_build_id` passed.
        unsafe {
            let (info, found) = (&*info, &mut *found.cast::<Option<Vec<u8>>>());
            let headers = std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum));
            for header in headers
                .iter()
                .filter(|header| header.p_type == libc::PT_NOTE)
            {
                let start = (info.dlpi_addr + header.p_vaddr) as *const u8;
                let notes = std::slice::from_raw_parts(start, header.p_memsz as usize);
                if let Some(id) = gnu_build_id(notes) {
                    *found = Some(id.to_vec());
                }
            }
        }
        1
    }
    let mut found: Option<Vec<u8>> = None;
    // SAFETY: the callback only reads what the loader hands it and writes `found`, which
    // outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(executable), (&raw mut found).cast()) };
    found
}

/// The descriptor of the `NT_GNU_BUILD_ID` note among ELF `notes` (records of name size,
/// descriptor size and type, then the name and the descriptor, each padded to 4 bytes).
fn gnu_build_id(mut notes: &[u8]) -> Option<&[u8]> {
    const NT_GNU_BUILD_ID: usize = 3;
    let word = |at: usize, notes: &[u8]| -> Option<usize> {
        let bytes = notes.get(at..at + 4)?.try_into().ok()?;
        usize::try_from(u32::from_ne_bytes(bytes)).ok()
    };
    while notes.len() >= 12 {
        let (name_size, desc_size) = (word(0, notes)?, word(4, notes)?);
        let desc_start = 12 + name_size.next_multiple_of(4);
        let name = notes.get(12..12 + name_size)?;
        let desc = notes.get(desc_start..desc_start + desc_size)?;
        if word(8, notes)? == NT_GNU_BUILD_ID && name == b"GNU\0" {
            return Some(desc);
        }
        notes = notes.get(desc_start + desc_size.next_multiple_of(4)..)?;
    }
    None
}

/// The codex release whose exec-server protocol this daemon speaks, sent as `executorVersion`:
/// codex compares it with its own releases to decide what to ask an executor (0.171.0 asks
/// for `capabilities/discoverV2` only from 0.164.0 on), so a version of our own would make it
/// misjudge this daemon. Raised with the protocol it names.
pub(crate) const CODEX_PROTOCOL_VERSION: &str = "0.171.0";

/// Computed on each call: it is cheap, and reflects the daemon's environment as it is.
pub(crate) fn info(config: &crate::config::Config) -> EnvironmentInfo {
    let cwd = std::env::current_dir().ok();
    let uri = |path: PathBuf| PathUri::from_path(&path).ok();
    EnvironmentInfo {
        shell: detect_shell(std::env::var_os("SHELL"), |path| path.is_file()),
        executor_version: CODEX_PROTOCOL_VERSION.to_owned(),
        provider_id: PROVIDER_ID.clone(),
        cwd: cwd.clone().and_then(uri),
        user_home_dir: home_dir().and_then(uri),
        platform_os: Some(std::env::consts::OS.to_owned()),
        // This daemon ships no helper executables (codex lists its bundled `rg`): upstream
        // leaves the field out when it has none.
        prepend_path_dirs: None,
        // Unix has one variable, so there is nothing to de-duplicate (Windows merges TEMP and
        // TMP).
        temporary_directories: Some(
            std::env::var_os("TMPDIR")
                .filter(|value| !value.is_empty())
                .and_then(|value| resolve(PathBuf::from(value), cwd.as_deref()))
                .and_then(uri)
                .into_iter()
                .collect(),
        ),
        temp_dir: resolve(std::env::temp_dir(), cwd.as_deref()).and_then(uri),
        capabilities: capabilities(),
        limits: Some(EnvironmentLimits {
            max_processes: config.max_processes as u64,
            max_processes_per_session: config.max_processes_per_session as u64,
        }),
        envd: (!config.envd.listen.is_empty()).then(|| EnvdInfo {
            listeners: config.envd.listen.iter().map(ToString::to_string).collect(),
            access_token: config.envd.access_token.is_some(),
            sandbox: config
                .envd
                .sandbox
                .as_ref()
                .map(|(_, profile)| profile.clone()),
        }),
        sandbox: Some(crate::sandbox::facilities::report(
            crate::sandbox::enforceable(),
        )),
    }
}

/// `$SHELL` if it names an existing file, else `/bin/bash`, else `/bin/sh`.
fn detect_shell(shell_var: Option<OsString>, exists: impl Fn(&Path) -> bool) -> ShellInfo {
    let path = shell_var
        .map(PathBuf::from)
        .filter(|path| path.is_absolute() && exists(path))
        .or_else(|| Some(PathBuf::from("/bin/bash")).filter(|path| exists(path)))
        .unwrap_or_else(|| PathBuf::from("/bin/sh"));
    ShellInfo {
        name: path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default(),
        path: path.to_string_lossy().into_owned(),
    }
}

/// `$HOME`, or the passwd entry when it is unset or not absolute.
fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|home| home.is_absolute())
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|user| user.dir)
        })
}

/// An absolute, lexically normalized form of `path`, relative ones taken from `cwd`.
fn resolve(path: PathBuf, cwd: Option<&Path>) -> Option<PathBuf> {
    let joined = if path.is_absolute() {
        path
    } else {
        cwd?.join(path)
    };
    Some(crate::path::normalize(&joined))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gnu_build_id_is_found_among_notes() {
        let note = |name: &[u8], kind: u32, desc: &[u8]| {
            let mut bytes = Vec::new();
            for word in [name.len() as u32, desc.len() as u32, kind] {
                bytes.extend(word.to_ne_bytes());
            }
            bytes.extend(name);
            bytes.resize(bytes.len().next_multiple_of(4), 0);
            bytes.extend(desc);
            bytes.resize(bytes.len().next_multiple_of(4), 0);
            bytes
        };
        let mut notes = note(b"GNU\0", 1, b"abi-tag-ish");
        notes.extend(note(b"Go\0", 3, b"other vendor"));
        notes.extend(note(b"GNU\0", 3, b"\x01\x02\x03\x04\x05"));
        assert_eq!(gnu_build_id(&notes), Some(&b"\x01\x02\x03\x04\x05"[..]));
        assert_eq!(gnu_build_id(&notes[..notes.len() - 4]), None, "cut short");
        assert!(own_build_id().is_some_and(|id| !id.is_empty()));
    }

    #[test]
    fn shell_prefers_an_existing_shell_var_then_bash_then_sh() {
        let all = |_: &Path| true;
        let shell = detect_shell(Some("/usr/bin/zsh".into()), all);
        assert_eq!(
            (shell.name.as_str(), shell.path.as_str()),
            ("zsh", "/usr/bin/zsh")
        );
        let only_bash = |path: &Path| path == Path::new("/bin/bash");
        assert_eq!(
            detect_shell(Some("/usr/bin/zsh".into()), only_bash).name,
            "bash"
        );
        assert_eq!(detect_shell(None, only_bash).path, "/bin/bash");
        assert_eq!(detect_shell(Some("zsh".into()), all).path, "/bin/bash");
        let none = |_: &Path| false;
        let shell = detect_shell(Some("/usr/bin/zsh".into()), none);
        assert_eq!(
            (shell.name.as_str(), shell.path.as_str()),
            ("sh", "/bin/sh")
        );
    }

    #[test]
    fn local_environment_info_resolves_relative_temporary_directory() {
        let cwd = Path::new("/work/project");
        assert_eq!(
            resolve("tmp/../scratch/./t".into(), Some(cwd)),
            Some(PathBuf::from("/work/project/scratch/t"))
        );
        assert_eq!(
            resolve("/var/tmp".into(), None),
            Some(PathBuf::from("/var/tmp"))
        );
        assert_eq!(resolve("tmp".into(), None), None);
    }
}
