//! A write grant on `/` (issue #42): allowed, with what the daemon loads kept read-only and a
//! private `/dev`; every attempt on the daemon's binary, a library it maps, the loader, the
//! loader's configuration, the host's devices and the mount table is stopped, and the host's
//! files stay as they were.

use crate::common;
use crate::sandbox_support;

use common::*;
use sandbox_support::*;
use serde_json::Value;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// `/` writable, `deny` denied, the network restricted.
fn root_write(ws: &Path, deny: &Path) -> Value {
    restricted(
        ws,
        vec![entry(special("root"), "write"), entry(path(deny), "none")],
        "restricted",
    )
}

/// The canonical path of the first file mapped by process `pid` whose name contains `part`.
fn mapped(pid: i32, part: &str) -> PathBuf {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let path = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.contains(part))
        .unwrap_or_else(|| panic!("the daemon maps no {part}"));
    Path::new(path).canonicalize().unwrap()
}

/// What must not change on the host: (path, device, inode, size, mtime, link target).
fn fingerprint(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .map(|path| match std::fs::symlink_metadata(path) {
            Ok(meta) => format!(
                "{} {}:{} {} {} {:?}",
                path.display(),
                meta.dev(),
                meta.ino(),
                meta.len(),
                meta.mtime_nsec() + meta.mtime() * 1_000_000_000,
                std::fs::read_link(path).ok()
            ),
            Err(err) => format!("{} {:?}", path.display(), err.kind()),
        })
        .collect()
}

#[tokio::test]
async fn a_root_write_cannot_touch_what_the_daemon_loads_nor_the_hosts_devices() {
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().canonicalize().unwrap().join("state");
    let (daemon, _copies) = root_write_daemon(&[(STATE_DIR_VAR, state_dir.to_str().unwrap())]);
    let (client, _) = daemon.session().await;
    let d = Dirs::new();
    let secret = d.ws("secret");
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("s"), "secret").unwrap();
    if let Some(helper) = root_write_refusal(daemon.pid()) {
        // A sandbox could replace a kernel helper, or what it loads, and have the kernel run
        // that as root; or write a library through its other name.
        let start = params("p", &["true"], &d.ws, root_write(&d.ws, &secret));
        let error = client.request("process/start", start).await.unwrap_err();
        assert!(
            error["message"].as_str().unwrap().contains(&helper),
            "{error}"
        );
        return;
    }
    let binary = Path::new(env!("CARGO_BIN_EXE_exec-server"))
        .canonicalize()
        .unwrap();
    let libc = mapped(daemon.pid(), "libc.so");
    let lib_dir = libc.parent().unwrap().to_path_buf();
    let interp_link = Path::new("/usr/lib64/ld-linux-x86-64.so.2");
    let host_devices: Vec<&str> = [
        "/dev/vda",
        "/dev/sda",
        "/dev/mem",
        "/dev/kmsg",
        "/dev/loop0",
    ]
    .into_iter()
    .filter(|device| Path::new(device).exists())
    .collect();
    let watched: Vec<PathBuf> = [
        binary.clone(),
        libc.clone(),
        lib_dir.clone(),
        "/etc/ld.so.cache".into(),
        "/etc/ld.so.preload".into(),
        "/etc/ld.so.conf.d".into(),
        "/lib64".into(),
        interp_link.into(),
        state_dir.clone(),
    ]
    .into_iter()
    .chain(host_devices.iter().map(PathBuf::from))
    .collect();
    let before = fingerprint(&watched);
    let written = d.out("written");
    let code = format!(
        r#"import ctypes, errno, os, stat
{PY_ATTEMPT}
B, L, LD = {binary:?}, {libc:?}, {lib_dir:?}
attempt('write-outside', lambda: open({written:?}, 'w').write('x'))
attempt('open-binary', lambda: open(B, 'r+b').close())
attempt('unlink-binary', lambda: os.unlink(B))
attempt('rename-binary-dir', lambda: os.rename(os.path.dirname(B), os.path.dirname(B) + '.x'))
attempt('truncate-lib', lambda: os.truncate(L, 0))
attempt('append-lib', lambda: open(L, 'ab').close())
attempt('rename-lib', lambda: os.rename(L, L + '.x'))
attempt('unlink-lib', lambda: os.unlink(L))
attempt('link-lib', lambda: os.link(L, '/var/tmp/root-write-libc'))
attempt('rename-lib-dir', lambda: os.rename(LD, LD + '.x'))
attempt('rename-lib-parent', lambda: os.rename(os.path.dirname(LD), os.path.dirname(LD) + '.x'))
attempt('write-cache', lambda: open('/etc/ld.so.cache', 'ab').close())
attempt('create-preload', lambda: open('/etc/ld.so.preload', 'w').close())
attempt('create-conf', lambda: open('/etc/ld.so.conf.d/zz.conf', 'w').close())
attempt('unlink-lib64', lambda: os.unlink('/lib64'))
attempt('rename-lib64', lambda: os.rename('/lib64', '/lib64.x'))
attempt('unlink-interp-link', lambda: os.unlink({interp_link:?}))
attempt('mknod', lambda: os.mknod('/var/tmp/root-write-node', 0o600 | stat.S_IFCHR, os.makedev(1, 3)))
attempt('mount', lambda: syscall(165, b'none', b'/mnt', b'tmpfs', 0, None))
attempt('remount', lambda: syscall(165, None, LD.encode(), None, 32 | 4096, None))
attempt('umount', lambda: syscall(166, LD.encode(), 2))
attempt('state-dir', lambda: os.listdir({state_dir:?}))
attempt('rename-state-parent', lambda: os.rename({state_parent:?}, {state_parent:?} + '.x'))
for device in {host_devices:?}:
    attempt('device ' + device, lambda: open(device, 'rb').close())
attempt('read-denied', lambda: open({secret_file:?}).read())
"#,
        PY_ATTEMPT = PY_ATTEMPT,
        written = written.to_str().unwrap(),
        state_parent = state_dir.parent().unwrap().to_str().unwrap(),
        secret_file = secret.join("s").to_str().unwrap(),
    );
    let outcome = py(&client, "p", &d.ws, &root_write(&d.ws, &secret), &code).await;
    assert_eq!(outcome.code, 0, "{outcome:?}");
    let lines: Vec<&str> = outcome.output.lines().collect();
    assert_eq!(lines[0], "write-outside OK", "{outcome:?}");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "x");
    assert!(lines.len() >= 24, "{outcome:?}");
    for line in &lines[1..] {
        assert!(line.contains(" ERR "), "not stopped: {line}\n{outcome:?}");
    }
    for device in &host_devices {
        let line = format!("device {device} ERR ENOENT");
        assert!(lines.contains(&line.as_str()), "{line}: {outcome:?}");
    }
    assert_eq!(fingerprint(&watched), before, "{outcome:?}");
    for made in ["/var/tmp/root-write-libc", "/var/tmp/root-write-node"] {
        assert!(!Path::new(made).exists(), "{made}");
    }
    // On a PTY: the host's `/dev/pts/N` is not in the private `/dev` (nor in codex's), and
    // the terminal works through the descriptors and `/dev/tty`.
    let script = "echo through-dev-tty > /dev/tty && stty size";
    let mut tty = params(
        "t",
        &["sh", "-c", script],
        &d.ws,
        root_write(&d.ws, &secret),
    );
    tty["tty"] = serde_json::json!(true);
    let outcome = run(&client, tty).await;
    assert_eq!(outcome.code, 0, "{outcome:?}");
    assert!(outcome.output.contains("through-dev-tty"), "{outcome:?}");
}

