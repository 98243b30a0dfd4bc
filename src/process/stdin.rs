//! A child's stdin: writes are queued to a writer task, so `process/write` never blocks on a
//! full pipe, and every accepted `writeId` is recorded in the same critical section that queues
//! its bytes, so a retried write can never be written twice.

use super::io::Input;
use super::store::{Entry, Store};
use super::ProcessError;
use bytes::Bytes;
use exec_server_protocol::base64_bytes::Base64Bytes;
use exec_server_protocol::process::{TerminalSize, WriteStatus};
use std::collections::{HashSet, VecDeque};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Accepted write ids remembered per process, oldest forgotten first (as the reference).
const REMEMBERED_WRITE_IDS: usize = 4096;

/// Bytes queued for a child that is not reading before further writes are refused.
const MAX_QUEUED_BYTES: usize = 16 * 1024 * 1024;

/// End of transmission: what "close stdin" means on a terminal.
const TERMINAL_EOF: u8 = 0x04;

pub(super) struct Stdin {
    state: Mutex<StdinState>,
    queued: Arc<AtomicUsize>,
    failed: Arc<AtomicBool>,
    store: Arc<Store>,
}

struct StdinState {
    /// None when the child was started without stdin, or stdin was closed.
    sender: Option<mpsc::UnboundedSender<Input>>,
    accepted: HashSet<String>,
    accepted_order: VecDeque<String>,
}

impl Stdin {
    /// The stdin `fd` (None: the child has none, or it was closed), its writes journaled in
    /// `store`. From a predecessor daemon: `accepted`, the ids of the writes it accepted, and
    /// `pending`, those of them it had not begun to write (written first).
    pub(super) fn new(
        fd: Option<OwnedFd>,
        store: Arc<Store>,
        accepted: Vec<String>,
        pending: Vec<(String, Bytes)>,
    ) -> Self {
        let this = Self {
            state: Mutex::new(StdinState {
                sender: None,
                accepted: HashSet::new(),
                accepted_order: VecDeque::new(),
            }),
            queued: Arc::new(AtomicUsize::new(0)),
            failed: Arc::new(AtomicBool::new(false)),
            store: store.clone(),
        };
        let mut state = this.state.lock().unwrap();
        for id in accepted {
            state.remember(id);
        }
        if let Some(fd) = fd {
            let (sender, receiver) = mpsc::unbounded_channel();
            for (id, data) in pending {
                this.queued.fetch_add(data.len(), Ordering::Relaxed);
                let _ = sender.send((Some(id), data));
            }
            state.sender = Some(sender);
            let (queued, failed) = (this.queued.clone(), this.failed.clone());
            super::io::spawn_writer(fd, receiver, store, queued, failed);
        }
        drop(state);
        this
    }

    pub(super) fn write(&self, write_id: &str, data: Bytes) -> Result<WriteStatus, ProcessError> {
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
        // Kept before it is accepted: a successor writes what this daemon accepted but had
        // not begun to write when it died.
        if self.store.keeps() {
            self.store.journal(&Entry::Accepted {
                id: write_id.to_owned(),
                data: Base64Bytes(data.to_vec()),
            });
        }
        if sender.send((Some(write_id.to_owned()), data)).is_err() {
            return Err(ProcessError::StdinFailed);
        }
        state.remember(write_id.to_owned());
        Ok(WriteStatus::Accepted)
    }

    /// The child may still get input: stdin was neither closed nor broken.
    pub(super) fn is_open(&self) -> bool {
        self.state.lock().unwrap().sender.is_some() && !self.failed.load(Ordering::Relaxed)
    }

    /// Pipes: EOF after the queued bytes. Terminals: an EOF character, as a typed Ctrl-D.
    /// Returns whether it was open.
    pub(super) fn close(&self, tty: bool) -> bool {
        let mut state = self.state.lock().unwrap();
        let Some(sender) = state.sender.take() else {
            return false;
        };
        if tty {
            let _ = sender.send((None, Bytes::from_static(&[TERMINAL_EOF])));
        }
        true
    }
}

impl StdinState {
    fn remember(&mut self, id: String) {
        self.accepted.insert(id.clone());
        self.accepted_order.push_back(id);
        if self.accepted_order.len() > REMEMBERED_WRITE_IDS {
            let oldest = self.accepted_order.pop_front().expect("over the limit");
            self.accepted.remove(&oldest);
        }
    }
}

/// Resizes a PTY through its own duplicate of the master, so it never races the writer.
pub(super) struct PtyResizer {
    master: OwnedFd,
}

impl PtyResizer {
    pub(super) fn new(master: OwnedFd) -> Self {
        Self { master }
    }

    pub(super) fn resize(&self, size: TerminalSize) -> Result<(), ProcessError> {
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
