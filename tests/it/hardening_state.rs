//! Attacks on the state directory and the audit log (issue #26), each performed against the
//! real daemon over the protocol: a sandbox that moves an ancestor of the state dir, a bind
//! mount of it, ancestors another user can change, session ids in file names, a journal that
//! lies, and an audit log path that is not the daemon's.

use crate::common::{self, *};
use crate::sandbox_support::{self as sb, entry, special};
use crate::state_dir::refusal;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_exec-server");
const SECRET: &str = "API_KEY=hunter2-secret";

fn daemon_on(dir: &Path) -> Daemon {
    Daemon::start_with(&[], &[(STATE_DIR_VAR, dir.to_str().unwrap())])
}

fn crash(mut daemon: Daemon) {
    daemon.send_signal(libc::SIGKILL);
    daemon.wait_exit(TIMEOUT).expect("the daemon died");
}

/// A victim session running a process whose environment and output are secrets.
async fn victim(daemon: &Daemon) -> (Client, String) {
    let (client, session) = daemon.session().await;
    let mut params = start_params("victim", &["sh", "-c", "echo victim-output; sleep 30"]);
    params["env"]["API_KEY"] = json!("hunter2-secret");
    client.call("process/start", params).await;
    common::read_until(&client, "victim", 0, |bytes| bytes == b"victim-output\n").await;
    (client, session)
}

/// What a sandboxed attacker printed must hold nothing of the victim's.
fn assert_no_leak(output: &str, session: &str) {
    for secret in [session, SECRET, "hunter2", "victim-output"] {
        assert!(!output.contains(secret), "leaked {secret:?}: {output}");
    }
}

fn mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Item 1: a sandbox that may write W, with the state dir at W/inner/state, renames W/inner
/// and plants W/inner/state, then waits there for what the daemon writes next.
#[tokio::test]
async fn a_sandbox_that_writes_an_ancestor_cannot_redirect_the_state_dir() {
    let top = private_tempdir();
    let w = top.path().join("w");
    std::fs::create_dir(&w).unwrap();
    let state = w.join("inner/state");
    let daemon = daemon_on(&state);
    let (attacker, _) = daemon.session().await;
    let script = "mv inner inner.moved && mkdir -p inner/state/sessions inner/state/processes \
                  && echo moved; sleep 3; cat inner/state/sessions/* \
                  inner/state/processes/*/meta.json inner/state/processes/*/out.0";
    let params = sb::params(
        "attack",
        &["sh", "-c", script],
        &w,
        sb::workspace_write(&w, "restricted"),
    );
    match attacker.request("process/start", params).await {
        Err(error) => {
            assert_eq!(error["code"], -32602, "{error}");
            let message = error["message"].as_str().unwrap();
            assert!(
                message.contains("the daemon's state directory") && message.contains("inside"),
                "{message}"
            );
        }
        Ok(_) => {
            // Old daemons let it run: the victim comes while the attacker waits.
            eventually("the attacker moved the state dir", || {
                w.join("inner.moved").exists()
            })
            .await;
            let (_victim, session) = victim(&daemon).await;
            let (output, _) = read_all(&attacker, "attack").await;
            assert_no_leak(&String::from_utf8_lossy(&output), &session);
        }
    }
    assert!(!w.join("inner.moved").exists());
}

/// Item 1, the daemon's half: whoever renames an ancestor and plants a directory at the old
/// path (here a process of the daemon's user, which the guard does not stop), the daemon keeps
/// the directory it opened, and a successor started on the moved one adopts everything.
#[tokio::test]
async fn a_moved_ancestor_leaves_the_daemon_on_the_directory_it_opened() {
    let top = private_tempdir();
    let w = top.path().join("w");
    std::fs::create_dir(&w).unwrap();
    let daemon = daemon_on(&w.join("inner/state"));
    let (mover, _) = daemon.session().await;
    let script = "mv inner inner.moved && mkdir -p inner/state/sessions inner/state/processes";
    let mut params = start_params("mover", &["sh", "-c", script]);
    params["cwd"] = json!(file_uri(&w));
    mover.call("process/start", params).await;
    let (_, last) = read_all(&mover, "mover").await;
    assert_eq!(last["exitCode"], 0, "{last}");

    let (client, session) = victim(&daemon).await;
    let planted = w.join("inner/state");
    for sub in ["sessions", "processes"] {
        let names = sb::names_in(&planted.join(sub));
        assert!(
            names.is_empty(),
            "the daemon wrote into the planted {sub}: {names:?}"
        );
    }
    drop(client);
    crash(daemon);

    let daemon = daemon_on(&w.join("inner.moved/state"));
    let client = daemon.resume(&session).await;
    let read = common::read_until(&client, "victim", 0, |bytes| !bytes.is_empty()).await;
    assert_eq!(read.bytes, b"victim-output\n");
    client
        .call("process/terminate", json!({"processId": "victim"}))
        .await;
}

