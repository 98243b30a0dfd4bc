//! The fs operations a confined helper runs for sandboxed `fs/*` calls (`crate::child::fs_op`
//! serves them once the sandbox is in place): the one-shot methods with their params (without
//! `sandbox`), `fs/open` (the open file is passed back ahead of the reply, which describes it),
//! [`INSTALL_STAGED`], which renames a staged `replace` upload into place when its handle
//! is closed, [`INSPECT`], which passes back a path opened for its metadata or listing, and
//! [`OPEN_BENEATH`], which passes back a path opened beneath a directory (`super::beneath`).
//! The same blocking code as the daemon's direct path; nothing here may need what the sandbox
//! may not grant: no exec, no file read but the operation's own.

use super::handles::Handle;
use super::host::host_path;
use super::oneshot::{follow, one_shots, OneShot, OneShotVisitor};
use super::staged::StagedName;
use super::transfer::{Transfer, WriteTransfer};
use super::FsError;
use crate::ipc::message::{
    FsReply, FsRequest, Inspect, OpenBeneath, INSPECT, INSTALL_STAGED, OPEN_BENEATH,
};
use crate::rpc::{decode, RpcError};
use exec_server_protocol::fs::OpenParams;
use exec_server_protocol::rpc::method;
use serde::Deserialize;
use serde_json::Value;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::path::PathBuf;

#[derive(Deserialize)]
struct InstallParams {
    temp: PathBuf,
    target: PathBuf,
}

/// Opens `inspect.path` as asked, in whatever confines the caller.
fn open_for_inspection(inspect: &Inspect) -> Result<std::os::fd::OwnedFd, FsError> {
    use nix::fcntl::OFlag;
    let mut flags = OFlag::O_CLOEXEC;
    flags |= match inspect.list {
        true => OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        false => OFlag::O_PATH,
    };
    if !inspect.follow {
        flags |= OFlag::O_NOFOLLOW;
    }
    nix::fcntl::open(&inspect.path, flags, nix::sys::stat::Mode::empty())
        .map_err(|errno| FsError::io(errno.into(), &inspect.path))
}

/// Runs one request; `pass_back` sends a file the operation opened to the daemon.
pub(crate) fn run(
    input: &[u8],
    pass_back: impl FnOnce(BorrowedFd<'_>) -> std::io::Result<()>,
) -> FsReply {
    match handle(input, pass_back) {
        Ok(result) => FsReply::Ok(result),
        Err(error) => FsReply::Error(RpcError::from(error).to_object()),
    }
}

fn handle(
    input: &[u8],
    pass_back: impl FnOnce(BorrowedFd<'_>) -> std::io::Result<()>,
) -> Result<Value, FsError> {
    let request: FsRequest = serde_json::from_slice(input)
        .map_err(|err| FsError::internal(format!("malformed helper request: {err}")))?;
    match request.method.as_str() {
        method::FS_OPEN => open(request.params, pass_back),
        INSPECT => {
            let inspect: Inspect = decode(request.params)?;
            hand_over(open_for_inspection(&inspect)?, pass_back)
        }
        OPEN_BENEATH => {
            let request: OpenBeneath = decode(request.params)?;
            let opened = super::beneath::open(&request)
                .map_err(|err| FsError::io(err, request.base.join(&request.path)))?;
            hand_over(opened, pass_back)
        }
        INSTALL_STAGED => {
            let params: InstallParams = decode(request.params)?;
            StagedName::new(params.temp, params.target).install()?;
            Ok(Value::Null)
        }
        name => {
            let mut run = RunNamed {
                name,
                params: request.params,
                outcome: None,
            };
            one_shots(&mut run);
            run.outcome
                .unwrap_or_else(|| Err(RpcError::method_not_found(name).into()))
        }
    }
}

/// Passes the descriptor an operation opened back to the daemon, as its whole result.
fn hand_over(
    fd: std::os::fd::OwnedFd,
    pass_back: impl FnOnce(BorrowedFd<'_>) -> std::io::Result<()>,
) -> Result<Value, FsError> {
    pass_back(fd.as_fd())
        .map_err(|err| FsError::internal(format!("cannot pass the descriptor back: {err}")))?;
    Ok(Value::Null)
}

/// Runs the one-shot method called `name`, if there is one.
struct RunNamed<'a> {
    name: &'a str,
    params: Option<Value>,
    outcome: Option<Result<Value, FsError>>,
}

impl OneShotVisitor for RunNamed<'_> {
    fn visit<M: OneShot>(&mut self) {
        if M::NAME == self.name {
            let params = decode(self.params.take());
            self.outcome = Some(params.map_err(FsError::from).and_then(M::run));
        }
    }
}

/// Opens the stream as the daemon would, passes the open file back, then hands its cleanup
/// over to the daemon (a staged file is no longer removed here).
fn open(
    params: Option<Value>,
    pass_back: impl FnOnce(BorrowedFd<'_>) -> std::io::Result<()>,
) -> Result<Value, FsError> {
    let params: OpenParams = decode(params)?;
    let path = host_path(&params.path)?;
    let mode = params.mode.unwrap_or_default();
    let handle = Handle::open(&path, mode, follow(params.follow_symlinks))?;
    let (file, transfer) = handle
        .into_transfer()
        .ok_or_else(|| FsError::internal("a fresh handle is open"))?;
    if let Err(err) = pass_back(file.as_fd()) {
        if let Transfer::Write(WriteTransfer::Staged { temp, .. }) = &transfer {
            let _ = std::fs::remove_file(temp);
        }
        return Err(FsError::internal(format!(
            "cannot pass the open file back: {err}"
        )));
    }
    Ok(serde_json::to_value(transfer).expect("a transfer always serializes"))
}
