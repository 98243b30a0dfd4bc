//! Where a process's output and its log's records are kept: a file per output stream and a
//! journal, in the process's directory under the state directory, so that a successor daemon
//! adopts them after a restart (`super::adopt`); without a state directory, memory files and
//! no journal. Either way the output is not in the daemon's heap: its memory does not grow with
//! what it retains.
//!
//! A directory holds `meta.json` (what the process was started as, [`Meta`]), `journal` (one
//! JSON [`Entry`] per line, appended in seq order), `out.0` and `out.1` (stdout and stderr, or
//! the terminal in `out.0`) and, once an orphaned supervisor saw its tree end, `exit.reports`
//! (its last reports). Its supervisor waits for a successor on an abstract socket named after
//! the directory (`crate::ipc::message::supervisor_socket`), so that a launch binds no socket
//! file (an older daemon's directory has one, `sock`).

use super::output::{stream_index, Record, Span, Stored};
use super::pins::Pins;
use super::{AdoptError, KeepError};
use crate::state_dir::Dir;
use bytes::Bytes;
use exec_server_protocol::base64_bytes::Base64Bytes;
use exec_server_protocol::process::{OutputStream, SandboxType, StartParams};
use nix::fcntl::OFlag;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsRawFd as _;
use std::sync::Arc;

pub(crate) const META: &str = "meta.json";
pub(crate) const JOURNAL: &str = "journal";

/// What a kept process in `dir` was started as.
pub(crate) fn read_meta(dir: &Dir) -> Result<Meta, AdoptError> {
    let text = dir.read(META).map_err(AdoptError::ReadMeta)?;
    serde_json::from_slice(&text).map_err(AdoptError::BadMeta)
}

/// A process's directory in the state directory's `processes` (`parent`), held by
/// descriptor while the process runs; once it closed, opened again beneath `parent` for each
/// rare use, so that retained exited processes hold no descriptor.
pub(crate) struct Kept {
    pub parent: Dir,
    pub name: String,
    held: std::sync::Mutex<Option<Dir>>,
}

impl Kept {
    pub(crate) fn new(parent: Dir, name: String, dir: Dir) -> Self {
        Self {
            parent,
            name,
            held: std::sync::Mutex::new(Some(dir)),
        }
    }

    pub(crate) fn dir(&self) -> std::io::Result<Dir> {
        match &*self.held.lock().unwrap() {
            Some(dir) => Ok(dir.clone()),
            None => self.parent.open_dir(&self.name),
        }
    }
}

/// The output streams of a process, in the order of their files.
pub(crate) fn streams(tty: bool) -> &'static [OutputStream] {
    if tty {
        &[OutputStream::Pty]
    } else {
        &[OutputStream::Stdout, OutputStream::Stderr]
    }
}

/// What a process was started as, for its successor.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Meta {
    pub session: String,
    pub params: StartParams,
    pub sandbox_type: SandboxType,
    pub idempotent: bool,
    pub pid: i32,
    pub supervisor_pid: i32,
    /// Milliseconds since the epoch.
    pub started_at_ms: u64,
}

/// A journal line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Entry {
    Log(Record),
    /// A `process/write` accepted (journaled before its reply), with its bytes.
    Accepted {
        id: String,
        data: Base64Bytes,
    },
    /// A write about to reach the child's stdin (journaled before it does, so that a crash in
    /// between loses it rather than writing it twice).
    Wrote(String),
    StdinClosed,
}

pub(crate) struct Store {
    /// By [`stream_index`]; None once the process closed and nothing needs them open (see
    /// [`Store::closed`]).
    files: std::sync::RwLock<Option<Vec<Arc<File>>>>,
    /// None without a state directory, or once closed (then opened for each rare entry).
    journal: std::sync::Mutex<Option<File>>,
    /// Recycled into `spares` (or removed) with the store, once the process is done with.
    dir: Option<Kept>,
    /// Where its directory goes back to, when made of a spare.
    spares: Option<std::sync::Weak<Spares>>,
    /// Chunks being sent from their files, which evicted chunks are not freed from under.
    pins: std::sync::Mutex<Pins>,
}

