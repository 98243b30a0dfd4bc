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
    pub supervisor: tokio::process::Child,
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
    let helper = pool::take(kind).await?;
    let fds: Vec<BorrowedFd<'_>> = stdio
        .iter()
        .chain(group.iter().flat_map(|group| &group.procs))
        .map(AsFd::as_fd)
        .collect();
    let frames = supervisor::frames(&spec.setup(), payload);
    let (supervisor, control) = helper.hand_over(&fds, &frames).await?;
    if let Some(group) = &mut group {
        group.procs.clear();
    }
    let supervisor_pid = supervisor
        .id()
        .ok_or_else(|| std::io::Error::other("the supervisor was reaped"))?
        as i32;
    let (read, write) = control.into_split();
    let mut tree = Tree {
        supervisor,
        supervisor_pid,
        group,
        reports: Reports(tokio::io::BufReader::new(read).lines()),
        orders: Orders(write),
    };
    let started = match tokio::time::timeout(crate::sandbox::SETUP_TIMEOUT, tree.reports.next())
        .await
    {
        Ok(Some(Report::Started { pid })) => Started::Executed { pid },
        Ok(Some(Report::Failed { pid, failure })) => Started::Failed { pid, failure },
        Ok(_) => {
            let _ = tree.supervisor.start_kill();
            return Err(std::io::Error::other("the supervisor failed before the exec").into());
        }
        Err(_) => {
            let _ = tree.supervisor.start_kill();
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