/// Unmounts on drop.
struct BindMount(PathBuf);

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Item 2: the state dir's parent is bind-mounted elsewhere; a sandbox that may read
/// everything looks for it there.
#[tokio::test]
async fn a_bind_mount_of_the_state_dir_is_hidden_from_sandboxes() {
    let top = private_tempdir();
    let parent = top.path().join("parent");
    std::fs::create_dir(&parent).unwrap();
    let alias = top.path().join("alias");
    std::fs::create_dir(&alias).unwrap();
    let ws = top.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let daemon = daemon_on(&parent.join("state"));
    let (_victim, session) = victim(&daemon).await;
    // One of its parent, one of a part of it.
    let part = top.path().join("part");
    std::fs::create_dir(&part).unwrap();
    let mut mounts = Vec::new();
    for (source, target) in [
        (parent.clone(), &alias),
        (parent.join("state/sessions"), &part),
    ] {
        let status = Command::new("mount")
            .args(["--bind", source.to_str().unwrap(), target.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
        mounts.push(BindMount(target.clone()));
    }
    assert!(alias.join("state/sessions").is_dir());
    assert_eq!(sb::names_in(&part), [digest_name(&session)]);

    let (attacker, _) = daemon.session().await;
    let script = format!(
        "ls {0}/state/sessions {1}; cat {0}/state/sessions/* {0}/state/processes/*/meta.json \
         {0}/state/processes/*/out.0 {1}/*",
        alias.display(),
        part.display()
    );
    let outcome = sb::sh(
        &attacker,
        "attack",
        &ws,
        &sb::workspace_write(&ws, "restricted"),
        &script,
    )
    .await;
    assert_no_leak(&outcome.output, &session);
    assert!(
        !outcome.output.contains(&digest_name(&session)),
        "{outcome:?}"
    );
    assert!(outcome.output.contains("Permission denied"), "{outcome:?}");
    // The same sandbox still reads the rest of the alias.
    std::fs::write(parent.join("note"), "visible").unwrap();
    let outcome = sb::sh(
        &attacker,
        "read",
        &ws,
        &sb::workspace_write(&ws, "restricted"),
        &format!("cat {}/note", alias.display()),
    )
    .await;
    assert_eq!(outcome.output, "visible", "{outcome:?}");
}

/// Item 3: an ancestor another user owns, or one group and others may write without the
/// sticky bit, lets them swap the state dir for their own between two daemons.
#[tokio::test]
async fn ancestors_another_user_can_change_are_refused() {
    let top = private_tempdir();
    mode(top.path(), 0o755);
    let theirs = top.path().join("theirs");
    let open = top.path().join("open");
    let sticky = top.path().join("sticky");
    for (dir, bits) in [(&theirs, 0o755), (&open, 0o777), (&sticky, 0o1777)] {
        std::fs::create_dir(dir).unwrap();
        mode(dir, bits);
        std::fs::create_dir(dir.join("state")).unwrap();
        mode(&dir.join("state"), 0o700);
    }
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    for (dir, found) in [
        (&theirs, "owner uid 65534, mode 755"),
        (&open, "owner uid 0, mode 777"),
    ] {
        let state = dir.join("state");
        let command = Daemon::command(BIN, &["--state-dir", state.to_str().unwrap()], &[]);
        let stderr = refusal(command);
        let expected = format!(
            "the state dir {} lies under {} ({found})",
            state.display(),
            dir.display()
        );
        assert!(stderr.contains(&expected), "{stderr}");
        assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
    }
    // Under a link another user owns: they could point it elsewhere.
    let link = top.path().join("link");
    std::os::unix::fs::symlink(&sticky, &link).unwrap();
    nix::unistd::fchownat(
        nix::fcntl::AT_FDCWD,
        &link,
        Some(65534.into()),
        Some(65534.into()),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .unwrap();
    let state = link.join("state");
    let stderr = refusal(Daemon::command(
        BIN,
        &["--state-dir", state.to_str().unwrap()],
        &[],
    ));
    assert!(
        stderr.contains(&format!("lies under {}", link.display())),
        "{stderr}"
    );
    // Sticky and root's, as /tmp: others cannot rename what is ours there.
    let daemon = daemon_on(&sticky.join("state"));
    let (client, _) = daemon.session().await;
    client.close().await;
}

/// The file name of a kept session: its id's SHA-256, in hex.
fn digest_name(id: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, id.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}.json")
}

/// Item 4: session ids are credentials; a listing of the state dir must not show them. A
/// directory of format 1 (files named by the id) is still adopted, and renamed.
#[tokio::test]
async fn session_files_are_named_by_digest_and_format_1_is_taken_over() {
    let state = private_tempdir();
    let sessions = state.path().join("sessions");
    let daemon = daemon_on(state.path());
    let (client, session) = victim(&daemon).await;
    assert_eq!(sb::names_in(&sessions), [digest_name(&session)]);
    assert_eq!(
        std::fs::read_to_string(state.path().join("version")).unwrap(),
        "exec-server state 2\n"
    );
    drop(client);
    crash(daemon);

    // As the previous format left it.
    std::fs::rename(
        sessions.join(digest_name(&session)),
        sessions.join(format!("{session}.json")),
    )
    .unwrap();
    std::fs::write(state.path().join("version"), "exec-server state 1\n").unwrap();
    let daemon = daemon_on(state.path());
    let client = daemon.resume(&session).await;
    let read = common::read_until(&client, "victim", 0, |bytes| !bytes.is_empty()).await;
    assert_eq!(read.bytes, b"victim-output\n");
    assert_eq!(sb::names_in(&sessions), [digest_name(&session)]);
    assert_eq!(
        std::fs::read_to_string(state.path().join("version")).unwrap(),
        "exec-server state 2\n"
    );
    client
        .call("process/terminate", json!({"processId": "victim"}))
        .await;
}

/// The one kept process directory of a state dir.
/// A daemon's state dir, as it left it when it crashed with [`victim`]'s process running: the
/// dir, the victim's session and its process directory.
async fn crashed_with_victim() -> (tempfile::TempDir, String, PathBuf) {
    let state = private_tempdir();
    let daemon = daemon_on(state.path());
    let (client, session) = victim(&daemon).await;
    drop(client);
    crash(daemon);
    let dir = process_dir(state.path());
    (state, session, dir)
}

fn process_dir(state: &Path) -> PathBuf {
    let processes = state.join("processes");
    let names: Vec<String> = sb::names_in(&processes)
        .into_iter()
        .filter(|name| !name.starts_with('.'))
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    processes.join(&names[0])
}

/// Starts a daemon on `state` and waits (bounded) for its banner; None when it never came.
fn successor_banner(state: &Path) -> Option<String> {
    let mut child = Daemon::command(BIN, &[], &[(STATE_DIR_VAR, state.to_str().unwrap())])
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (sender, banner) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
        let _ = sender.send(line);
    });
    let line = banner.recv_timeout(TIMEOUT).ok();
    let _ = child.kill();
    let _ = child.wait();
    line.filter(|line| !line.is_empty())
}