impl Store {
    fn new(files: Vec<File>, journal: Option<File>, dir: Option<Kept>) -> Self {
        Self {
            files: std::sync::RwLock::new(Some(files.into_iter().map(Arc::new).collect())),
            journal: std::sync::Mutex::new(journal),
            dir,
            spares: None,
            pins: Default::default(),
        }
    }

    /// Memory files for `streams` streams, nothing journaled.
    pub(crate) fn in_memory(streams: usize) -> std::io::Result<Self> {
        let files = (0..streams)
            .map(|_| {
                nix::sys::memfd::memfd_create(
                    c"exec-server-output",
                    nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
                )
                .map(File::from)
                .map_err(std::io::Error::from)
            })
            .collect::<Result<_, _>>()?;
        Ok(Self::new(files, None, None))
    }

    /// An existing process directory, as a predecessor left it (its `meta` read already): its
    /// journal's entries (a last line cut short by a crash is left out) and the store,
    /// appending.
    pub(crate) fn open(kept: Kept, meta: &Meta) -> Result<(Self, Vec<Entry>), AdoptError> {
        let dir = kept.dir().map_err(AdoptError::Dir)?;
        let text = dir.read(JOURNAL).map_err(AdoptError::ReadJournal)?;
        let text = String::from_utf8(text).map_err(AdoptError::JournalNotText)?;
        let entries = text
            .lines()
            .map_while(|line| serde_json::from_str(line).ok())
            .collect();
        let files = (0..streams(meta.params.tty).len())
            .map(|index| {
                open_stream(&dir, index).map_err(|source| AdoptError::Open {
                    name: stream_name(index),
                    source,
                })
            })
            .collect::<Result<_, _>>()?;
        let journal = open_journal(&dir).map_err(|source| AdoptError::Open {
            name: JOURNAL.to_owned(),
            source,
        })?;
        Ok((Self::new(files, Some(journal), Some(kept)), entries))
    }

    /// The process's directory, when it is kept.
    pub(crate) fn dir(&self) -> Option<Dir> {
        self.dir.as_ref().and_then(|kept| kept.dir().ok())
    }

    /// The file of stream `index`, for its reader (while the process runs, it is open).
    pub(crate) fn file(&self, index: usize) -> Option<Arc<File>> {
        let files = self.files.read().unwrap();
        files.as_ref().and_then(|files| files.get(index).cloned())
    }

    /// Whether it is kept for a successor (journaled).
    pub(crate) fn keeps(&self) -> bool {
        self.dir.is_some()
    }

    /// Appends an entry, one `write` per line (the journal is O_APPEND), so that a crash
    /// leaves at most the last line cut short. Without a state directory, nothing.
    pub(crate) fn journal(&self, entry: &Entry) {
        let Some(kept) = &self.dir else {
            return;
        };
        let mut line = serde_json::to_vec(entry).expect("entries serialize");
        line.push(b'\n');
        let mut journal = self.journal.lock().unwrap();
        let written = match journal.as_mut() {
            Some(file) => file.write_all(&line),
            None => kept
                .dir()
                .and_then(|dir| open_journal(&dir))
                .and_then(|mut file| file.write_all(&line)),
        };
        if let Err(err) = written {
            tracing::warn!("cannot journal a process's output: {err}");
        }
    }

    /// Runs `with` on the file of `stream`: the open one, or opened again for the call once
    /// closed (None: it cannot be had).
    fn with_file<T>(&self, stream: OutputStream, with: impl FnOnce(&File) -> T) -> Option<T> {
        let index = stream_index(stream);
        if let Some(file) = self.file(index) {
            return Some(with(&file));
        }
        let file = open_stream(&self.dir()?, index).ok()?;
        Some(with(&file))
    }

    /// A chunk's bytes (empty if they cannot be read: never a panic), read into memory that
    /// is not zeroed first.
    pub(crate) fn load(&self, stream: OutputStream, span: Span) -> Bytes {
        let mut data = Vec::new();
        self.load_into(stream, span, &mut data);
        data.into()
    }

