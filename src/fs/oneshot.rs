//! The one-shot `fs/*` methods (everything but streams and watches): each decoded from the
//! wire, then run to completion as blocking work with the same code either by the daemon (no
//! restricting sandbox) or by the sandbox helper, confined (`helper`).

use super::host::host_path;
use super::FsError;
use super::{copy, file, ops, walk};
use crate::config::Config;
use base64::Engine as _;
use exec_server_protocol::fs::*;
use exec_server_protocol::methods::{self as m, Method};
use exec_server_protocol::sandbox::FileSystemSandboxContext;
use exec_server_protocol::PathUri;
use serde::{Deserialize as _, Serialize};
use serde_json::Value;
use std::future::Future;
use std::path::{Path, PathBuf};

/// A one-shot method: how its params name the sandbox and the paths it touches, and how it
/// runs. The same [`OneShot::run`] serves the daemon and the sandbox helper.
pub(crate) trait OneShot: Method<Params: Send + 'static> {
    /// Takes the `sandbox` out, leaving the params the helper receives.
    fn take_sandbox(params: &mut Self::Params) -> Option<FileSystemSandboxContext>;

    /// The wire paths the operation reads (false) or changes (true).
    fn touches(params: &Self::Params) -> Vec<(&PathUri, bool)>;

    /// Runs the operation here and now (blocking).
    fn run(params: Self::Params) -> Result<Value, FsError>;

    /// Applies the daemon's limits to `params` and says how much outbound budget the reply
    /// needs reserved before it is built, if more than a small one.
    fn reply_budget(
        _params: &mut Self::Params,
        _config: &Config,
    ) -> impl Future<Output = Option<usize>> + Send {
        std::future::ready(None)
    }

    /// Drops from a result listing `listed` (its first touched path) the entries that
    /// `is_placeholder`: the placeholders of missing protected names that live sandboxes
    /// hold, which no listing shows, in the sandbox or out of it.
    fn hide_placeholders(
        _listed: &Path,
        _result: &mut Value,
        _is_placeholder: &dyn Fn(&Path) -> bool,
    ) {
    }
}

/// Code that handles every one-shot method: [`one_shots`] calls it once per method.
pub(crate) trait OneShotVisitor {
    fn visit<M: OneShot>(&mut self);
}

/// The one list of one-shot methods, for the daemon's router and the sandbox helper.
pub(crate) fn one_shots(visitor: &mut impl OneShotVisitor) {
    visitor.visit::<m::FsReadFile>();
    visitor.visit::<m::FsWriteFile>();
    visitor.visit::<m::FsCreateDirectory>();
    visitor.visit::<m::FsGetMetadata>();
    visitor.visit::<m::FsReadDirectory>();
    visitor.visit::<m::FsRemove>();
    visitor.visit::<m::FsCopy>();
    visitor.visit::<m::FsRename>();
    visitor.visit::<m::FsCanonicalize>();
    visitor.visit::<m::FsWalk>();
}

impl OneShot for m::FsReadFile {
    fn take_sandbox(params: &mut ReadFileParams) -> Option<FileSystemSandboxContext> {
        params.sandbox.take()
    }
    fn touches(params: &ReadFileParams) -> Vec<(&PathUri, bool)> {
        vec![(&params.path, false)]
    }
    fn run(params: ReadFileParams) -> Result<Value, FsError> {
        read_file(params)
    }

    /// Applies the daemon's cap on whole-file reads (the helper reads `maxBytes` too) and
    /// reserves for the encoded file, twice, as the reply `Value` and its text exist together
    /// for a moment. A size that cannot be known (stat fails, or 0 under /proc) reserves for
    /// the cap.
    async fn reply_budget(params: &mut ReadFileParams, config: &Config) -> Option<usize> {
        let cap = config.max_read_file_bytes;
        let limit = params.max_bytes.map_or(cap, |max| max.min(cap));
        params.max_bytes = Some(limit);
        let size = match host_path(&params.path) {
            Ok(path) if follow(params.follow_symlinks) => tokio::fs::metadata(path).await,
            Ok(path) => tokio::fs::symlink_metadata(path).await,
            Err(_) => return None,
        }
        .map_or(0, |meta| meta.len());
        let size = if size == 0 { limit } else { size.min(limit) };
        let encoded = usize::try_from(size.div_ceil(3) * 4).unwrap_or(usize::MAX);
        Some(encoded.saturating_mul(2))
    }
}

