//! `sandboxDenied`: was a sandboxed process's failure caused by the sandbox?
//!
//! Tiers, most certain first:
//! 1. A failure reported by the helper (see `Launch::confirm`): an exec the sandbox refused is
//!    a process that exits 126, denied; any other setup failure fails the launch itself, with
//!    `error.data.sandboxDenied`.
//! 2. Death by SIGSYS: the seccomp kill action fired.
//! 3. Denial messages (`Permission denied`, `Operation not permitted`, `Read-only file system`,
//!    `Invalid cross-device link`, `Device or resource busy`) naming a path the policy does not let the process write:
//!    outside every write root, inside a protected or read-only carve-out, or in a deny area.
//!    A path inside a writable root is not a sandbox denial (a mode-000 file there fails the
//!    same way unsandboxed). An `Operation not permitted` or `Read-only file system` naming no
//!    path counts too: with no capabilities and seccomp in place, that is what the sandbox
//!    produces, while plain `Permission denied` without a path is not attributable. `File
//!    exists` and `Is a directory` count for a protected name (what creating it reports when a
//!    placeholder holds it).
//!    Without Landlock, where the mount view alone leaves out what is not granted, also `No
//!    such file or directory` naming a path the policy does not let the process read that
//!    exists on the host.
//! 4. With network restricted: network failure messages ("Network is unreachable", "Could not
//!    resolve host", "Temporary failure in name resolution", ...) and curl's exit codes 6/7 and
//!    wget's 4. With a managed network also "Connection refused" (any loopback port but the
//!    proxy's), and, when binding is not allowed, a `Permission denied` naming no path (what
//!    a refused bind reports).
//!
//! A process that exits 0 was not denied, and neither is any unsandboxed process. Output is
//! scanned as it arrives, line by line, so the verdict does not depend on output retention.

use super::facilities::Enforcement;
use super::plan::ManagedPlan;
use super::policy::{effective, Rule};
use exec_server_protocol::process::OutputStream;
use exec_server_protocol::sandbox::FsAccess;
use std::path::{Path, PathBuf};

/// Longest line scanned; the rest of a longer line is ignored.
const MAX_LINE: usize = 4096;

const FS_DENIALS: &[&str] = &[
    "permission denied",
    "operation not permitted",
    "read-only file system",
    "invalid cross-device link",
    // Renaming or removing a protected mount point.
    "device or resource busy",
];

/// Messages that mean the sandbox without naming a path.
const PATHLESS_DENIALS: &[&str] = &["operation not permitted", "read-only file system"];

/// How a path the mount view alone leaves out fails (`super::facilities`): it counts for a
/// path the policy does not let the process read, which exists on the host.
const HIDDEN_MESSAGE: &str = "no such file or directory";

/// How creating a protected name fails when a placeholder holds it; they count only for such
/// names.
const PLACEHOLDER_MESSAGES: &[&str] = &["file exists", "is a directory"];

const NETWORK_DENIALS: &[&str] = &[
    "network is unreachable",
    "could not resolve host",
    "couldn't resolve host",
    "temporary failure in name resolution",
    "name or service not known",
    "no address associated with hostname",
    "couldn't connect to server",
    "failed to connect to",
    "unable to resolve host address",
];

/// How a managed network refuses a connection to a port it does not bridge.
const MANAGED_NETWORK_DENIALS: &[&str] = &["connection refused"];

/// What the classifier knows about one sandboxed launch.
#[derive(Debug)]
pub(crate) struct DenialContext {
    /// None: the file system is not restricted.
    pub rules: Option<Vec<Rule>>,
    pub network_restricted: bool,
    pub managed_network: Option<ManagedPlan>,
    pub cwd: PathBuf,
    pub program: String,
}

#[derive(Debug)]
pub(crate) struct Scanner {
    context: std::sync::Arc<DenialContext>,
    /// Unterminated line per stream (stdout, stderr, pty).
    partial: [Vec<u8>; 3],
    evidence: bool,
}

impl Scanner {
    /// `denied`: the sandbox is already known to have stopped the process (it refused the exec).
    pub(crate) fn new(context: std::sync::Arc<DenialContext>, denied: bool) -> Self {
        Self {
            context,
            partial: Default::default(),
            evidence: denied,
        }
    }

    pub(crate) fn feed(&mut self, stream: OutputStream, data: &[u8]) {
        let index = match stream {
            OutputStream::Stdout => 0,
            OutputStream::Stderr => 1,
            OutputStream::Pty => 2,
        };
        let mut rest = data;
        while let Some(newline) = rest.iter().position(|&b| b == b'\n') {
            self.push(index, &rest[..newline]);
            let line = std::mem::take(&mut self.partial[index]);
            self.line(&line);
            rest = &rest[newline + 1..];
        }
        self.push(index, rest);
    }

