//! Following a remote process here, for `run` and `attach`: its output to stdout and stderr,
//! stdin and local signals to it, and the exit code a shell would give.

use super::{terminal, FAILURE};
use exec_server_client::protocol::process::{ExitReason, OutputStream, ProcessSignal};
use exec_server_client::{Process, ProcessEvent, ProcessHandle};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use std::os::fd::{AsFd as _, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::io::AsyncReadExt as _;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::oneshot;

/// `timeout(1)`'s code for a command it ended.
const TIMED_OUT: u8 = 124;
/// A shell's code for a command ended by Ctrl-C (128 + SIGINT).
const INTERRUPTED: u8 = 130;

/// How to follow.
pub(super) struct Follow {
    /// Listening since before the start: a Ctrl-C as soon as the command runs is its.
    pub(super) signals: Signals,
    /// The process has a remote terminal: raw mode here, and size changes go there.
    pub(super) tty: bool,
    /// Local EOF closes the remote stdin (`run`); `attach` leaves it open for the next one.
    pub(super) forward_eof: bool,
    /// `~.` at the start of a line detaches (`attach`, when stdin is a terminal).
    pub(super) escape: bool,
}

/// How following ended.
pub(super) enum Ended {
    /// The process ended: the code to exit with.
    Exited(u8),
    /// `~.`: the process goes on.
    Detached,
}

pub(super) async fn follow(process: &mut Process, how: Follow) -> anyhow::Result<Ended> {
    let raw_mode = if how.tty {
        terminal::RawMode::enable()?
    } else {
        None
    };
    let interrupted = Arc::new(AtomicBool::new(false));
    let (detach, detached) = oneshot::channel();
    let forwarders = [
        tokio::spawn(forward_stdin(
            process.handle(),
            how.forward_eof,
            how.escape,
            detach,
        ))
        .abort_handle(),
        tokio::spawn(
            how.signals
                .forward(process.handle(), how.tty, interrupted.clone()),
        )
        .abort_handle(),
    ];
    let outcome = tokio::select! {
        code = print_events(process, &interrupted) => code.map(Ended::Exited),
        Ok(()) = detached => Ok(Ended::Detached),
    };
    for task in forwarders {
        task.abort();
    }
    drop(raw_mode);
    outcome
}

async fn print_events(process: &mut Process, interrupted: &AtomicBool) -> anyhow::Result<u8> {
    let (stdout, stderr) = (std::io::stdout(), std::io::stderr());
    let mut exit = None;
    let mut lost = false;
    while let Some(event) = process.next_event().await {
        match event {
            ProcessEvent::Output { stream, data, .. } => {
                let sink = match stream {
                    OutputStream::Stderr => stderr.as_fd(),
                    OutputStream::Stdout | OutputStream::Pty => stdout.as_fd(),
                };
                // A closed local stdout (e.g. `| head`) ends the command, as a pipe would.
                if write_out(sink, &data).is_err() {
                    process.terminate().await.ok();
                    return Ok(FAILURE);
                }
            }
            ProcessEvent::Exited {
                exit_code, reason, ..
            } => exit = Some((exit_code, reason)),
            ProcessEvent::Closed { .. } => {}
            // A terminal user sees the prompt; stdin fed by a program may never answer it.
            ProcessEvent::InputWait { .. } => {
                if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                    eprintln!("exec-server: the command is waiting for input");
                }
            }
            ProcessEvent::Gap { from_seq, to_seq } => {
                lost = true;
                eprintln!("exec-server: output events {from_seq}..={to_seq} were lost (no longer retained on the daemon)");
            }
            ProcessEvent::Failed { message } => {
                eprintln!("exec-server: {message}");
                return Ok(FAILURE);
            }
        }
    }
    let Some((code, reason)) = exit else {
        return Ok(FAILURE);
    };
    Ok(exit_code(
        code,
        reason,
        interrupted.load(Ordering::Relaxed),
        lost,
    ))
}

/// Writes `data` whole to a local standard stream from this thread, unbuffered: through
/// tokio's stdout every write was copied and handed to a blocking thread, and std's line
/// buffering scanned it for newlines (a fifth of the command's CPU on a large stream). The
/// connection's tasks go on on the runtime's workers meanwhile, as before a write finished.
fn write_out(fd: BorrowedFd<'_>, mut data: &[u8]) -> std::io::Result<()> {
    use nix::errno::Errno;
    tokio::task::block_in_place(|| {
        while !data.is_empty() {
            match nix::unistd::write(fd, data) {
                Ok(written) => data = &data[written..],
                Err(Errno::EINTR) => {}
                // A stream another program made non-blocking: wait until it takes more.
                Err(Errno::EAGAIN) => {
                    let mut ready = [PollFd::new(fd, PollFlags::POLLOUT)];
                    match nix::poll::poll(&mut ready, PollTimeout::NONE) {
                        Ok(_) | Err(Errno::EINTR) => {}
                        Err(err) => return Err(err.into()),
                    }
                }
                Err(err) => return Err(err.into()),
            }
        }
        Ok(())
    })
}