impl OneShot for m::FsWriteFile {
    fn take_sandbox(params: &mut WriteFileParams) -> Option<FileSystemSandboxContext> {
        params.sandbox.take()
    }
    fn touches(params: &WriteFileParams) -> Vec<(&PathUri, bool)> {
        vec![(&params.path, true)]
    }
    fn run(params: WriteFileParams) -> Result<Value, FsError> {
        encode(write_file(params))
    }
}

impl OneShot for m::FsCreateDirectory {
    fn take_sandbox(params: &mut CreateDirectoryParams) -> Option<FileSystemSandboxContext> {
        params.sandbox.take()
    }
    fn touches(params: &CreateDirectoryParams) -> Vec<(&PathUri, bool)> {
        vec![(&params.path, true)]
    }
    fn run(params: CreateDirectoryParams) -> Result<Value, FsError> {
        let path = host_path(&params.path)?;
        let recursive = params.recursive.unwrap_or(true);
        ops::create_directory(&path, recursive, follow(params.follow_symlinks))?;
        crate::sandbox::protected::claim(&path);
        encode(Ok(EmptyResult {}))
    }
}

impl OneShot for m::FsGetMetadata {
    fn take_sandbox(params: &mut GetMetadataParams) -> Option<FileSystemSandboxContext> {
        params.sandbox.take()
    }
    fn touches(params: &GetMetadataParams) -> Vec<(&PathUri, bool)> {
        vec![(&params.path, false)]
    }
    fn run(params: GetMetadataParams) -> Result<Value, FsError> {
        let path = host_path(&params.path)?;
        encode(ops::metadata(&path, follow(params.follow_symlinks)))
    }
}

impl OneShot for m::FsReadDirectory {
    fn take_sandbox(params: &mut PathParams) -> Option<FileSystemSandboxContext> {
        params.sandbox.take()
    }
    fn touches(params: &PathParams) -> Vec<(&PathUri, bool)> {
        vec![(&params.path, false)]
    }
    fn run(params: PathParams) -> Result<Value, FsError> {
        encode(ops::read_directory(&host_path(&params.path)?))
    }
    fn hide_placeholders(dir: &Path, result: &mut Value, is_placeholder: &dyn Fn(&Path) -> bool) {
        let Ok(mut listing) = ReadDirectoryResult::deserialize(&*result) else {
            return;
        };
        listing
            .entries
            .retain(|entry| !is_placeholder(&dir.join(&entry.file_name)));
        *result = serde_json::to_value(listing).expect("wire types always serialize");
    }
}

impl OneShot for m::FsRemove {
    fn take_sandbox(params: &mut RemoveParams) -> Option<FileSystemSandboxContext> {
        params.sandbox.take()
    }
    fn touches(params: &RemoveParams) -> Vec<(&PathUri, bool)> {
        vec![(&params.path, true)]
    }
    fn run(params: RemoveParams) -> Result<Value, FsError> {
        let path = host_path(&params.path)?;
        // The path itself is never followed: a symlink is unlinked, or, with followSymlinks
        // false, refused (as upstream), and its parents are not followed either.
        let follow = follow(params.follow_symlinks);
        super::host::refuse_symlinked_parents(&path, follow)?;
        if !follow {
            super::host::refuse_symlink(&path)?;
        }
        let recursive = params.recursive.unwrap_or(true);
        let force = params.force.unwrap_or(true);
        crate::sandbox::protected::remove_with(
            &path,
            || ops::remove(&path, recursive, force),
            |err| FsError::io(err, &path),
        )?;
        encode(Ok(EmptyResult {}))
    }
}

impl OneShot for m::FsCopy {
    fn take_sandbox(params: &mut CopyParams) -> Option<FileSystemSandboxContext> {
        params.sandbox.take()
    }
    fn touches(params: &CopyParams) -> Vec<(&PathUri, bool)> {
        vec![
            (&params.source_path, false),
            (&params.destination_path, true),
        ]
    }
    fn run(params: CopyParams) -> Result<Value, FsError> {
        let source = host_path(&params.source_path)?;
        let destination = host_path(&params.destination_path)?;
        copy::copy(&source, &destination, params.recursive)?;
        encode(Ok(EmptyResult {}))
    }
}

