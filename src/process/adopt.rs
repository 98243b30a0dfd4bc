//! Adoption: a process a predecessor daemon kept in the state directory (`super::store`) is
//! taken over by this one, with its tree if that still runs (`tree::adopt`), its output
//! (the journal replayed, what the files hold beyond it recorded now), its stdin and its
//! timings.
//!
//! Invariants: the journal is trusted only as far as its output lies in the files; output is
//! recorded once, in order, never twice (the supervisor stops moving output into the files
//! before it answers, and the readers go on from where each file ends); everything adopted
//! counts as delivered (the client catches up with `process/read`).

use super::input_wait::StdinObject;
use super::managed::{ManagedProcess, Origin, Parts, Writes};
use super::output::{stream_index, OutputLog, Record, Span};
use super::store::{self, Entry, Kept, Meta, Store};
use super::table::TableInner;
use super::{delivery, live, tasks, AdoptError, Timing};
use crate::launcher::tree;
use bytes::Bytes;
use exec_server_protocol::process::OutputStream;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// Output a predecessor kept but did not record is adopted in chunks of at most this size, as
/// large as a live read's.
const ADOPTED_CHUNK_BYTES: u64 = crate::os::pipe::OUTPUT_PIPE_BYTES as u64;

impl TableInner {
    /// Adopts the process kept in `kept`, started as `meta` says.
    pub(super) async fn adopt(self: Arc<Self>, kept: Kept, meta: Meta) -> Result<(), AdoptError> {
        let (dir, name) = (kept.dir().map_err(AdoptError::Dir)?, kept.name.clone());
        let (store, entries) = Store::open(kept, &meta)?;
        let store = Arc::new(store);
        let id = meta.params.process_id.clone();
        let journal = Journal::replay(entries);
        let (records, mut ends) = trusted(&id, &store, journal.records);
        let mut log = self.output_log(&meta.params);
        log.restore(records);
        // The supervisor stops moving output into the files before it answers.
        let supervisor = tree::adopt(&dir, &name, Some(meta.supervisor_pid)).await;
        let tty = meta.params.tty;
        record_unjournaled(&store, &mut log, store::streams(tty), &mut ends)?;
        log.mark_delivered(log.next_seq() - 1);
        let held = Held::of(supervisor.held, &supervisor.adopted.outputs, tty)?;
        let stdin = held.stdin.filter(|_| !journal.stdin_closed);
        let stdin_object = (stdin.as_ref()).filter(|_| !tty).and_then(StdinObject::of);
        let timing = Timing::of(&meta.params);
        let started_at = UNIX_EPOCH + Duration::from_millis(meta.started_at_ms);
        let running_for = started_at.elapsed().unwrap_or_default();
        let process = ManagedProcess::new(Parts {
            origin: Origin {
                params: meta.params,
                sandbox_type: meta.sandbox_type,
                idempotent: meta.idempotent,
            },
            pid: meta.pid,
            supervisor_pid: meta.supervisor_pid,
            orders: supervisor.orders,
            started_at,
            log,
            open_streams: held.outputs.len(),
            // Not known again: neither what a sandbox denied nor its placeholders.
            denial: None,
            stdin,
            writes: journal.writes,
            master: held.master,
            sandbox: None,
            store,
        });
        self.insert_adopted(&process);
        tracing::info!(process = %id, pid = process.pid, "process adopted");
        tokio::spawn(tasks::supervise(
            Arc::downgrade(&self),
            process.clone(),
            None,
            supervisor.reports,
            None,
            false,
            live::Live::adopted(&self.live),
        ));
        self.read_outputs(&process, held.outputs, !tty, &ends);
        process.arm(&timing, stdin_object, running_for);
        {
            // Exited with its outputs ended under the predecessor: closed now.
            let mut state = process.state.lock().unwrap();
            if state.open_streams == 0 && state.log.exit_code().is_some() {
                state.record_closed(&process.id, &process.store);
            }
        }
        tokio::spawn(delivery::deliver(process, self.attachment.clone()));
        Ok(())
    }
}