/// The shell's convention: the process's own code, 128+N for a signal (the daemon reports it
/// so), 124 for a timeout, 130 for a tree ended after Ctrl-C here; 255 when output was lost.
fn exit_code(code: i32, reason: Option<ExitReason>, interrupted: bool, lost: bool) -> u8 {
    match reason {
        Some(ExitReason::Timeout) => return TIMED_OUT,
        Some(ExitReason::Terminated) if interrupted => return INTERRUPTED,
        Some(ExitReason::MemoryLimit) => eprintln!("exec-server: the memory limit was reached"),
        _ => {}
    }
    if lost {
        eprintln!("exec-server: some output was lost; exiting with {FAILURE}");
        return FAILURE;
    }
    u8::try_from(code).unwrap_or(FAILURE)
}

async fn forward_stdin(
    process: ProcessHandle,
    forward_eof: bool,
    escape: bool,
    detach: oneshot::Sender<()>,
) {
    let mut stdin = tokio::io::stdin();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut filter = Escape::default();
    let mut out = Vec::new();
    loop {
        match stdin.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                out.clear();
                let input = &buffer[..n];
                let detaching = match escape {
                    true => filter.filter(input, &mut out),
                    false => {
                        out.extend_from_slice(input);
                        false
                    }
                };
                if !out.is_empty() && process.write(&out).await.is_err() {
                    return;
                }
                if detaching {
                    let _ = detach.send(());
                    return;
                }
            }
        }
    }
    if forward_eof {
        let _ = process.close_stdin().await;
    }
}

/// ssh's escape: `~.` at the start of a line detaches, `~~` sends one `~`; any other `~` is
/// passed on with what follows it.
#[derive(Debug)]
struct Escape {
    line_start: bool,
    tilde: bool,
}

impl Default for Escape {
    fn default() -> Self {
        Self {
            line_start: true,
            tilde: false,
        }
    }
}

impl Escape {
    /// Appends to `out` what goes to the process; true once `~.` was typed (what follows it
    /// is dropped).
    fn filter(&mut self, input: &[u8], out: &mut Vec<u8>) -> bool {
        for &byte in input {
            if self.tilde {
                self.tilde = false;
                match byte {
                    b'.' => return true,
                    b'~' => {
                        out.push(b'~');
                        self.line_start = false;
                        continue;
                    }
                    _ => out.push(b'~'),
                }
            } else if self.line_start && byte == b'~' {
                self.tilde = true;
                continue;
            }
            out.push(byte);
            self.line_start = matches!(byte, b'\r' | b'\n');
        }
        false
    }
}

/// The local signals that go to the remote process.
pub(super) struct Signals {
    winch: Signal,
    forwarded: Vec<(Signal, ProcessSignal)>,
}

impl Signals {
    /// Replaces their default action (which would end this process) from now on.
    pub(super) fn listen() -> std::io::Result<Self> {
        let mut forwarded = Vec::new();
        for (kind, remote) in [
            (SignalKind::interrupt(), ProcessSignal::Interrupt),
            (SignalKind::terminate(), ProcessSignal::Terminate),
            (SignalKind::hangup(), ProcessSignal::Hangup),
            (SignalKind::quit(), ProcessSignal::Quit),
        ] {
            forwarded.push((signal(kind)?, remote));
        }
        Ok(Self {
            winch: signal(SignalKind::window_change())?,
            forwarded,
        })
    }

    /// Sends each to the process; with a terminal, window size changes too. A second SIGINT
    /// ends the whole tree (a first may be caught or ignored by the command).
    async fn forward(mut self, process: ProcessHandle, tty: bool, interrupted: Arc<AtomicBool>) {
        loop {
            let received =
                futures::future::select_all(self.forwarded.iter_mut().map(|(stream, remote)| {
                    Box::pin(async move { stream.recv().await.map(|_| *remote) })
                }));
            tokio::select! {
                _ = self.winch.recv() => {
                    if let (true, Some(size)) = (tty, terminal::size()) {
                        let _ = process.resize(size).await;
                    }
                }
                (Some(remote), _, _) = received => {
                    let again = remote == ProcessSignal::Interrupt
                        && interrupted.swap(true, Ordering::Relaxed);
                    if again {
                        let _ = process.terminate().await;
                    } else {
                        let _ = process.signal(remote).await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(chunks: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut escape = Escape::default();
        let mut out = Vec::new();
        for chunk in chunks {
            if escape.filter(chunk, &mut out) {
                return (out, true);
            }
        }
        (out, false)
    }

    #[test]
    fn tilde_dot_detaches_only_at_the_start_of_a_line() {
        assert_eq!(typed(&[b"~."]), (vec![], true));
        assert_eq!(typed(&[b"ls\r", b"~", b".rest"]), (b"ls\r".to_vec(), true));
        assert_eq!(typed(&[b"a~.b"]), (b"a~.b".to_vec(), false));
        assert_eq!(typed(&[b"~~.\n"]), (b"~.\n".to_vec(), false));
        assert_eq!(typed(&[b"~x"]), (b"~x".to_vec(), false));
    }
}
