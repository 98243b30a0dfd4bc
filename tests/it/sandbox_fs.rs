//! Sandboxed file-system escapes (docs/sandbox.md, cases from the research table): each probe
//! really attempts the escape and the test checks both the outcome and the disk afterwards.

use crate::common;
use crate::sandbox_support;

use common::*;
use sandbox_support::*;
use serde_json::json;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::fs::PermissionsExt as _;

#[tokio::test]
async fn writes_inside_the_root_work_and_outside_are_denied() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sandbox = workspace_write(&d.ws, "enabled");
    let inside = sh(
        &client,
        "in",
        &d.ws,
        &sandbox,
        "echo hi > in.txt && mkdir sub && echo x > sub/y",
    )
    .await;
    assert_ok(&inside);
    assert_eq!(std::fs::read_to_string(d.ws("in.txt")).unwrap(), "hi\n");
    let out = d.out("f").display().to_string();
    let outside = sh(
        &client,
        "out",
        &d.ws,
        &sandbox,
        &format!("echo pwned > {out}"),
    )
    .await;
    assert_denied(&outside, "Read-only file system");
    let grandchild = sh(
        &client,
        "grandchild",
        &d.ws,
        &sandbox,
        &format!("sh -c 'sh -c \"echo pwned > {out}\"'"),
    )
    .await;
    assert_denied(&grandchild, "Read-only file system");
    d.assert_outside_untouched();
}

#[tokio::test]
async fn symlinks_and_hard_links_do_not_leave_the_root() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::os::unix::fs::symlink(d.out("f"), d.ws("link")).unwrap();
    let sandbox = workspace_write(&d.ws, "enabled");
    let through_link = sh(&client, "link", &d.ws, &sandbox, "echo pwned > link").await;
    assert_denied(&through_link, "link");
    let out = d.out("f").display().to_string();
    let hard = sh(&client, "hard", &d.ws, &sandbox, &format!("ln {out} hard")).await;
    assert_denied(&hard, "Invalid cross-device link");
    assert!(!d.ws("hard").exists());
    d.assert_outside_untouched();
}

#[tokio::test]
async fn renames_in_either_direction_are_denied() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::write(d.ws("mine"), "mine").unwrap();
    let sandbox = workspace_write(&d.ws, "enabled");
    let out = d.outside.display().to_string();
    let probe = format!(
        "import os\nfor a, b in [('mine', '{out}/mine'), ('{out}/f', 'stolen')]:\n    try:\n        os.rename(a, b); print('renamed', a)\n    except OSError as e: print(e)\nraise SystemExit(1)"
    );
    let renamed = py(&client, "py", &d.ws, &sandbox, &probe).await;
    assert_denied(&renamed, "Invalid cross-device link");
    assert!(!renamed.output.contains("renamed"), "{renamed:?}");
    // mv falls back to copy and unlink: the copy only reads (allowed), the unlink fails.
    let mv = sh(
        &client,
        "mv",
        &d.ws,
        &sandbox,
        &format!("mv {out}/f stolen"),
    )
    .await;
    assert_denied(&mv, "Read-only file system");
    let mv_out = sh(
        &client,
        "mv-out",
        &d.ws,
        &sandbox,
        &format!("mv mine {out}/"),
    )
    .await;
    assert_denied(&mv_out, "mine");
    assert_eq!(std::fs::read_to_string(d.ws("mine")).unwrap(), "mine");
    d.assert_outside_untouched();
}

#[tokio::test]
async fn truncation_creation_and_removal_outside_are_denied() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::create_dir(d.out("dir")).unwrap();
    let sandbox = workspace_write(&d.ws, "enabled");
    let out = d.outside.display().to_string();
    let probe = format!(
        r#"import os
attempts = [
    lambda: os.truncate('{out}/f', 0),
    lambda: os.close(os.open('{out}/f', os.O_RDONLY | os.O_TRUNC)),
    lambda: os.close(os.open('{out}/f', os.O_WRONLY | os.O_CREAT | os.O_TRUNC)),
    lambda: os.close(os.open('{out}/new', os.O_WRONLY | os.O_CREAT)),
    lambda: os.unlink('{out}/f'),
    lambda: os.mkdir('{out}/newdir'),
    lambda: os.rmdir('{out}/dir'),
    lambda: os.mkfifo('{out}/fifo'),
    lambda: os.symlink('/etc', '{out}/sym'),
]
failed = 0
for attempt in attempts:
    try:
        attempt(); print('SUCCEEDED')
    except OSError as e:
        failed += 1; print(e)
print('failed', failed)
raise SystemExit(1)"#
    );
    let outcome = py(&client, "py", &d.ws, &sandbox, &probe).await;
    assert_denied(&outcome, "failed 9");
    assert!(!outcome.output.contains("SUCCEEDED"), "{outcome:?}");
    std::fs::remove_dir(d.out("dir")).unwrap();
    d.assert_outside_untouched();
}

