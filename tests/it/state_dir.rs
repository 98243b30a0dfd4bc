//! The state directory (`--state-dir`): created private, one daemon at a time, and refused
//! rather than used when it is not safe or not ours to read.

use crate::common;

use common::{Daemon, STATE_DIR_VAR, TIMEOUT};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_exec-server");

fn daemon_on(dir: &Path) -> Daemon {
    Daemon::start_with(&[], &[(STATE_DIR_VAR, dir.to_str().unwrap())])
}

fn refusing(dir: &Path) -> Command {
    Daemon::command(BIN, &["--state-dir", dir.to_str().unwrap()], &[])
}

/// The stderr of `command`, a daemon that must refuse to start (a nonzero exit, no banner).
pub fn refusal(mut command: Command) -> String {
    let mut child = command.stderr(Stdio::piped()).spawn().unwrap();
    let deadline = std::time::Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the daemon started");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let output = child.wait_with_output().unwrap();
    assert_eq!(status.code(), Some(1), "{output:?}");
    assert!(output.stdout.is_empty(), "{output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

#[tokio::test]
async fn a_missing_dir_is_created_private_and_the_daemon_serves() {
    let top = tempfile::tempdir().unwrap();
    let dir = top.path().join("a/b/state");
    let daemon = daemon_on(&dir);
    let (client, _) = daemon.session().await;
    client.close().await;
    for created in [top.path().join("a"), top.path().join("a/b"), dir.clone()] {
        assert_eq!(mode(&created), 0o700, "{}", created.display());
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("version")).unwrap(),
        "exec-server state 2\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("lock")).unwrap(),
        format!("{}\n", daemon.pid())
    );
    assert_eq!(mode(&dir.join("lock")), 0o600);
    for sub in ["processes", "sessions"] {
        assert!(dir.join(sub).is_dir());
        assert_eq!(mode(&dir.join(sub)), 0o700, "{sub}");
    }
}

#[tokio::test]
async fn one_daemon_per_dir_until_it_dies_however_it_dies() {
    let top = tempfile::tempdir().unwrap();
    let dir = top.path().join("state");
    let mut first = daemon_on(&dir);

    let stderr = refusal(refusing(&dir));
    assert!(
        stderr.contains(&format!(
            "the state dir {} is in use by another exec-server (pid {})",
            dir.display(),
            first.pid()
        )),
        "{stderr}"
    );

    // The kernel releases the lock of a daemon that had no chance to.
    first.send_signal(libc::SIGKILL);
    first.wait_exit(TIMEOUT).expect("killed");
    let next = daemon_on(&dir);
    let (client, _) = next.session().await;
    client.close().await;
    assert_eq!(
        std::fs::read_to_string(dir.join("lock")).unwrap(),
        format!("{}\n", next.pid())
    );
}

#[test]
fn a_dir_open_to_others_is_refused_and_left_as_it_is() {
    let state = common::private_tempdir();
    let dir = state.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let stderr = refusal(refusing(dir));
    assert!(
        stderr.contains(&format!(
            "the state dir {} has mode 755, so group or others may access it; run `chmod 700 {}`",
            dir.display(),
            dir.display()
        )),
        "{stderr}"
    );
    assert_eq!(mode(dir), 0o755);
    assert_eq!(std::fs::read_dir(dir).unwrap().count(), 0);
}

#[test]
fn a_dir_of_another_user_is_refused() {
    let state = common::private_tempdir();
    let dir = state.path();
    std::os::unix::fs::chown(dir, Some(65534), Some(65534)).unwrap();
    let stderr = refusal(refusing(dir));
    assert!(
        stderr.contains(&format!(
            "the state dir {} belongs to uid 65534, not to the daemon's uid 0",
            dir.display()
        )),
        "{stderr}"
    );
}

#[test]
fn a_symlink_to_a_good_dir_is_refused() {
    let good = common::private_tempdir();
    let top = tempfile::tempdir().unwrap();
    let link = top.path().join("link");
    std::os::unix::fs::symlink(good.path(), &link).unwrap();
    let stderr = refusal(refusing(&link));
    assert!(
        stderr.contains(&format!(
            "the state dir {} is a symbolic link, which is not followed",
            link.display()
        )),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(good.path()).unwrap().count(), 0);
}

#[test]
fn a_file_is_refused() {
    let top = tempfile::tempdir().unwrap();
    let file = top.path().join("state");
    std::fs::write(&file, "data").unwrap();
    let stderr = refusal(refusing(&file));
    assert!(
        stderr.contains(&format!(
            "the state dir {} is not a directory",
            file.display()
        )),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "data");
}

/// As nobody, under a directory of root's (root itself could write anywhere).
#[test]
fn a_location_the_daemon_cannot_write_is_refused() {
    use std::os::unix::process::CommandExt as _;
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let binary = top.path().join("exec-server");
    std::fs::copy(BIN, &binary).unwrap();
    let dir = top.path().join("state");
    let mut command = Daemon::command(
        binary.to_str().unwrap(),
        &["--state-dir", dir.to_str().unwrap()],
        &[],
    );
    command.uid(65534).gid(65534).current_dir("/");
    let stderr = refusal(command);
    assert!(
        stderr.contains(&format!(
            "cannot create the state dir {}: Permission denied",
            dir.display()
        )),
        "{stderr}"
    );
    assert!(!dir.exists());
}

#[test]
fn an_incompatible_version_is_refused_and_left_untouched() {
    let state = common::private_tempdir();
    let dir = state.path();
    std::fs::write(dir.join("version"), "exec-server state 3\nmore\n").unwrap();
    let stderr = refusal(refusing(dir));
    assert!(
        stderr.contains(&format!(
            "the state dir {} was written by an incompatible exec-server (format 3; this one reads 1 and 2)",
            dir.display()
        )),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("version")).unwrap(),
        "exec-server state 3\nmore\n"
    );
}