/// `start` is refused as invalid, naming `what`.
async fn refused_naming(client: &Client, start: Value, what: &str) {
    let error = client.request("process/start", start).await.unwrap_err();
    assert_eq!(error["code"], -32602, "{error}");
    assert!(error["message"].as_str().unwrap().contains(what), "{error}");
}

/// A daemon that sees `core_pattern` pipe core dumps to `handler` (through a bind mount in a
/// mount namespace of its own; the host's setting is untouched).
fn daemon_with_core_handler(handler: &str) -> (Daemon, tempfile::NamedTempFile) {
    let fake = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(fake.path(), format!("|{handler} -p%p\n")).unwrap();
    let mut command = std::process::Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind \"$0\" /proc/sys/kernel/core_pattern && exec \"$@\"")
        .arg(fake.path())
        .arg(env!("CARGO_BIN_EXE_exec-server"))
        .args(["--listen", "ws://127.0.0.1:0"])
        .env("EXEC_SERVER_LOG", "warn")
        .stdout(std::process::Stdio::piped());
    (Daemon::launch(command), fake)
}

/// Any write grant that reaches a program the kernel runs as root outside every sandbox (here
/// a core dump handler) is refused, as one on the daemon's binary is: a sandbox could replace
/// it and crash a process to have the kernel run its code. A grant beside it is not.
#[tokio::test]
async fn a_write_grant_on_a_kernel_helper_is_refused() {
    let d = Dirs::new();
    let handlers = d.out("handlers");
    std::fs::create_dir(&handlers).unwrap();
    let handler = handlers.join("handler");
    std::fs::write(&handler, "#!/bin/sh\n").unwrap();
    let (daemon, _fake) = daemon_with_core_handler(handler.to_str().unwrap());
    let (client, _) = daemon.session().await;
    for grant in [&handlers, &handler] {
        let intent = restricted(&d.ws, vec![entry(path(grant), "write")], "restricted");
        let start = params("p", &["true"], &d.ws, intent);
        refused_naming(&client, start, "the kernel's core dump handler").await;
    }
    let beside = d.out("beside");
    std::fs::create_dir(&beside).unwrap();
    let intent = restricted(&d.ws, vec![entry(path(&beside), "write")], "restricted");
    let started = client
        .request("process/start", params("q", &["true"], &d.ws, intent))
        .await;
    assert!(started.is_ok(), "{started:?}");
    assert_eq!(std::fs::read(&handler).unwrap(), b"#!/bin/sh\n");
}

/// Where the kernel runs a helper program (here a core dump handler, seen only by this daemon
/// through a bind mount in a mount namespace of its own), a root write is refused: a sandbox
/// could replace the handler or what it loads and crash a process to have it run as root.
/// `environment/info` says so.
#[tokio::test]
async fn a_root_write_is_refused_where_the_kernel_runs_a_helper() {
    let (daemon, _fake) = daemon_with_core_handler("/usr/share/apport/apport");
    let (client, _) = daemon.session().await;
    let info = client.call("environment/info", Value::Null).await;
    let capabilities = &info["capabilities"];
    assert_eq!(capabilities["linuxSandbox"], true, "{info}");
    assert_eq!(capabilities["linuxRootWritePreservesDevices"], false);
    assert_eq!(
        capabilities["linuxApprovedRootWritePreservesRestrictions"],
        false
    );
    let d = Dirs::new();
    let marker = d.out("ran");
    let script = format!("touch {}", marker.display());
    let start = params("p", &["sh", "-c", &script], &d.ws, root_write(&d.ws, &d.ws));
    let handler = "the kernel's core dump handler `/usr/share/apport/apport`";
    refused_naming(&client, start, handler).await;
    assert!(!marker.exists());
}