/// Metadata changes are not Landlock rights; the read-only view turns them into EROFS.
#[tokio::test]
async fn metadata_changes_outside_fail_with_a_read_only_view() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let before = std::fs::metadata(d.out("f")).unwrap();
    let sandbox = workspace_write(&d.ws, "enabled");
    let out = d.out("f").display().to_string();
    let probe = format!(
        r#"import os
attempts = [
    lambda: os.chmod('{out}', 0o777),
    lambda: os.chown('{out}', 1234, 1234),
    lambda: os.utime('{out}', (0, 0)),
    lambda: os.setxattr('{out}', 'user.x', b'1'),
]
failed = 0
for attempt in attempts:
    try:
        attempt(); print('SUCCEEDED')
    except OSError as e:
        failed += 1; print(e)
print('failed', failed)
raise SystemExit(1)"#
    );
    let outcome = py(&client, "py", &d.ws, &sandbox, &probe).await;
    assert_denied(&outcome, "failed 4");
    assert!(
        outcome.output.contains("Read-only file system"),
        "{outcome:?}"
    );
    let after = std::fs::metadata(d.out("f")).unwrap();
    assert_eq!(
        (before.mode(), before.uid(), before.mtime()),
        (after.mode(), after.uid(), after.mtime())
    );
    d.assert_outside_untouched();
}

#[tokio::test]
async fn device_nodes_cannot_be_made_even_inside_the_root() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sandbox = workspace_write(&d.ws, "enabled");
    // Landlock refuses MakeChar/MakeBlock (EACCES); without it, the missing CAP_MKNOD (EPERM).
    let outcome = sh(
        &client,
        "mknod",
        &d.ws,
        &sandbox,
        "mknod chr c 1 3; a=$?; mknod blk b 7 0; b=$?; exit $((a + b))",
    )
    .await;
    assert_ne!(outcome.code, 0, "{outcome:?}");
    let refusal = match landlock_fs() {
        true => "Permission denied",
        false => "Operation not permitted",
    };
    assert_eq!(outcome.output.matches(refusal).count(), 2, "{outcome:?}");
    d.assert_ws_names_settle(&[]).await;
}

/// Landlock's IoctlDev right comes with write grants only: a device granted for reading
/// cannot be driven by ioctl (TCGETS gets EACCES instead of the usual ENOTTY). TIOCSTI, which
/// types into a terminal, is refused by seccomp whatever the ABI.
#[tokio::test]
async fn device_ioctls_need_a_write_grant() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sandbox = workspace_write(&d.ws, "enabled");
    let probe = "import fcntl, os, termios\nfor dev in ['/dev/urandom', '/dev/null']:\n    fd = os.open(dev, os.O_RDONLY)\n    try:\n        fcntl.ioctl(fd, termios.TCGETS, bytes(64)); print(dev, 'OK')\n    except OSError as e: print(dev, e.strerror)\ntry:\n    fcntl.ioctl(os.open('/dev/null', os.O_RDONLY), termios.TIOCSTI, b'x')\nexcept OSError as e: print('TIOCSTI', e.strerror)";
    let outcome = py(&client, "ioctl", &d.ws, &sandbox, probe).await;
    // Typing into a terminal is refused in every mode (seccomp).
    assert!(
        outcome.output.contains("TIOCSTI Operation not permitted"),
        "{outcome:?}"
    );
    if landlock_abi() < 5 || !landlock_fs() {
        // Below ABI 5, or with the mount view alone, a device the intent lets the sandbox read takes its ioctls; those that
        // matter need a capability, or are refused by seccomp, as TIOCSTI above.
        return;
    }
    assert!(
        outcome.output.contains("/dev/urandom Permission denied"),
        "{outcome:?}"
    );
    assert!(
        outcome
            .output
            .contains("/dev/null Inappropriate ioctl for device"),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn reopening_fds_and_proc_paths_do_not_bypass_the_rules() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sandbox = workspace_write(&d.ws, "enabled");
    let out = d.out("f").display().to_string();
    let pid = daemon.pid();
    let probe = format!(
        r#"import os
fd = os.open('{out}', os.O_RDONLY)
attempts = [
    lambda: open('/proc/self/fd/%d' % fd, 'w').write('pwned'),
    lambda: open('/proc/1/root{out}', 'w').write('pwned'),
    lambda: open('/proc/{pid}/root{out}', 'w').write('pwned'),
    lambda: open('/proc/{pid}/cwd/pwned-by-sandbox', 'w').write('pwned'),
]
failed = 0
for attempt in attempts:
    try:
        attempt(); print('SUCCEEDED')
    except OSError as e:
        failed += 1; print(e)
print('failed', failed)
raise SystemExit(1)"#
    );
    let outcome = py(&client, "py", &d.ws, &sandbox, &probe).await;
    assert_denied(&outcome, "failed 4");
    assert!(!std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("pwned-by-sandbox")
        .exists());
    d.assert_outside_untouched();
}