/// Item 5: a successor replays the journal; a line whose span lies far beyond its file (10^15
/// bytes) must not make it allocate that much, and a FIFO where the last reports belong must
/// not keep it from serving.
#[tokio::test]
async fn a_successor_does_not_trust_the_journal() {
    let (state, session, dir) = crashed_with_victim().await;
    let forged = json!({"log": {"output": {"seq": 2, "stream": "stdout",
        "span": {"offset": 0, "len": 1_000_000_000_000_000u64}}}});
    let mut journal = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("journal"))
        .unwrap();
    std::io::Write::write_all(&mut journal, format!("{forged}\n").as_bytes()).unwrap();
    let daemon = daemon_on(state.path());
    let client = daemon.resume(&session).await;
    let read = common::read_until(&client, "victim", 0, |bytes| !bytes.is_empty()).await;
    assert_eq!(read.bytes, b"victim-output\n");
    // Past the real output: the forged span is not replayed.
    let params = json!({"processId": "victim", "afterSeq": read.after, "waitMs": 200});
    let rest = client.call("process/read", params).await;
    assert_eq!(rest["chunks"], json!([]), "{rest}");
    // Its tree ends while no daemon runs: the supervisor is killed too, so nothing writes
    // its last reports, and a FIFO waits at their place.
    let meta: Value =
        serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap();
    drop(client);
    crash(daemon);
    for pid in [&meta["supervisorPid"], &meta["pid"]] {
        unsafe { libc::kill(pid.as_i64().unwrap() as i32, libc::SIGKILL) };
    }
    nix::unistd::mkfifo(
        &dir.join("exit.reports"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let banner = successor_banner(state.path());
    assert!(banner.is_some(), "the successor never served");
    let daemon = daemon_on(state.path());
    let client = daemon.resume(&session).await;
    let (bytes, _) = read_all(&client, "victim").await;
    assert_eq!(bytes, b"victim-output\n");
}

/// Item 11: the daemon (root) appends to the audit log path; a file another user owns there
/// is refused, and a symbolic link swapped in before a SIGHUP reopen is not followed.
#[tokio::test]
async fn the_audit_log_path_is_held_to_the_state_dirs_rules() {
    // Not sticky: there the kernel's own protected_regular and protected_symlinks would step in.
    let dir = private_tempdir();
    let log = dir.path().join("audit.log");
    std::fs::write(&log, "").unwrap();
    std::os::unix::fs::chown(&log, Some(65534), Some(65534)).unwrap();
    let stderr = refusal(Daemon::command(
        BIN,
        &["--audit-log", log.to_str().unwrap()],
        &[],
    ));
    assert!(
        stderr.contains("belong to the daemon's uid 0") && stderr.contains("owner uid 65534"),
        "{stderr}"
    );
    std::fs::remove_file(&log).unwrap();
    std::fs::write(&log, "").unwrap();
    mode(&log, 0o622);
    let stderr = refusal(Daemon::command(
        BIN,
        &["--audit-log", log.to_str().unwrap()],
        &[],
    ));
    assert!(stderr.contains("mode 622"), "{stderr}");
    std::fs::remove_file(&log).unwrap();

    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let daemon = Daemon::start_with(&["--audit-log", log.to_str().unwrap()], &[]);
    let (client, _) = daemon.session().await;
    std::fs::rename(&log, dir.path().join("audit.log.1")).unwrap();
    std::os::unix::fs::symlink(&victim, &log).unwrap();
    daemon.send_signal(libc::SIGHUP);
    tokio::time::sleep(Duration::from_millis(300)).await;
    client
        .call("process/start", start_params("after", &["true"]))
        .await;
    client.events_until_closed("after").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    // The old file kept the records.
    let kept = std::fs::read_to_string(dir.path().join("audit.log.1")).unwrap();
    assert!(kept.contains("\"after\""), "{kept}");
}

/// Keeps the write grants of sandboxes off the state dir however they are spelled: the dir
/// itself, a grant inside it, and (special `root`) everything.
#[tokio::test]
async fn write_grants_on_the_state_dir_or_inside_it_are_refused() {
    let top = private_tempdir();
    let state = top.path().join("state");
    let daemon = daemon_on(&state);
    let (client, _) = daemon.session().await;
    for grant in [state.clone(), state.join("sessions")] {
        let sandbox = sb::restricted(
            top.path(),
            vec![
                entry(special("root"), "read"),
                entry(sb::path(&grant), "write"),
            ],
            "restricted",
        );
        let params = sb::params("w", &["true"], top.path(), sandbox);
        let error = client.request("process/start", params).await.unwrap_err();
        assert_eq!(error["code"], -32602, "{error}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("the daemon's state directory"),
            "{error}"
        );
    }
}

/// An orphaned supervisor waits on an abstract socket, which anyone on the host may bind once
/// that supervisor is gone: an impostor there, here of another user and of the daemon's own,
/// hands the successor a forged tree (its own pipe as the victim's stdout), which the successor
/// must not take (it takes only the supervisor its meta names, of its own user).
async fn an_impostor_on_the_supervisors_socket_takes_nothing_over(uid: u32) {
    let (state, session, dir) = crashed_with_victim().await;
    let meta: Value =
        serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap();
    for pid in [&meta["supervisorPid"], &meta["pid"]] {
        unsafe { libc::kill(pid.as_i64().unwrap() as i32, libc::SIGKILL) };
    }
    let name = dir.file_name().unwrap().to_str().unwrap();
    let impostor = format!(
        "import json, os, socket, struct, sys, time\n\
         s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
         s.bind('\\0exec-server/supervisor/{name}')\n\
         os.setgid({uid}); os.setuid({uid})\n\
         s.listen(8); print('ready', flush=True)\n\
         c, _ = s.accept()\n\
         r, w = os.pipe(); os.write(w, b'impostor-output\\n'); os.close(w)\n\
         frame = json.dumps({{'outputs': [True, False], 'stdin': False}}).encode()\n\
         socket.send_fds(c, [b'a'], [r]); c.sendall(struct.pack('<I', len(frame)) + frame)\n\
         print('sent', flush=True); time.sleep(10)\n"
    );
    let mut child = Command::new("python3")
        .args(["-c", &impostor])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let daemon = daemon_on(state.path());
    let client = daemon.resume(&session).await;
    let (bytes, _) = read_all(&client, "victim").await;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(String::from_utf8_lossy(&bytes), "victim-output\n");
}

#[tokio::test]
async fn an_impostor_of_another_user_on_the_supervisors_socket_takes_nothing_over() {
    an_impostor_on_the_supervisors_socket_takes_nothing_over(65534).await;
}

#[tokio::test]
async fn an_impostor_of_the_daemons_user_on_the_supervisors_socket_takes_nothing_over() {
    an_impostor_on_the_supervisors_socket_takes_nothing_over(0).await;
}