#[test]
fn content_without_a_version_is_refused() {
    let state = common::private_tempdir();
    let dir = state.path();
    std::fs::write(dir.join("notes"), "mine").unwrap();
    let stderr = refusal(refusing(dir));
    assert!(
        stderr.contains(&format!(
            "the state dir {} holds \"notes\" but no version file",
            dir.display()
        )),
        "{stderr}"
    );
    assert!(!dir.join("version").exists());
}

#[tokio::test]
async fn none_keeps_no_state() {
    let top = tempfile::tempdir().unwrap();
    // The flag outranks the variable, which names a dir the daemon would otherwise create.
    let dir = top.path().join("state");
    let daemon = Daemon::start_with(
        &["--state-dir", "none"],
        &[(STATE_DIR_VAR, dir.to_str().unwrap())],
    );
    let (client, _) = daemon.session().await;
    client.close().await;
    assert!(!dir.exists());
}

/// Whether `dir` lies on tmpfs.
fn on_tmpfs(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statfs(path.as_ptr(), &mut fs) }, 0);
    fs.f_type == libc::TMPFS_MAGIC
}

/// A state dir on a disk file system, which makes launches slow, is said so once at start,
/// with where to put it instead; one on tmpfs is not.
#[test]
fn a_state_dir_on_disk_is_warned_about_once_and_one_on_tmpfs_is_not() {
    use std::io::Read as _;
    let disk = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let tmpfs = tempfile::tempdir_in("/dev/shm").unwrap();
    if on_tmpfs(disk.path()) {
        eprintln!("skipped: the build directory lies on tmpfs, there is no disk to try");
        return;
    }
    for (top, warnings) in [(&disk, 1), (&tmpfs, 0)] {
        let dir = top.path().join("state");
        let mut command = Daemon::command(BIN, &["--state-dir", dir.to_str().unwrap()], &[]);
        command.stderr(Stdio::piped());
        let mut daemon = Daemon::launch(command);
        let mut stderr = daemon.take_stderr().unwrap();
        drop(daemon);
        let mut log = String::new();
        stderr.read_to_string(&mut log).unwrap();
        let said = log.matches("not tmpfs").count();
        assert_eq!(said, warnings, "{}: {log}", dir.display());
        if warnings > 0 {
            assert!(log.contains("emptyDir with medium: Memory"), "{log}");
        }
    }
}