#[tokio::test]
async fn only_stdio_is_inherited() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sandbox = workspace_write(&d.ws, "restricted");
    let probe = "import os\nopen_fds = []\nfor fd in range(3, 4096):\n    try:\n        os.fstat(fd); open_fds.append(fd)\n    except OSError: pass\nprint('fds', open_fds)";
    let outcome = py(&client, "fds", &d.ws, &sandbox, probe).await;
    assert_ok(&outcome);
    assert!(outcome.output.contains("fds []"), "{outcome:?}");
}

#[tokio::test]
async fn mounts_namespaces_and_pivot_root_are_denied() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::create_dir(d.ws("mnt")).unwrap();
    let sandbox = workspace_write(&d.ws, "enabled");
    let out = d.outside.display().to_string();
    let script = format!(
        "mount --bind {out} mnt; echo mount=$?; unshare -m true; echo unshare=$?; unshare -Ur true; echo userns=$?; exit 1"
    );
    let outcome = sh(&client, "mount", &d.ws, &sandbox, &script).await;
    assert!(outcome.denied, "{outcome:?}");
    for step in ["mount=", "unshare=", "userns="] {
        assert!(!outcome.output.contains(&format!("{step}0")), "{outcome:?}");
    }
    let pivot = py(
        &client,
        "pivot",
        &d.ws,
        &sandbox,
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nrc = libc.syscall(155, b'mnt', b'mnt')\nprint('pivot_root', rc, os.strerror(ctypes.get_errno()))\nraise SystemExit(1)",
    )
    .await;
    assert_denied(&pivot, "pivot_root -1 Operation not permitted");
    assert_eq!(std::fs::read_dir(d.ws("mnt")).unwrap().count(), 0);
}

#[tokio::test]
async fn protected_metadata_stays_read_only_and_missing_names_leave_nothing_behind() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::create_dir(d.ws(".git")).unwrap();
    std::fs::write(d.ws(".git/config"), "[core]\n").unwrap();
    std::fs::create_dir(d.ws("decoy")).unwrap();
    let sandbox = workspace_write(&d.ws, "enabled");
    let probes = [
        ("config", "echo '[core] hooksPath=/x' >> .git/config"),
        ("hook", "echo evil > .git/hooks-new"),
        ("mv", "mv .git moved && echo '[x]' > moved/config"),
        ("rm", "rm -rf .git"),
        ("mkdir", "mkdir .codex"),
        ("file", "echo x > .agents"),
        ("decoy", "ln -s decoy .codex"),
        (
            "decoy-replace",
            "rm -rf .codex; ln -sfn decoy .codex && echo x > .codex/config.toml",
        ),
        ("vscode", "mkdir -p .vscode/x"),
    ];
    let runs = probes
        .iter()
        .map(|(id, script)| sh(&client, id, &d.ws, &sandbox, script));
    for ((id, _), outcome) in probes.iter().zip(futures::future::join_all(runs).await) {
        assert_ne!(outcome.code, 0, "{id}: {outcome:?}");
        assert!(outcome.denied, "{id}: {outcome:?}");
    }
    // The workspace itself stays writable, in the same profile.
    assert_ok(&sh(&client, "ok", &d.ws, &sandbox, "echo ok > ok.txt").await);
    assert_eq!(
        std::fs::read_to_string(d.ws(".git/config")).unwrap(),
        "[core]\n"
    );
    d.assert_ws_names_settle(&[".git", "decoy", "ok.txt"]).await;
    assert_eq!(std::fs::read_dir(d.ws("decoy")).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(d.ws(".git")).unwrap().count(), 1);
}