    /// Appends a chunk's bytes to `buffer` (nothing if they cannot be read: never a panic), so
    /// that a message is built around them without a second copy.
    pub(crate) fn load_into(&self, stream: OutputStream, span: Span, buffer: &mut Vec<u8>) {
        let start = buffer.len();
        let read = self.with_file(stream, |file| read_span(file, span, buffer));
        match read {
            Some(Ok(())) => {}
            Some(Err(err)) => {
                buffer.truncate(start);
                tracing::warn!("cannot read retained output back: {err}");
            }
            None => tracing::warn!("cannot read retained output back: its file is gone"),
        }
    }

    /// Frees the space of evicted chunks (their offsets stay valid: holes read as zeros), or
    /// once no writer sends from under them.
    pub(crate) fn release(&self, evicted: &[Stored]) {
        let free = self.pins.lock().unwrap().release(evicted);
        self.punch(&free);
    }

    fn punch(&self, chunks: &[Stored]) {
        for chunk in chunks {
            self.with_file(chunk.stream, |file| {
                // SAFETY: fallocate on a file we own; a failure only keeps the space.
                unsafe {
                    libc::fallocate(
                        file.as_raw_fd(),
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        chunk.span.offset as libc::off_t,
                        chunk.span.len as libc::off_t,
                    );
                }
            });
        }
    }

    /// `chunk`'s open file, with the chunk pinned in it until the [`Pin`] drops, for a writer
    /// that sends it from there; None once the process closed its files.
    pub(crate) fn pinned(self: &Arc<Self>, chunk: &Stored) -> Option<(Arc<File>, Pin)> {
        let file = self.file(stream_index(chunk.stream))?;
        self.pins.lock().unwrap().pin(chunk);
        let pin = Pin {
            store: self.clone(),
            chunk: *chunk,
        };
        Some((file, pin))
    }

    /// The process closed (nothing more is written): its descriptors are closed, so that a
    /// daemon retaining many exited processes holds none for them. Files in the state
    /// directory are opened again for a read; memory files cannot be, so they stay open while
    /// they hold `retained` output.
    pub(crate) fn closed(&self, retained: bool) {
        if self.dir.is_some() || !retained {
            *self.files.write().unwrap() = None;
        }
        *self.journal.lock().unwrap() = None;
        if let Some(kept) = &self.dir {
            *kept.held.lock().unwrap() = None;
        }
    }
}

/// A chunk pinned in its file (see [`Store::pinned`]).
pub(crate) struct Pin {
    store: Arc<Store>,
    chunk: Stored,
}

impl Drop for Pin {
    fn drop(&mut self) {
        let free = self.store.pins.lock().unwrap().unpin(&self.chunk);
        self.store.punch(&free);
    }
}

fn stream_name(index: usize) -> String {
    format!("out.{index}")
}

fn open_stream(dir: &Dir, index: usize) -> std::io::Result<File> {
    dir.open(&stream_name(index), OFlag::O_RDWR)
}

const APPEND: OFlag = OFlag::O_WRONLY.union(OFlag::O_APPEND);

fn open_journal(dir: &Dir) -> std::io::Result<File> {
    dir.open(JOURNAL, APPEND)
}