/// A predecessor's journal, replayed.
struct Journal {
    records: Vec<Record>,
    writes: Writes,
    stdin_closed: bool,
}

impl Journal {
    fn replay(entries: Vec<Entry>) -> Self {
        let mut journal = Self {
            records: Vec::new(),
            writes: Writes::default(),
            stdin_closed: false,
        };
        let writes = &mut journal.writes;
        for entry in entries {
            match entry {
                Entry::Log(record) => journal.records.push(record),
                Entry::Accepted { id, data } => {
                    writes.accepted.push(id.clone());
                    writes.pending.push((id, Bytes::from(data.0)));
                }
                Entry::Wrote(id) => writes.pending.retain(|(pending, _)| *pending != id),
                Entry::StdinClosed => journal.stdin_closed = true,
            }
        }
        journal
    }
}

/// The records whose output lies in its file, and where the recorded output ends in each file
/// (evicted chunks included): a span past its file's end (a cut file, or a forged line) would
/// be read back as that many bytes.
fn trusted(id: &str, store: &Store, mut records: Vec<Record>) -> (Vec<Record>, [u64; 2]) {
    let sizes: Vec<u64> = (0..2)
        .map(|index| store.file(index).and_then(|file| file.metadata().ok()))
        .map(|meta| meta.map_or(0, |meta| meta.len()))
        .collect();
    let fits = |record: &Record| match record {
        Record::Output { stream, span, .. } => span
            .offset
            .checked_add(span.len)
            .is_some_and(|end| end <= sizes[stream_index(*stream)]),
        _ => true,
    };
    let journaled = records.len();
    records.retain(fits);
    if records.len() < journaled {
        tracing::warn!(
            process = %id,
            "skipped {} journal entries whose output lies beyond its file",
            journaled - records.len()
        );
    }
    let mut ends = [0u64; 2];
    for record in &records {
        if let Record::Output { stream, span, .. } = record {
            let end = &mut ends[stream_index(*stream)];
            *end = (*end).max(span.end());
        }
    }
    (records, ends)
}

/// Records what the predecessor moved into the files without recording it, then what the
/// orphaned supervisor moved: in order, never twice (`ends` moves along).
fn record_unjournaled(
    store: &Store,
    log: &mut OutputLog,
    streams: &[OutputStream],
    ends: &mut [u64; 2],
) -> Result<(), AdoptError> {
    for &stream in streams {
        let index = stream_index(stream);
        let file = store.file(index).ok_or(AdoptError::NoFile(stream))?;
        let size = file
            .metadata()
            .map_err(|source| AdoptError::FileSize { stream, source })?
            .len();
        while ends[index] < size {
            let len = (size - ends[index]).min(ADOPTED_CHUNK_BYTES);
            let span = Span {
                offset: ends[index],
                len,
            };
            if let Some(record) = log.push(stream, span, false) {
                store.journal(&Entry::Log(record));
            }
            ends[index] += len;
        }
    }
    Ok(())
}

/// The ends the orphaned supervisor held and handed over: the outputs still open, then stdin.
struct Held {
    outputs: Vec<(OutputStream, OwnedFd)>,
    stdin: Option<OwnedFd>,
    /// A terminal's master, for resizing.
    master: Option<OwnedFd>,
}

impl Held {
    /// `open` says which of the process's streams are still open; a terminal's master is its
    /// output, its stdin and what resizes it.
    fn of(held: Vec<OwnedFd>, open: &[bool], tty: bool) -> Result<Self, AdoptError> {
        let mut held = held.into_iter();
        let mut outputs = Vec::new();
        for (&stream, open) in store::streams(tty).iter().zip(open) {
            if *open {
                outputs.extend(held.next().map(|fd| (stream, fd)));
            }
        }
        let clone = |fd: &OwnedFd| fd.try_clone().map_err(AdoptError::TerminalClone);
        let (stdin, master) = if tty {
            let master = outputs.first().map(|(_, fd)| clone(fd)).transpose()?;
            (master.as_ref().map(clone).transpose()?, master)
        } else {
            (held.next(), None)
        };
        Ok(Self {
            outputs,
            stdin,
            master,
        })
    }
}
