//! Adoption: a process a predecessor daemon kept in the state directory (`super::store`) is
//! taken over by this one, with its tree if that still runs (`crate::launcher::tree::adopt`), its output
//! (the journal replayed, what the files hold beyond it recorded now), its stdin and its
//! timings.

use super::*;

/// Output a predecessor kept but did not record is adopted in chunks of at most this size, as
/// large as a live read's.
const ADOPTED_CHUNK_BYTES: u64 = crate::os::pipe::OUTPUT_PIPE_BYTES as u64;

impl TableInner {
    /// Adopts the process kept in `kept`, started as `meta` says.
    pub(super) async fn adopt(
        self: Arc<Self>,
        kept: store::Kept,
        meta: Meta,
    ) -> std::io::Result<()> {
        let dir = kept.dir()?;
        let (store, entries) = Store::open(kept, &meta)?;
        let store = Arc::new(store);
        let id = meta.params.process_id.clone();
        let (mut records, mut stdin_closed) = (Vec::new(), false);
        let (mut accepted, mut pending) = (Vec::new(), Vec::new());
        for entry in entries {
            match entry {
                Entry::Log(record) => records.push(record),
                Entry::Accepted { id, data } => {
                    accepted.push(id.clone());
                    pending.push((id, Bytes::from(data.0)));
                }
                Entry::Wrote(id) => pending.retain(|(pending, _)| *pending != id),
                Entry::StdinClosed => stdin_closed = true,
            }
        }
        // The journal is trusted only as far as its spans lie in their files: a span past its
        // file's end (a cut file, or a forged line) would be read back as that many bytes.
        let sizes: Vec<u64> = (0..2)
            .map(|index| store.file(index).and_then(|file| file.metadata().ok()))
            .map(|meta| meta.map_or(0, |meta| meta.len()))
            .collect();
        let fits = |record: &Record| match record {
            Record::Output { stream, span, .. } => span
                .offset
                .checked_add(span.len)
                .is_some_and(|end| end <= sizes[store::stream_index(*stream)]),
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
        // Where the recorded output ends in each file (evicted chunks included).
        let mut ends = [0u64; 2];
        for record in &records {
            if let Record::Output { stream, span, .. } = record {
                let end = &mut ends[store::stream_index(*stream)];
                *end = (*end).max(span.end());
            }
        }
        let mut log = OutputLog::new(
            self.config.output_retention_bytes,
            self.config.output_retention_chunks,
        );
        log.restore(records);
        // The supervisor stops moving output into the files before it answers.
        let supervisor = crate::launcher::tree::adopt(&dir).await;
        let streams = store::streams(meta.params.tty);
        // What the predecessor moved into the files without recording it, then what the
        // orphaned supervisor moved: recorded now, in order, never twice.
        for &stream in streams {
            let index = store::stream_index(stream);
            let file = store
                .file(index)
                .ok_or_else(|| std::io::Error::other("no file"))?;
            let size = file.metadata()?.len();
            while ends[index] < size {
                let len = (size - ends[index]).min(ADOPTED_CHUNK_BYTES);
                let span = Span {
                    offset: ends[index],
                    len,
                };
                store.journal(&Entry::Log(log.push(stream, span)));
                ends[index] += len;
            }
        }
        log.mark_delivered(log.next_seq() - 1);
        let mut outputs = Vec::new();
        let mut held = supervisor.held.into_iter();
        for (&stream, open) in streams.iter().zip(&supervisor.adopted.outputs) {
            if *open {
                outputs.extend(held.next().map(|fd| (stream, fd)));
            }
        }
        let tty = meta.params.tty;
        // A terminal's master is its output, its stdin and what resizes it.
        let (stdin, master) = if tty {
            let master = outputs.first().map(|(_, fd)| fd.try_clone()).transpose()?;
            (master.as_ref().map(OwnedFd::try_clone).transpose()?, master)
        } else {
            (held.next(), None)
        };
        let stdin = stdin.filter(|_| !stdin_closed);
        let stdin_object = stdin
            .as_ref()
            .filter(|_| !tty)
            .and_then(input_wait::StdinObject::of);
        let timing = Timing::of(&meta.params);
        let since = std::time::Duration::from_millis(meta.started_at_ms);
        let started_at = std::time::UNIX_EPOCH + since;
        let running_for = started_at.elapsed().unwrap_or_default();
        let process = Arc::new(ManagedProcess {
            id: id.clone(),
            origin: Origin {
                params: meta.params,
                sandbox_type: meta.sandbox_type,
                idempotent: meta.idempotent,
            },
            pid: meta.pid,
            started_at,
            exited_at: Default::default(),
            supervisor_pid: meta.supervisor_pid,
            orders: supervisor.orders,
            started: std::time::Instant::now()
                .checked_sub(running_for)
                .unwrap_or_else(std::time::Instant::now),
            kill_reason: Default::default(),
            state: Mutex::new(ProcessState::new(log, outputs.len(), None)),
            changed: watch::channel(()).0,
            drained: watch::channel(()).0,
            stdin: stdin::Stdin::new(stdin, store.clone(), accepted, pending),
            pty_size: master.map(stdin::PtyResizer::new),
            sandbox: Mutex::new(None),
            store,
        });
        self.slots
            .lock()
            .unwrap()
            .map
            .insert(id.clone(), Slot::Ready(process.clone()));
        tracing::info!(process = %id, pid = process.pid, "process adopted");
        tokio::spawn(supervise(
            Arc::downgrade(&self),
            process.clone(),
            None,
            supervisor.reports,
            None,
            false,
            super::live::Live::adopted(&self.live),
        ));
        self.read_outputs(&process, outputs, !tty, &ends);
        process.arm(&timing, stdin_object, running_for);
        {
            let mut state = process.state.lock().unwrap();
            if state.open_streams == 0 && state.log.exit_code().is_some() {
                state.record_closed(&process.id, &process.store);
            }
        }
        tokio::spawn(delivery::deliver(process, self.attachment.clone()));
        Ok(())
    }
}
