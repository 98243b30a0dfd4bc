//! The daemon's side of a supervised launch ([`super::supervisor`]): the supervisor's process,
//! its reports and the orders sent to it.

use super::cgroup::Group;
use super::spawn::LaunchSpec;
use super::supervisor;
pub use super::supervisor::Report;
use crate::sandbox::bridge;
use crate::sandbox::plan::{Failure, NetworkMode};
use crate::sandbox::pool::{self, Kind, StartError};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

/// A supervisor that has its launch.
pub struct Tree {
    /// The supervisor's process when it is the daemon's child (a sandbox helper); a plain
    /// supervisor is the fork server's, which reaps it.
    pub supervisor: Option<tokio::process::Child>,
    pub supervisor_pid: i32,
    /// The tree's cgroups, with per-tree limits.
    pub group: Option<Group>,
    pub reports: Reports,
    pub orders: Orders,
}

/// The read half of the control socket, after what was read before it (see [`launch`]).
pub struct Reports(
    tokio::io::Lines<
        tokio::io::BufReader<tokio::io::Chain<std::io::Cursor<Vec<u8>>, OwnedReadHalf>>,
    >,
);

/// The write half of the control socket; taken back when a plain supervisor is reused
/// ([`reuse`]), after which orders go nowhere: never to the supervisor's next tree.
pub struct Orders(std::sync::Mutex<Option<OwnedWriteHalf>>);

/// What the supervisor says about the exec.
pub enum Started {
    Executed {
        pid: i32,
    },
    /// The child `pid` could not execute the program and exits in its place.
    Failed {
        pid: i32,
        failure: Failure,
    },
}

/// Hands the launch of `spec` (`payload`: what the supervisor's child applies) to a waiting
/// supervisor of `kind`, with the program's `stdio` and the tree's cgroups, and waits for its
/// verdict on the exec. For a managed network, also the listeners the supervisor opened in the
/// sandbox's network namespace before it forked (`crate::sandbox::bridge`).
pub async fn launch(
    kind: Kind,
    spec: &LaunchSpec,
    stdio: &[OwnedFd; 3],
    payload: &[u8],
) -> Result<(Tree, Started, Vec<OwnedFd>), StartError> {
    let mut group = Group::create(spec.limits.max_memory_bytes, spec.limits.max_processes)?;
    let fds: Vec<BorrowedFd<'_>> = stdio
        .iter()
        .chain(group.iter().flat_map(|group| &group.procs))
        .map(AsFd::as_fd)
        .collect();
    let frames = supervisor::frames(&spec.setup(), payload);
    let (supervisor, control) = match kind {
        Kind::Plain => {
            let mut control = pool::take_plain().await?;
            // A waiting supervisor killed from outside cannot take it: a fresh one, once.
            if pool::send(&mut control, &fds, &frames).await.is_err() {
                control = pool::take_plain().await?;
                pool::send(&mut control, &fds, &frames).await?;
            }
            (None, control)
        }
        Kind::Sandboxed(network) => {
            let helper = pool::take(network).await?;
            let (child, control) = helper.hand_over(&fds, &frames).await?;
            (Some(child), control)
        }
    };
    drop(fds);
    if let Some(group) = &mut group {
        group.procs.clear();
    }
    let setup = async {
        // A supervisor that failed before it could send the listeners wrote the start of its
        // `failed` report instead: kept for the report reader.
        let (listeners, read) = if kind == Kind::Sandboxed(NetworkMode::Managed) {
            bridge::receive(&control).await?
        } else {
            Default::default()
        };
        let (read_half, write) = control.into_split();
        let mut tree = Tree {
            supervisor,
            supervisor_pid: 0,
            group,
            reports: Reports(
                tokio::io::BufReader::new(std::io::Cursor::new(read).chain(read_half)).lines(),
            ),
            orders: Orders(std::sync::Mutex::new(Some(write))),
        };
        let first = tree.reports.next().await;
        Ok::<_, std::io::Error>((tree, first, listeners))
    };
    // Dropping the tree (on any error) closes the control socket: the supervisor ends.
    let setup = tokio::time::timeout(crate::sandbox::SETUP_TIMEOUT, setup).await;
    if kind == Kind::Plain {
        pool::refill_plain();
    }
    let Ok(setup) = setup else {
        return Err(
            std::io::Error::other("the supervisor did not start the program in time").into(),
        );
    };
    let (mut tree, first, listeners) = setup?;
    let started = match first {
        Some(Report::Started { pid, supervisor }) => {
            tree.supervisor_pid = supervisor;
            Started::Executed { pid }
        }
        Some(Report::Failed {
            pid,
            supervisor,
            failure,
        }) => {
            tree.supervisor_pid = supervisor;
            Started::Failed { pid, failure }
        }
        _ => return Err(std::io::Error::other("the supervisor failed before the exec").into()),
    };
    Ok((tree, started, listeners))
}

impl Reports {
    /// The next report; None once the supervisor is gone (or says something unreadable).
    pub async fn next(&mut self) -> Option<Report> {
        let line = self.0.next_line().await.ok()??;
        serde_json::from_str(&line).ok()
    }
}

impl Orders {
    /// Kill the whole tree; the supervisor answers with `exited` (if not yet) and `gone`.
    pub fn kill(&self) {
        self.send(&[supervisor::KILL]);
    }

    /// `signal` to the program's process group, while it has not exited.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        self.send(&[supervisor::SIGNAL, signal as u8]);
    }

    fn send(&self, order: &[u8]) {
        // An order's bytes always fit in an idle socket's buffer; a supervisor that is gone needs no
        // order. One sent just before the socket was taken back reaches the supervisor ahead
        // of its next launch, which skips it.
        if let Some(orders) = &*self.0.lock().unwrap() {
            let _ = orders.try_write(order);
        }
    }
}

/// Hands a plain supervisor whose tree is confirmed gone, and which reported it, back to the
/// pool for the next launch.
pub fn reuse(reports: Reports, orders: &Orders) {
    let Some(write) = orders.0.lock().unwrap().take() else {
        return;
    };
    let reader = reports.0.into_inner();
    // Anything read past the last report would be lost: such a supervisor is not reused.
    if !reader.buffer().is_empty() {
        return;
    }
    let (before, read) = reader.into_inner().into_inner();
    if before.position() < before.get_ref().len() as u64 {
        return;
    }
    if let Ok(control) = read.reunite(write) {
        pool::return_plain(control);
    }
}
