//! The daemon's side of a supervised launch ([`super::supervisor`]): the supervisor's process,
//! its reports and the orders sent to it.

use super::cgroup::Group;
use super::spawn::LaunchSpec;
use super::supervisor;
pub use super::supervisor::Report;
use crate::sandbox::plan::Failure;
use crate::sandbox::pool::{self, Kind, StartError};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use tokio::io::AsyncBufReadExt as _;
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

/// The read half of the control socket.
pub struct Reports(tokio::io::Lines<tokio::io::BufReader<OwnedReadHalf>>);

/// The write half of the control socket.
pub struct Orders(OwnedWriteHalf);

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
/// verdict on the exec.
pub async fn launch(
    kind: Kind,
    spec: &LaunchSpec,
    stdio: &[OwnedFd; 3],
    payload: &[u8],
) -> Result<(Tree, Started), StartError> {
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
        Kind::Sandboxed { network_restricted } => {
            let helper = pool::take(network_restricted).await?;
            let (child, control) = helper.hand_over(&fds, &frames).await?;
            (Some(child), control)
        }
    };
    drop(fds);
    if let Some(group) = &mut group {
        group.procs.clear();
    }
    let (read, write) = control.into_split();
    let mut tree = Tree {
        supervisor,
        supervisor_pid: 0,
        group,
        reports: Reports(tokio::io::BufReader::new(read).lines()),
        orders: Orders(write),
    };
    let started = match tokio::time::timeout(crate::sandbox::SETUP_TIMEOUT, tree.reports.next())
        .await
    {
        Ok(Some(Report::Started { pid, supervisor })) => {
            tree.supervisor_pid = supervisor;
            Started::Executed { pid }
        }
        Ok(Some(Report::Failed {
            pid,
            supervisor,
            failure,
        })) => {
            tree.supervisor_pid = supervisor;
            Started::Failed { pid, failure }
        }
        // Dropping the tree closes the control socket: the supervisor ends.
        Ok(_) => {
            return Err(std::io::Error::other("the supervisor failed before the exec").into());
        }
        Err(_) => {
            return Err(
                std::io::Error::other("the supervisor did not start the program in time").into(),
            );
        }
    };
    Ok((tree, started))
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
        self.send(&[supervisor::KILL, 0]);
    }

    /// `signal` to the program's process group, while it has not exited.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        self.send(&[supervisor::SIGNAL, signal as u8]);
    }

    fn send(&self, order: &[u8; 2]) {
        // Two bytes always fit in an idle socket's buffer; a supervisor that is gone needs no
        // order.
        let _ = self.0.try_write(order);
    }
}