    fn push(&mut self, index: usize, bytes: &[u8]) {
        let room = MAX_LINE.saturating_sub(self.partial[index].len());
        self.partial[index].extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn line(&mut self, line: &[u8]) {
        if !self.evidence {
            self.evidence = self.context.explains(&String::from_utf8_lossy(line));
        }
    }

    /// The verdict at exit. `signal`: the signal that killed the process, if one did.
    pub(crate) fn verdict(&mut self, code: i32, signal: Option<i32>) -> bool {
        for index in 0..self.partial.len() {
            let line = std::mem::take(&mut self.partial[index]);
            self.line(&line);
        }
        if signal == Some(libc::SIGSYS) {
            return true;
        }
        if code == 0 {
            return false;
        }
        self.evidence || self.context.network_exit_code(code)
    }
}

impl DenialContext {
    /// Whether one output line reports a denial this policy explains.
    pub(crate) fn explains(&self, line: &str) -> bool {
        let lower = line.to_lowercase();
        if self.network_restricted && NETWORK_DENIALS.iter().any(|p| lower.contains(p)) {
            return true;
        }
        // A host Unix socket hidden from the sandbox (`super::sockets`) refuses a connection
        // with EACCES, which a client such as `nc -U` reports without the path; with network
        // restricted, a connection refused for permission has no other cause worth naming.
        if self.network_restricted
            && lower.contains("connect")
            && lower.contains("permission denied")
            && candidate_paths(line).is_empty()
        {
            return true;
        }
        if let Some(managed) = &self.managed_network {
            if MANAGED_NETWORK_DENIALS.iter().any(|p| lower.contains(p))
                || (!managed.allow_local_binding
                    && lower.contains("permission denied")
                    && candidate_paths(line).is_empty())
            {
                return true;
            }
        }
        if lower.contains(HIDDEN_MESSAGE) {
            return candidate_paths(line)
                .iter()
                .any(|path| self.hidden_by_view(Path::new(path)));
        }
        if PLACEHOLDER_MESSAGES.iter().any(|p| lower.contains(p)) {
            return candidate_paths(line)
                .iter()
                .any(|path| self.is_carve_out(Path::new(path)));
        }
        let Some(pattern) = FS_DENIALS.iter().find(|p| lower.contains(**p)) else {
            return false;
        };
        let paths = candidate_paths(line);
        if paths.is_empty() {
            return PATHLESS_DENIALS.contains(pattern);
        }
        paths
            .iter()
            .any(|path| self.blocks_writing(Path::new(path)))
    }

    /// Whether an operation's failure with `errno` on `path` (which it reads, or with `write`
    /// changes) is this policy's doing: a denial errno (EACCES, EPERM, EROFS, EXDEV, EBUSY — the
    /// [`FS_DENIALS`] messages) on a path the policy does not grant that access, or
    /// EEXIST/EISDIR on a protected name (see [`PLACEHOLDER_MESSAGES`]). Used for sandboxed
    /// `fs/*` operations, which report errnos instead of messages.
    pub(crate) fn explains_errno(&self, errno: i32, path: &Path, write: bool) -> bool {
        match errno {
            libc::EACCES | libc::EPERM | libc::EROFS | libc::EXDEV | libc::EBUSY => {
                if write {
                    self.blocks_writing(path)
                } else {
                    self.blocks_reading(path)
                }
            }
            libc::EEXIST | libc::EISDIR => self.is_carve_out(path) || self.hidden_by_view(path),
            libc::ENOENT => self.hidden_by_view(path),
            _ => false,
        }
    }

    /// A path the mount view alone leaves out (no Landlock: what is not granted is not there),
    /// which exists on the host, or whose directory does (a file to create there).
    pub(crate) fn hidden_by_view(&self, path: &Path) -> bool {
        let path = resolve(&self.cwd, path);
        let on_host = |path: &Path| std::fs::symlink_metadata(path).is_ok();
        !Enforcement::current().landlock_fs
            && self.blocks_reading(&path)
            && (on_host(&path) || path.parent().is_some_and(on_host))
    }

    fn blocks_writing(&self, path: &Path) -> bool {
        self.access(path)
            .is_some_and(|access| access != Some(FsAccess::Write))
    }

    fn blocks_reading(&self, path: &Path) -> bool {
        self.access(path)
            .is_some_and(|access| !matches!(access, Some(FsAccess::Read | FsAccess::Write)))
    }

