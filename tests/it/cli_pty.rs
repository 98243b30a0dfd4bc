//! The CLI on a real pseudo-terminal, where a terminal matters: Ctrl-C (once: SIGINT to the
//! command; twice: its tree ends), `~.` to detach from `attach`, and a resize followed by the
//! remote terminal.

use crate::cli::{assert_nothing_left, cli, text};
use crate::common::{self, Daemon};
use crate::process_tree::{sleeps, tags};
use nix::pty::{openpty, Winsize};
use std::io::{Read as _, Write as _};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The CLI as a terminal's session leader: Ctrl-C typed on the terminal signals it.
struct Terminal {
    master: std::fs::File,
    child: Child,
    screen: Arc<Mutex<Vec<u8>>>,
}

impl Terminal {
    fn spawn(daemon: &Daemon, args: &[&str]) -> Self {
        let size = Winsize {
            ws_row: 24,
            ws_col: 80,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = openpty(Some(&size), None).unwrap();
        let slave: OwnedFd = pty.slave;
        let mut command = Command::new(env!("CARGO_BIN_EXE_exec-server"));
        command
            .args(args)
            .env("EXEC_SERVER_URL", &daemon.url)
            .env("TERM", "xterm")
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave);
        // SAFETY: between fork and exec only async-signal-safe calls (setsid, ioctl) run, on
        // the child's own descriptors.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        let master = std::fs::File::from(pty.master);
        let screen = Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().unwrap();
        let sink = screen.clone();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            // EIO once the last slave descriptor is closed.
            while let Ok(n @ 1..) = reader.read(&mut buffer) {
                sink.lock().unwrap().extend_from_slice(&buffer[..n]);
            }
        });
        Self {
            master,
            child,
            screen,
        }
    }

    fn type_in(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
    }

    fn screen(&self) -> String {
        text(&self.screen.lock().unwrap())
    }

    fn wait_for_screen(&self, wanted: &str) {
        let deadline = Instant::now() + common::TIMEOUT;
        while !self.screen().contains(wanted) {
            assert!(
                Instant::now() < deadline,
                "no {wanted:?} in {:?}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn resize(&self, rows: u16, cols: u16) {
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads a winsize through a valid pointer.
        let rc = unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &size) };
        assert_eq!(rc, 0);
    }

    fn exit_code(&mut self) -> Option<i32> {
        let deadline = Instant::now() + common::TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                use std::os::unix::process::ExitStatusExt as _;
                assert_eq!(status.signal(), None, "{}", self.screen());
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "still running: {}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + common::TIMEOUT;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One Ctrl-C interrupts the command (it dies of SIGINT: 130), and nothing is left behind.
#[test]
fn ctrl_c_interrupts_the_command_and_leaves_nothing() {
    let daemon = Daemon::start();
    let [tag, _, _] = tags(173);
    // Through sh: the CLI's own command line must not end with `sleep TAG`.
    let script = format!("exec sleep {tag}");
    let mut terminal = Terminal::spawn(&daemon, &["run", "--", "sh", "-c", &script]);
    wait_until("the sleep", || sleeps(&tag).len() == 1);
    terminal.type_in(b"\x03");
    assert_eq!(terminal.exit_code(), Some(130), "{}", terminal.screen());
    assert!(sleeps(&tag).is_empty());
    assert_nothing_left(&daemon);
}

/// A command that ignores SIGINT: the second Ctrl-C ends its whole tree, still 130.
#[test]
fn a_second_ctrl_c_ends_the_tree() {
    let daemon = Daemon::start();
    let [child, parent, _] = tags(174);
    let script = format!("trap '' INT; sleep {child} & sleep {parent}");
    let mut terminal = Terminal::spawn(&daemon, &["run", "--", "sh", "-c", &script]);
    wait_until("the sleeps", || {
        sleeps(&child).len() + sleeps(&parent).len() == 2
    });
    terminal.type_in(b"\x03");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(sleeps(&parent).len(), 1, "SIGINT is ignored");
    terminal.type_in(b"\x03");
    assert_eq!(terminal.exit_code(), Some(130), "{}", terminal.screen());
    assert!(sleeps(&child).is_empty() && sleeps(&parent).is_empty());
    assert_nothing_left(&daemon);
}

/// With --tty the local terminal is raw: its size changes reach the remote terminal, and
/// Ctrl-C is a key the remote terminal turns into SIGINT.
#[test]
fn tty_follows_resizes_and_passes_ctrl_c() {
    let daemon = Daemon::start();
    let script = "while :; do stty size; sleep 0.1; done";
    let mut terminal = Terminal::spawn(&daemon, &["run", "--tty", "--", "sh", "-c", script]);
    terminal.wait_for_screen("24 80");
    terminal.resize(40, 100);
    terminal.wait_for_screen("40 100");
    terminal.type_in(b"\x03");
    assert_eq!(terminal.exit_code(), Some(130), "{}", terminal.screen());
    assert_nothing_left(&daemon);
}

/// `attach` to a detached terminal program: keys reach it, `~.` detaches and leaves it
/// running, and a later attach replays what it printed.
#[test]
fn attach_forwards_keys_and_detaches_with_tilde_dot() {
    let daemon = Daemon::start();
    let output = cli(&daemon, &["run", "--detach", "--tty", "--", "cat"], b"");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let printed = text(&output.stdout);
    let ids: Vec<&str> = printed.split_whitespace().collect();
    let mut terminal = Terminal::spawn(&daemon, &["attach", ids[0], ids[1]]);
    terminal.type_in(b"hello\r");
    terminal.wait_for_screen("hello");
    terminal.type_in(b"~.");
    assert_eq!(terminal.exit_code(), Some(0), "{}", terminal.screen());
    assert!(
        terminal.screen().contains("detached"),
        "{}",
        terminal.screen()
    );

    let ps = cli(&daemon, &["ps", "--session", ids[0]], b"");
    assert!(text(&ps.stdout).contains("running (tty)"), "{ps:?}");
    let mut again = Terminal::spawn(&daemon, &["attach", ids[0], ids[1]]);
    again.wait_for_screen("hello");
    // EOF on the remote terminal ends `cat`.
    again.type_in(b"\x04");
    assert_eq!(again.exit_code(), Some(0), "{}", again.screen());
}
