//! The confined side of a sandboxed `fs/*` call (`sandbox::run_fs_op`): run by the sandbox
//! helper itself, in-process, once the call's sandbox is in place.
//!
//! It reads one [`HelperRequest`] from stdin to EOF, runs it with the same blocking code as the
//! daemon's direct path, and prints one [`HelperReply`] on stdout. Requests are the one-shot
//! methods with their params (without `sandbox`), `fs/open` (the open file is passed back over
//! stdin, which is a Unix socket, and the reply describes it), and [`INSTALL_STAGED`], which
//! renames a staged `replace` upload into place when its handle is closed. Nothing here may
//! need what the sandbox may not grant: no exec, no file read but the operation's own.

use super::handles::{Handle, Transfer};
use super::host::host_path;
use super::oneshot::{follow, one_shots, OneShot, OneShotVisitor};
use super::staged::StagedName;
use super::write_stream::WriteTransfer;
use super::FsError;
use crate::rpc::{decode, RpcError};
use exec_server_protocol::fs::OpenParams;
use exec_server_protocol::rpc::{method, ErrorObject};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::{Read as _, Write as _};
use std::os::fd::AsFd as _;
use std::path::PathBuf;

/// The helper's own request: commit a staged file (`{temp, target}`).
pub const INSTALL_STAGED: &str = "installStaged";

#[derive(Debug, Serialize, Deserialize)]
pub struct HelperRequest {
    pub method: String,
    #[serde(default)]
    pub params: Option<Value>,
}

/// `{"ok": <result>}` or `{"error": {code, message, data}}`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HelperReply {
    Ok(Value),
    Error(ErrorObject),
}

#[derive(Deserialize)]
struct InstallParams {
    temp: PathBuf,
    target: PathBuf,
}

/// Runs the operation on stdin, replies on stdout, and exits.
pub fn serve() -> ! {
    let reply = match handle() {
        Ok(result) => HelperReply::Ok(result),
        Err(error) => HelperReply::Error(RpcError::from(error).to_object()),
    };
    let mut stdout = std::io::stdout().lock();
    let written = serde_json::to_writer(&mut stdout, &reply).is_ok() && stdout.flush().is_ok();
    std::process::exit(if written { 0 } else { 1 });
}

fn handle() -> Result<Value, FsError> {
    let mut input = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut input)
        .map_err(|err| FsError::internal(format!("cannot read the helper request: {err}")))?;
    let request: HelperRequest = serde_json::from_slice(&input)
        .map_err(|err| FsError::internal(format!("malformed helper request: {err}")))?;
    match request.method.as_str() {
        method::FS_OPEN => open(request.params),
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
fn open(params: Option<Value>) -> Result<Value, FsError> {
    let params: OpenParams = decode(params)?;
    let path = host_path(&params.path)?;
    let mode = params.mode.unwrap_or_default();
    let handle = Handle::open(&path, mode, follow(params.follow_symlinks))?;
    let (file, transfer) = handle
        .into_transfer()
        .ok_or_else(|| FsError::internal("a fresh handle is open"))?;
    if let Err(err) = crate::sandbox::pass_back(file.as_fd()) {
        if let Transfer::Write(WriteTransfer::Staged { temp, .. }) = &transfer {
            let _ = std::fs::remove_file(temp);
        }
        return Err(FsError::internal(format!(
            "cannot pass the open file back: {err}"
        )));
    }
    Ok(serde_json::to_value(transfer).expect("a transfer always serializes"))
}
