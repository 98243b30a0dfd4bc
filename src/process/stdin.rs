//! A child's stdin: writes are queued to a writer task, so `process/write` never blocks on a
//! full pipe, and every accepted `writeId` is recorded in the same critical section that queues
//! its bytes, so a retried write can never be written twice.

use super::ProcessError;
use bytes::Bytes;
use exec_server_protocol::process::{TerminalSize, WriteStatus};
use std::collections::{HashSet, VecDeque};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;

/// Accepted write ids remembered per process, oldest forgotten first (as the reference).
const REMEMBERED_WRITE_IDS: usize = 4096;

/// Bytes queued for a child that is not reading before further writes are refused.
const MAX_QUEUED_BYTES: usize = 16 * 1024 * 1024;

/// End of transmission: what "close stdin" means on a terminal.
const TERMINAL_EOF: u8 = 0x04;

pub struct Stdin {
    state: Mutex<StdinState>,
    queued: Arc<AtomicUsize>,
    failed: Arc<AtomicBool>,
}

struct StdinState {
    /// None when the child was started without stdin, or stdin was closed.
    sender: Option<mpsc::UnboundedSender<Bytes>>,
    accepted: HashSet<String>,
    accepted_order: VecDeque<String>,
}

impl Stdin {
    pub fn pipe(stdin: Option<tokio::process::ChildStdin>) -> Self {
        let this = Self::new();
        if let Some(stdin) = stdin {
            this.spawn_writer(stdin);
        }
        this
    }

    pub fn pty(writer: pty_process::OwnedWritePty, master: OwnedFd) -> (Self, PtyResizer) {
        let this = Self::new();
        this.spawn_writer(writer);
        (this, PtyResizer { master })
    }

    fn new() -> Self {
        Self {
            state: Mutex::new(StdinState {
                sender: None,
                accepted: HashSet::new(),
                accepted_order: VecDeque::new(),
            }),
            queued: Arc::new(AtomicUsize::new(0)),
            failed: Arc::new(AtomicBool::new(false)),
        }
    }

    fn spawn_writer(&self, mut sink: impl AsyncWrite + Unpin + Send + 'static) {
        let (sender, mut receiver) = mpsc::unbounded_channel::<Bytes>();
        self.state.lock().unwrap().sender = Some(sender);
        let (queued, failed) = (self.queued.clone(), self.failed.clone());
        tokio::spawn(async move {
            while let Some(data) = receiver.recv().await {
                let result = async {
                    sink.write_all(&data).await?;
                    sink.flush().await
                }
                .await;
                queued.fetch_sub(data.len(), Ordering::Relaxed);
                if result.is_err() {
                    failed.store(true, Ordering::Relaxed);
                    break;
                }
            }
            // Dropping the sink closes a pipe: the child reads EOF.
        });
    }

    pub fn write(&self, write_id: &str, data: Bytes) -> Result<WriteStatus, ProcessError> {
        let mut state = self.state.lock().unwrap();
        if state.accepted.contains(write_id) {
            return Ok(WriteStatus::Accepted);
        }
        let Some(sender) = &state.sender else {
            return Ok(WriteStatus::StdinClosed);
        };
        if self.failed.load(Ordering::Relaxed) {
            return Err(ProcessError::StdinFailed);
        }
        let queued = self.queued.load(Ordering::Relaxed);
        if queued + data.len() > MAX_QUEUED_BYTES {
            return Err(ProcessError::StdinFull { queued });
        }
        self.queued.fetch_add(data.len(), Ordering::Relaxed);
        if sender.send(data).is_err() {
            return Err(ProcessError::StdinFailed);
        }
        state.accepted.insert(write_id.to_owned());
        state.accepted_order.push_back(write_id.to_owned());
        if state.accepted_order.len() > REMEMBERED_WRITE_IDS {
            let oldest = state.accepted_order.pop_front().expect("over the limit");
            state.accepted.remove(&oldest);
        }
        Ok(WriteStatus::Accepted)
    }

    /// The child may still get input: stdin was neither closed nor broken.
    pub fn is_open(&self) -> bool {
        self.state.lock().unwrap().sender.is_some() && !self.failed.load(Ordering::Relaxed)
    }

    /// Pipes: EOF after the queued bytes. Terminals: an EOF character, as a typed Ctrl-D.
    pub fn close(&self, tty: bool) -> Result<(), ProcessError> {
        let mut state = self.state.lock().unwrap();
        if let Some(sender) = state.sender.take() {
            if tty {
                let _ = sender.send(Bytes::from_static(&[TERMINAL_EOF]));
            }
        }
        Ok(())
    }
}

/// Resizes a PTY through its own duplicate of the master, so it never races the writer.
pub struct PtyResizer {
    master: OwnedFd,
}

impl PtyResizer {
    pub fn resize(&self, size: TerminalSize) -> Result<(), ProcessError> {
        if size.rows == 0 || size.cols == 0 {
            return Err(ProcessError::EmptySize);
        }
        let winsize = libc::winsize {
            ws_row: size.rows,
            ws_col: size.cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads a winsize from a valid pointer; the fd is owned by us.
        let rc = unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &winsize) };
        if rc != 0 {
            return Err(ProcessError::Resize(std::io::Error::last_os_error()));
        }
        Ok(())
    }
}