/// `span` of `file` appended to `buffer`, all of it or an error.
fn read_span(file: &File, span: Span, buffer: &mut Vec<u8>) -> std::io::Result<()> {
    let len = span.len as usize;
    if crate::os::pread::append_at(file, span.offset, len, buffer)? < len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Process directories made ahead of the starts that take them (files, journal), so that a
/// start only renames one and writes its meta: a few system calls instead of a dozen on every
/// launch's path. Made in `.spare-*` directories; a process's directory, once the process is
/// done with, goes back among them ([`Spares::recycle`], emptied when taken) rather than being
/// removed, and a successor takes over those its predecessor left, so that a daemon launching
/// steadily creates and removes no file at all (on ext4, creating inodes gets slower the more
/// were removed lately: issue #43).
pub(crate) struct Spares {
    dir: Dir,
    ready: std::sync::Mutex<Vec<Spare>>,
    /// Spare directories by name, emptied when taken: recycled ones, and those a predecessor
    /// left.
    recycled: std::sync::Mutex<Vec<String>>,
    /// A background task is making spares (one at a time: a burst of starts would otherwise
    /// set a blocking thread each on the same directory).
    refilling: std::sync::atomic::AtomicBool,
}

/// Spares kept ready.
const SPARES: usize = 2;

/// Directories of processes done with kept for later starts, at most (by name: they hold no
/// descriptor until taken); one done with beyond them is removed.
const RECYCLED: usize = 4096;

pub(crate) const SPARE_PREFIX: &str = ".spare-";

pub(crate) struct Spare {
    parent: Dir,
    name: String,
    dir: Dir,
    files: Vec<File>,
    meta: File,
    journal: File,
}

impl Spares {
    /// Spares in `dir` (the state directory's `processes`).
    pub(crate) fn new(dir: Dir) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            dir,
            ready: Default::default(),
            recycled: Default::default(),
            refilling: Default::default(),
        })
    }

    /// A spare: one ready, else a recycled directory emptied now, else one made now on a
    /// blocking thread (file creation never runs on the async workers, where it held up every
    /// other connection's requests during a burst of starts); others are made in the
    /// background while no recycled directory waits.
    pub(crate) async fn take(self: &std::sync::Arc<Self>) -> Result<Spare, KeepError> {
        let ready = self.ready.lock().unwrap().pop();
        if let Some(spare) = ready.or_else(|| self.reuse()) {
            self.refill();
            return Ok(spare);
        }
        self.refill();
        let spares = self.clone();
        tokio::task::spawn_blocking(move || spares.make())
            .await
            .map_err(KeepError::SpareTask)?
    }

    /// Makes spares in the background up to [`SPARES`], unless recycled directories wait.
    fn refill(self: &std::sync::Arc<Self>) {
        use std::sync::atomic::Ordering;
        if !self.recycled.lock().unwrap().is_empty() || self.refilling.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let spares = self.clone();
        tokio::task::spawn_blocking(move || {
            while spares.ready.lock().unwrap().len() < SPARES {
                match spares.make() {
                    Ok(spare) => spares.ready.lock().unwrap().push(spare),
                    Err(_) => break,
                }
            }
            spares.refilling.store(false, Ordering::Release);
        });
    }

    /// A recycled directory, emptied (opening and truncating files creates none); one that
    /// cannot be is removed.
    fn reuse(&self) -> Option<Spare> {
        loop {
            let name = self.recycled.lock().unwrap().pop()?;
            match self.emptied(&name) {
                Ok(spare) => return Some(spare),
                Err(err) => {
                    tracing::debug!("cannot reuse processes/{name}: {err}");
                    let _ = self.dir.remove_tree(&name);
                }
            }
        }
    }

    /// The spare directory `name`, its files emptied of an earlier process's.
    fn emptied(&self, name: &str) -> std::io::Result<Spare> {
        let dir = self.dir.open_dir(name)?;
        let empty = |file: &str, flags: OFlag| -> std::io::Result<File> {
            let file = dir.open(file, flags)?;
            if file.metadata()?.len() > 0 {
                file.set_len(0)?;
            }
            Ok(file)
        };
        let spare = Spare::of(&self.dir, name.to_owned(), &dir, empty)?;
        // Only an orphaned supervisor whose tree ended left one.
        match dir.remove_file(crate::ipc::message::EXIT_RECORD) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
            _ => {}
        }
        Ok(spare)
    }

    /// Keeps the spare directory `name` a predecessor left, for a later start (removed when
    /// there are enough).
    pub(crate) fn keep_left(&self, name: String) {
        let mut recycled = self.recycled.lock().unwrap();
        if recycled.len() < RECYCLED {
            recycled.push(name);
        } else if let Err(err) = self.dir.remove_tree(&name) {
            tracing::warn!("cannot remove processes/{name}: {err}");
        }
    }

    /// Keeps an unused spare for the next start.
    pub(crate) fn put_back(&self, spare: Spare) {
        self.ready.lock().unwrap().push(spare);
    }

    /// Keeps the directory of a process done with as a spare (renamed as one, emptied when
    /// taken) rather than removing it; false when there are enough, or it cannot be renamed
    /// (then it is to be removed).
    fn recycle(&self, kept: &Kept) -> bool {
        let mut recycled = self.recycled.lock().unwrap();
        if recycled.len() >= RECYCLED {
            return false;
        }
        let name = spare_name();
        match kept.parent.rename(&kept.name, &name) {
            Ok(()) => {
                recycled.push(name);
                true
            }
            Err(err) => {
                tracing::debug!("cannot recycle processes/{}: {err}", kept.name);
                false
            }
        }
    }

    fn make(&self) -> Result<Spare, KeepError> {
        let name = spare_name();
        let failed = |file: &str| {
            let path = format!("{name}/{file}");
            move |source| KeepError::MakeSpare { path, source }
        };
        let dir = self.dir.create_dir(&name).map_err(failed(""))?;
        let new = OFlag::O_CREAT | OFlag::O_EXCL;
        let open = |file: &str, flags: OFlag| dir.open(file, flags | new).map_err(failed(file));
        Spare::of(&self.dir, name.clone(), &dir, open)
    }
}