    /// The access the policy gives `path` (resolved on the host); None when the file system
    /// is not restricted.
    fn access(&self, path: &Path) -> Option<Option<FsAccess>> {
        let rules = self.rules.as_ref()?;
        Some(effective(rules, &resolve(&self.cwd, path)))
    }

    /// A read-only path inside a write root: a protected name (maybe a placeholder, which is
    /// why creating it reports "File exists").
    fn is_carve_out(&self, path: &Path) -> bool {
        let Some(rules) = &self.rules else {
            return false;
        };
        let path = resolve(&self.cwd, path);
        rules.iter().any(|rule| {
            rule.path == path
                && rule.access == FsAccess::Read
                && path
                    .parent()
                    .is_some_and(|parent| effective(rules, parent) == Some(FsAccess::Write))
        })
    }

    fn network_exit_code(&self, code: i32) -> bool {
        if !self.network_restricted {
            return false;
        }
        let name = Path::new(&self.program)
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or_default();
        matches!((name, code), ("curl", 6 | 7) | ("wget", 4))
    }
}

/// Quoted strings and absolute-looking words of a line, plus the word right before a
/// `: <message>` (how `sh` names the file it could not create).
fn candidate_paths(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let quotes = [
        ('\'', '\''),
        ('"', '"'),
        ('‘', '’'),
        ('`', '\''),
        ('“', '”'),
    ];
    for (open, close) in quotes {
        let mut rest = line;
        while let Some(start) = rest.find(open) {
            let after = &rest[start + open.len_utf8()..];
            let Some(end) = after.find(close) else { break };
            let inner = &after[..end];
            if !inner.is_empty() && !inner.contains(char::is_whitespace) || inner.starts_with('/') {
                found.push(inner.to_owned());
            }
            rest = &after[end + close.len_utf8()..];
        }
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    for (index, word) in words.iter().enumerate() {
        let trimmed = word.trim_matches(|c: char| "'\"‘’“”`,;()[]".contains(c));
        let bare = trimmed.trim_end_matches(':');
        let looks_absolute =
            bare.starts_with('/') || bare.starts_with("./") || bare.starts_with("../");
        let names_the_failure = trimmed.ends_with(':')
            && bare.contains(['.', '/'])
            && words.get(index + 1).is_some_and(|next| {
                let next = next.to_lowercase();
                FS_DENIALS
                    .iter()
                    .chain(PLACEHOLDER_MESSAGES)
                    .any(|p| p.starts_with(&next))
            });
        if looks_absolute || names_the_failure {
            found.push(bare.to_owned());
        }
    }
    found.retain(|path| !path.starts_with("[errno"));
    found
}

/// An absolute, lexically normalized path; the longest existing prefix is canonicalized so
/// symbolic links in the reported path do not hide where it really is.
fn resolve(cwd: &Path, path: &Path) -> PathBuf {
    let normal = crate::path::normalize(&cwd.join(path));
    let mut existing = normal.clone();
    let mut tail = Vec::new();
    while !existing.exists() {
        match (
            existing.file_name().map(|n| n.to_owned()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                tail.push(name);
                existing = parent.to_path_buf();
            }
            _ => return normal,
        }
    }
    let mut resolved = std::fs::canonicalize(&existing).unwrap_or(existing);
    resolved.extend(tail.iter().rev());
    resolved
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn context(network_restricted: bool) -> Arc<DenialContext> {
        Arc::new(DenialContext {
            rules: Some(vec![
                Rule {
                    path: "/".into(),
                    access: FsAccess::Read,
                },
                Rule {
                    path: "/ws".into(),
                    access: FsAccess::Write,
                },
                Rule {
                    path: "/ws/.git".into(),
                    access: FsAccess::Read,
                },
            ]),
            network_restricted,
            managed_network: None,
            cwd: "/ws".into(),
            program: "sh".into(),
        })
    }

    fn denied(lines: &str, code: i32) -> bool {
        let mut scanner = Scanner::new(context(true), false);
        scanner.feed(OutputStream::Stderr, lines.as_bytes());
        scanner.verdict(code, None)
    }

    #[test]
    fn denials_outside_write_roots_count() {
        assert!(denied(
            "sh: 1: cannot create /etc/x: Permission denied\n",
            2
        ));
        assert!(denied(
            "touch: cannot touch '/etc/x': Read-only file system",
            1
        ));
        assert!(denied(
            "mkdir: cannot create directory ‘/ws/.git/x’: Read-only file system\n",
            1
        ));
        assert!(denied(
            "PermissionError: [Errno 13] Permission denied: '/outside/f'\n",
            1
        ));
        assert!(denied(
            "ln: failed to create hard link '/ws/x' => '/etc/passwd': Invalid cross-device link\n",
            1
        ));
        assert!(denied("socket: Operation not permitted\n", 1));
        assert!(denied(
            "mkdir: cannot create directory '.git': File exists\n",
            1
        ));
        assert!(!denied(
            "mkdir: cannot create directory 'src': File exists\n",
            1
        ));
        assert!(denied("curl: (6) Could not resolve host: example.com\n", 6));
        assert!(denied("OSError: [Errno 101] Network is unreachable\n", 1));
        // A hidden host socket, reported without its path (`nc -U`).
        assert!(denied("nc: unix connect failed: Permission denied\n", 1));
    }

    #[test]
    fn unrelated_failures_do_not_count() {
        assert!(!denied("", 1));
        assert!(!denied(
            "ls: cannot access '/nonexistent': No such file or directory\n",
            2
        ));
        assert!(!denied("sandbox\n", 1));
        assert!(!denied("cat: /ws/secret: Permission denied\n", 1));
        assert!(!denied(
            "sh: 1: cannot create out.txt: Permission denied\n",
            2
        ));
        assert!(
            !denied("permission denied\n", 1),
            "no path: not attributable"
        );
        assert!(!denied(
            "touch: cannot touch '/etc/x': Read-only file system",
            0
        ));
        assert!(!denied("nc: unix connect failed: Connection refused\n", 1));
        let mut scanner = Scanner::new(context(false), false);
        scanner.feed(OutputStream::Stdout, b"curl: (7) Failed to connect to x\n");
        assert!(!scanner.verdict(7, None), "network is not restricted");
        let mut scanner = Scanner::new(context(false), false);
        scanner.feed(
            OutputStream::Stdout,
            b"unix connect failed: Permission denied\n",
        );
        assert!(!scanner.verdict(1, None), "no socket is hidden then");
    }

    #[test]
    fn errnos_count_on_paths_the_policy_does_not_grant() {
        let context = context(false);
        let check =
            |errno, path: &str, write| context.explains_errno(errno, Path::new(path), write);
        assert!(check(libc::EROFS, "/etc/x", true));
        assert!(check(libc::EXDEV, "/ws/.git/config", true));
        assert!(check(libc::EBUSY, "/ws/.git", true));
        assert!(check(libc::EEXIST, "/ws/.git", true), "a placeholder");
        // Inside the write root, or a read the policy allows: the file's own mode bits.
        assert!(!check(libc::EACCES, "/ws/secret", true));
        assert!(!check(libc::EACCES, "/etc/shadow", false));
        assert!(!check(libc::EEXIST, "/ws/src", true));
        assert!(!check(libc::ENOENT, "/etc/x", true));
        let reads_only_ws = DenialContext {
            rules: Some(vec![Rule {
                path: "/ws".into(),
                access: FsAccess::Write,
            }]),
            network_restricted: false,
            managed_network: None,
            cwd: "/ws".into(),
            program: "exec-server".into(),
        };
        assert!(reads_only_ws.explains_errno(libc::EACCES, Path::new("/etc/shadow"), false));
    }

    #[test]
    fn managed_network_refusals_count() {
        let managed_denied = |allow_local_binding, line: &str| {
            let context = DenialContext {
                managed_network: Some(ManagedPlan {
                    ports: vec![3128],
                    allow_local_binding,
                    transparent_tcp: false,
                }),
                ..Arc::into_inner(context(true)).unwrap()
            };
            let mut scanner = Scanner::new(Arc::new(context), false);
            scanner.feed(OutputStream::Stderr, line.as_bytes());
            scanner.verdict(1, None)
        };
        let refused = "ConnectionRefusedError: [Errno 111] Connection refused\n";
        let bind = "PermissionError: [Errno 13] Permission denied\n";
        assert!(managed_denied(true, refused));
        assert!(
            !denied(refused, 1),
            "not managed: nothing is refused by the sandbox"
        );
        assert!(managed_denied(false, bind), "a refused bind");
        assert!(
            !managed_denied(true, bind),
            "binding is allowed: not the sandbox"
        );
    }

    #[test]
    fn sigsys_and_split_lines() {
        let mut scanner = Scanner::new(context(false), false);
        assert!(scanner.verdict(159, Some(libc::SIGSYS)));
        let mut scanner = Scanner::new(context(false), false);
        scanner.feed(OutputStream::Stderr, b"touch: cannot touch '/e");
        scanner.feed(OutputStream::Stderr, b"tc/x': Permission denied");
        assert!(scanner.verdict(1, None));
    }
}