#[tokio::test]
async fn a_git_file_protects_the_gitdir_it_points_to() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::create_dir_all(d.ws("repo/.git/worktrees/wt")).unwrap();
    std::fs::create_dir(d.ws("wt")).unwrap();
    let gitdir = d.ws("repo/.git/worktrees/wt");
    std::fs::write(d.ws("wt/.git"), format!("gitdir: {}\n", gitdir.display())).unwrap();
    // Only the worktree and the gitdir's parent are writable roots.
    let sandbox = restricted(
        &d.ws("wt"),
        vec![
            entry(special("root"), "read"),
            entry(special("project_roots"), "write"),
            entry(path(&d.ws("repo/.git/worktrees")), "write"),
        ],
        "enabled",
    );
    let script = format!("echo x > {}/HEAD; echo y > .git", gitdir.display());
    let outcome = sh(&client, "wt", &d.ws("wt"), &sandbox, &script).await;
    assert_denied(&outcome, "Read-only file system");
    assert!(!gitdir.join("HEAD").exists());
    assert!(std::fs::read_to_string(d.ws("wt/.git"))
        .unwrap()
        .starts_with("gitdir:"));
}

#[tokio::test]
async fn reads_are_restricted_when_the_profile_restricts_them() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::write(d.ws("mine.txt"), "mine").unwrap();
    let sandbox = restricted(
        &d.ws,
        vec![
            entry(special("minimal"), "read"),
            entry(special("project_roots"), "write"),
        ],
        "restricted",
    );
    let out = d.out("f").display().to_string();
    let readable = sh(&client, "in", &d.ws, &sandbox, "cat mine.txt").await;
    assert_ok(&readable);
    assert_eq!(readable.output, "mine");
    let secret = sh(&client, "out", &d.ws, &sandbox, &format!("cat {out}")).await;
    assert_denied(&secret, unreadable());
    assert!(!secret.output.contains("original"));
    let hostname = sh(&client, "etc", &d.ws, &sandbox, "cat /etc/hostname").await;
    assert_denied(&hostname, unreadable());
}

#[tokio::test]
async fn deny_entries_and_globs_hide_paths_inside_granted_areas() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::create_dir_all(d.ws("secrets")).unwrap();
    std::fs::write(d.ws("secrets/token"), "token").unwrap();
    std::fs::create_dir_all(d.ws("vault/keep")).unwrap();
    std::fs::write(d.ws("vault/other"), "other").unwrap();
    std::fs::write(d.ws("vault/keep/ok"), "ok").unwrap();
    std::fs::write(d.ws("prod.env"), "env").unwrap();
    let sandbox = restricted(
        &d.ws,
        vec![
            entry(special("root"), "read"),
            entry(special("project_roots"), "write"),
            entry(special_sub("project_roots", "secrets"), "deny"),
            entry(special_sub("project_roots", "vault"), "deny"),
            entry(special_sub("project_roots", "vault/keep"), "read"),
            entry(
                json!({"type": "glob_pattern", "pattern": "**/*.env"}),
                "deny",
            ),
        ],
        "enabled",
    );
    let hidden = sh(
        &client,
        "token",
        &d.ws,
        &sandbox,
        "cat secrets/token; ls secrets",
    )
    .await;
    assert_denied(&hidden, "Permission denied");
    assert!(!hidden.output.contains("token\n") && !hidden.output.ends_with("token"));
    let env = sh(&client, "env", &d.ws, &sandbox, "cat prod.env").await;
    assert_denied(&env, "Permission denied");
    // Inside a deny area with grants below it, the rest is hidden, the grant reachable.
    let other = sh(&client, "other", &d.ws, &sandbox, "cat vault/other").await;
    assert_ne!(other.code, 0, "{other:?}");
    assert!(!other.output.contains("other\n") && !other.output.ends_with("other"));
    let kept = sh(&client, "kept", &d.ws, &sandbox, "cat vault/keep/ok").await;
    assert_ok(&kept);
    assert_eq!(kept.output, "ok");
    let write_kept = sh(&client, "kept-w", &d.ws, &sandbox, "echo x > vault/keep/ok").await;
    assert_denied(&write_kept, "Read-only file system");
    let replace = sh(&client, "replace", &d.ws, &sandbox, "rm -rf secrets").await;
    assert_denied(&replace, "secrets");
    assert_eq!(
        std::fs::read_to_string(d.ws("vault/keep/ok")).unwrap(),
        "ok"
    );
    assert_eq!(
        std::fs::read_to_string(d.ws("vault/other")).unwrap(),
        "other"
    );
    assert_eq!(
        std::fs::read_to_string(d.ws("secrets/token")).unwrap(),
        "token"
    );
    assert_eq!(std::fs::read_to_string(d.ws("prod.env")).unwrap(), "env");
}