/// A rename changes both directories.
impl OneShot for m::FsRename {
    fn take_sandbox(params: &mut RenameParams) -> Option<FileSystemSandboxContext> {
        params.sandbox.take()
    }
    fn touches(params: &RenameParams) -> Vec<(&PathUri, bool)> {
        vec![
            (&params.source_path, true),
            (&params.destination_path, true),
        ]
    }
    fn run(params: RenameParams) -> Result<Value, FsError> {
        let source = host_path(&params.source_path)?;
        let destination = host_path(&params.destination_path)?;
        crate::sandbox::protected::rename_with(&source, &destination, || {
            ops::rename(&source, &destination, params.overwrite)
        })
        .map_err(|held| {
            FsError::Refused(format!(
                "`{}` is kept read-only by running sandboxed processes; it can be renamed \
                 once they exit",
                held.display()
            ))
        })??;
        encode(Ok(EmptyResult {}))
    }
}

impl OneShot for m::FsCanonicalize {
    fn take_sandbox(params: &mut PathParams) -> Option<FileSystemSandboxContext> {
        params.sandbox.take()
    }
    fn touches(params: &PathParams) -> Vec<(&PathUri, bool)> {
        vec![(&params.path, false)]
    }
    fn run(params: PathParams) -> Result<Value, FsError> {
        let path = ops::canonicalize(&host_path(&params.path)?)?;
        encode(Ok(CanonicalizeResult { path }))
    }
}

impl OneShot for m::FsWalk {
    fn take_sandbox(params: &mut WalkParams) -> Option<FileSystemSandboxContext> {
        params.sandbox.take()
    }
    fn touches(params: &WalkParams) -> Vec<(&PathUri, bool)> {
        vec![(&params.path, false)]
    }
    fn run(params: WalkParams) -> Result<Value, FsError> {
        walk::validate(&params.options)?;
        let path = host_path(&params.path)?;
        encode(walk::walk(&path, params.options))
    }
    fn hide_placeholders(_root: &Path, result: &mut Value, is_placeholder: &dyn Fn(&Path) -> bool) {
        let Ok(mut walk) = WalkResult::deserialize(&*result) else {
            return;
        };
        walk.entries.retain(|entry| {
            entry
                .path
                .to_path()
                .map_or(true, |path| !is_placeholder(&path))
        });
        *result = serde_json::to_value(walk).expect("wire types always serialize");
    }
}

/// The host paths of [`OneShot::touches`]; paths that do not convert are left out (the
/// operation refuses them).
pub(crate) fn host_touches<M: OneShot>(params: &M::Params) -> Vec<(PathBuf, bool)> {
    M::touches(params)
        .into_iter()
        .filter_map(|(uri, write)| Some((uri.to_path().ok()?, write)))
        .collect()
}

fn encode<T: Serialize>(result: Result<T, FsError>) -> Result<Value, FsError> {
    result.map(|value| serde_json::to_value(value).expect("wire types always serialize"))
}

pub(super) fn follow(value: Option<bool>) -> bool {
    value.unwrap_or(true)
}

/// Builds the result without a serde round trip, so the (possibly huge) base64 string is
/// moved into the reply, never copied.
fn read_file(params: ReadFileParams) -> Result<Value, FsError> {
    let path = host_path(&params.path)?;
    let limit = params
        .max_bytes
        .map_or(MAX_READ_FILE_BYTES, |max| max.min(MAX_READ_FILE_BYTES));
    let data = file::read_base64(&path, follow(params.follow_symlinks), limit)?;
    let mut result = serde_json::Map::new();
    result.insert("dataBase64".into(), Value::String(data));
    Ok(Value::Object(result))
}

fn write_file(params: WriteFileParams) -> Result<EmptyResult, FsError> {
    let path = host_path(&params.path)?;
    let data = base64::engine::general_purpose::STANDARD
        .decode(params.data_base64)
        .map_err(|err| {
            FsError::refused(format!(
                "fs/writeFile requires valid base64 dataBase64: {err}"
            ))
        })?;
    file::write(&path, &data, follow(params.follow_symlinks), params.atomic)?;
    Ok(EmptyResult {})
}
