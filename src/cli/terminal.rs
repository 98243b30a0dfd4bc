//! The local terminal: raw mode while a remote PTY owns the keyboard, and its size.

use exec_server_client::protocol::process::TerminalSize;
use nix::sys::termios::{self, SetArg, Termios};
use std::io::IsTerminal as _;
use std::os::fd::AsFd as _;

/// Puts stdin in raw mode until dropped.
pub(super) struct RawMode {
    saved: Termios,
}

impl RawMode {
    /// None when stdin is not a terminal.
    pub(super) fn enable() -> anyhow::Result<Option<Self>> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Ok(None);
        }
        let saved = termios::tcgetattr(stdin.as_fd())?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw)?;
        Ok(Some(Self { saved }))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

/// The size of the terminal on stdin or stdout, if either is one.
pub(super) fn size() -> Option<TerminalSize> {
    [libc::STDIN_FILENO, libc::STDOUT_FILENO]
        .into_iter()
        .find_map(|fd| {
            let mut size = libc::winsize {
                ws_row: 0,
                ws_col: 0,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            // SAFETY: TIOCGWINSZ writes a winsize through a valid pointer.
            let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) };
            (rc == 0 && size.ws_row > 0 && size.ws_col > 0).then_some(TerminalSize {
                rows: size.ws_row,
                cols: size.ws_col,
            })
        })
}