#[tokio::test]
async fn setuid_binaries_give_no_privileges() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sandbox = workspace_write(&d.ws, "enabled");
    // Made on the host: the sandbox cannot set the bit itself (below).
    let suidcat = d.ws("suidcat");
    std::fs::copy("/bin/cat", &suidcat).unwrap();
    std::fs::set_permissions(&suidcat, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let outcome = sh(
        &client,
        "suid",
        &d.ws,
        &sandbox,
        "./suidcat /proc/self/status",
    )
    .await;
    assert_ok(&outcome);
    assert!(
        outcome.output.contains("CapEff:\t0000000000000000"),
        "{outcome:?}"
    );
}

/// A background process outliving the leader keeps its namespace, so the placeholder stays
/// (and keeps protecting) until that process is gone too.
#[tokio::test]
async fn placeholders_stay_while_a_background_process_still_runs() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sandbox = workspace_write(&d.ws, "enabled");
    let script = "(sleep 2; mkdir .codex/x; echo $? > result) >/dev/null 2>&1 &";
    assert_ok(&sh(&client, "bg", &d.ws, &sandbox, script).await);
    // Past the moment an unused placeholder waits for the next launch.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    assert!(
        d.ws(".codex").is_dir(),
        "removed while still mounted: {:?}",
        d.ws_names()
    );
    eventually("the background probe", || d.ws("result").exists()).await;
    eventually("placeholders removed", || d.ws_names() == ["result"]).await;
    assert_ne!(std::fs::read_to_string(d.ws("result")).unwrap().trim(), "0");
}

/// Review finding 7: with `missing_path_behavior: skip`, a launch that moves a denied file's
/// directory inside its write root would make the next launch of the same intent skip the rule
/// and read the file. The moves fail (the directories on the way are mount points), and the
/// next launch still cannot read it.
#[tokio::test]
async fn a_denied_path_cannot_be_moved_away_from_its_rule() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    std::fs::create_dir_all(d.ws("config/keys")).unwrap();
    std::fs::write(d.ws("config/keys/secret"), "TOP-SECRET-VALUE").unwrap();
    let sandbox = restricted(
        &d.ws,
        vec![
            entry(special("root"), "read"),
            entry(special("project_roots"), "write"),
            json!({"path": special_sub("project_roots", "config/keys/secret"),
                "access": "deny", "missing_path_behavior": "skip"}),
        ],
        "enabled",
    );
    let moves = sh(
        &client,
        "move",
        &d.ws,
        &sandbox,
        "mv config moved; mv config/keys config/k2; mv config/keys/secret config/keys/s2; \
         rm -rf config",
    )
    .await;
    assert_ne!(moves.code, 0, "{moves:?}");
    assert_eq!(
        moves.output.matches("Device or resource busy").count(),
        4,
        "three renames and the removal: {moves:?}"
    );
    assert_eq!(
        std::fs::read_to_string(d.ws("config/keys/secret")).unwrap(),
        "TOP-SECRET-VALUE"
    );
    let read = sh(
        &client,
        "read",
        &d.ws,
        &sandbox,
        "cat config/keys/secret moved/keys/secret config/k2/secret config/keys/s2",
    )
    .await;
    assert_ne!(read.code, 0, "{read:?}");
    assert!(!read.output.contains("TOP-SECRET"), "{read:?}");
    // The pins keep the directories writable.
    assert_ok(
        &sh(
            &client,
            "write",
            &d.ws,
            &sandbox,
            "echo ok > config/keys/ok",
        )
        .await,
    );
    assert!(d.ws("config/keys/ok").exists());
}