fn spare_name() -> String {
    format!("{SPARE_PREFIX}{}", uuid::Uuid::new_v4().simple())
}

impl Spare {
    /// The spare `name` in `parent`, `dir`, its files each had with `open`: the streams', the
    /// meta and the journal.
    fn of<E>(
        parent: &Dir,
        name: String,
        dir: &Dir,
        open: impl Fn(&str, OFlag) -> Result<File, E>,
    ) -> Result<Self, E> {
        Ok(Spare {
            files: vec![
                open(&stream_name(0), OFlag::O_RDWR)?,
                open(&stream_name(1), OFlag::O_RDWR)?,
            ],
            meta: open(META, OFlag::O_RDWR)?,
            journal: open(JOURNAL, APPEND)?,
            parent: parent.clone(),
            name,
            dir: dir.clone(),
        })
    }

    /// The store of a process described by `meta`, in its final directory `name` next to the
    /// spare's (which goes back to `spares` once done with), and the socket its supervisor
    /// listens on for a successor.
    pub(crate) fn into_store(
        self,
        name: &str,
        meta: &Meta,
        spares: Option<&std::sync::Arc<Spares>>,
    ) -> Result<(Store, std::os::unix::net::UnixListener), KeepError> {
        let text = serde_json::to_vec(meta).map_err(KeepError::EncodeMeta)?;
        use std::os::linux::net::SocketAddrExt as _;
        let socket = crate::ipc::message::supervisor_socket(name);
        let kept = std::os::unix::net::SocketAddr::from_abstract_name(socket)
            .and_then(|address| std::os::unix::net::UnixListener::bind_addr(&address))
            .map_err(KeepError::Listen)
            .and_then(|listener| {
                (&self.meta)
                    .write_all(&text)
                    .map_err(|source| KeepError::WriteMeta {
                        dir: self.name.clone(),
                        source,
                    })?;
                (self.parent.rename(&self.name, name)).map_err(|source| KeepError::Rename {
                    from: self.name.clone(),
                    to: name.to_owned(),
                    source,
                })?;
                Ok(listener)
            });
        let listener = match kept {
            Ok(listener) => listener,
            Err(err) => {
                let _ = self.parent.remove_tree(&self.name);
                return Err(err);
            }
        };
        let kept = Kept::new(self.parent, name.to_owned(), self.dir);
        let mut store = Store::new(self.files, Some(self.journal), Some(kept));
        store.spares = spares.map(std::sync::Arc::downgrade);
        Ok((store, listener))
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(kept) = &self.dir {
            let spares = self.spares.as_ref().and_then(std::sync::Weak::upgrade);
            if spares.is_some_and(|spares| spares.recycle(kept)) {
                return;
            }
            if let Err(err) = kept.parent.remove_tree(&kept.name) {
                tracing::warn!("cannot remove processes/{}: {err}", kept.name);
            }
        }
    }
}