/// A file the sandbox writes stays on the host: if it could carry the setuid or setgid bit
/// (the sandbox runs as uid 0), any host user running it would get root. Every way to set
/// the bits is refused, capabilities cannot be attached, device nodes cannot be made, and
/// ordinary modes still work.
#[tokio::test]
async fn files_written_in_the_sandbox_carry_no_privilege_to_the_host() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let sandbox = workspace_write(&d.ws, "enabled");
    let shell = sh(
        &client,
        "sh",
        &d.ws,
        &sandbox,
        "cp /usr/bin/id cp-chmod; chmod 4755 cp-chmod; echo chmod=$?; chmod g+s cp-chmod; \
         echo chmodg=$?; install -m 4755 /usr/bin/id installed; echo install=$?; \
         mknod null c 1 3; echo mknod=$?",
    )
    .await;
    for expect in ["chmod=1", "chmodg=1", "install=1", "mknod=1"] {
        assert!(shell.output.contains(expect), "{expect}: {shell:?}");
    }
    let probe = format!(
        r#"
import ctypes, errno, os, shutil, stat, struct
{PY_ATTEMPT}shutil.copy('/usr/bin/id', 'py')
fd = os.open('py', os.O_RDONLY)
W = os.O_CREAT | os.O_WRONLY
attempt('chmod', lambda: os.chmod('py', 0o4755))
attempt('fchmod', lambda: os.fchmod(fd, 0o2755))
attempt('fchmodat2', lambda: syscall(452, -100, b'py', 0o4755, 0))
attempt('open', lambda: os.open('open', W, 0o4755))
attempt('open_sgid', lambda: os.open('open_sgid', W, 0o2755))
attempt('sys_open', lambda: syscall(2, b'sys_open', W, 0o4755))
attempt('creat', lambda: syscall(85, b'creat', 0o4755))
attempt('tmpfile', lambda: os.open('.', os.O_TMPFILE | os.O_WRONLY, 0o4755))
attempt('mknod', lambda: os.mknod('mknod', stat.S_IFREG | 0o4755))
attempt('openat2', lambda: syscall(437, -100, b'openat2', None, 24))
# VFS_CAP_REVISION_2, effective, permitted CAP_SETUID.
attempt('xattr', lambda: os.setxattr('py', 'security.capability', struct.pack('<5I', 0x02000001, 1 << 7, 0, 0, 0)))
attempt('chardev', lambda: os.mknod('chardev', stat.S_IFCHR | 0o666, os.makedev(1, 3)))
attempt('plain chmod', lambda: os.chmod('py', 0o755))
attempt('plain open', lambda: os.close(os.open('plain', W, 0o644)))
attempt('plain dir', lambda: os.mkdir('dir', 0o755))
"#
    );
    let outcome = py(&client, "py", &d.ws, &sandbox, &probe).await;
    for call in [
        "chmod",
        "fchmod",
        "fchmodat2",
        "open",
        "open_sgid",
        "sys_open",
        "creat",
        "tmpfile",
        "mknod",
        "xattr",
    ] {
        let expect = format!("{call} ERR EPERM");
        assert!(outcome.output.contains(&expect), "{expect}: {outcome:?}");
    }
    // CAP_MKNOD is gone, and Landlock refuses MakeChar first.
    let chardev = match landlock_fs() {
        true => "chardev ERR EACCES",
        false => "chardev ERR EPERM",
    };
    assert!(outcome.output.contains(chardev), "{outcome:?}");
    for expect in [
        "openat2 ERR ENOSYS",
        "plain chmod OK",
        "plain open OK",
        "plain dir OK",
    ] {
        assert!(outcome.output.contains(expect), "{expect}: {outcome:?}");
    }
    for entry in std::fs::read_dir(&d.ws).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        let name = entry.file_name();
        assert_eq!(meta.mode() & 0o6000, 0, "{name:?} carries setuid/setgid");
        assert!(meta.is_file() || meta.is_dir(), "{name:?} is a device");
        assert!(
            xattr_absent(&entry.path(), "security.capability"),
            "{name:?} has file capabilities"
        );
    }
}

fn xattr_absent(path: &std::path::Path, name: &str) -> bool {
    let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid strings; a NULL buffer of size 0 asks only for the size.
    unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) < 0 }
}
