//! The `fs/*` methods: decode, pass the sandbox gate, then run the blocking work off the
//! runtime, or confined in the sandbox helper.

use super::handles::Handle;
use super::host::{blocking, host_path, id_or_new};
use super::oneshot::{follow, OneShot};
use super::sandbox::{refuse, route, Route};
use super::FsError;
use super::{read_stream, ConnectionFs, WatchBudget};
use crate::config::Config;
use crate::rpc::outbound::Outbound;
use crate::rpc::reply::Success;
use crate::rpc::Call;
use exec_server_protocol::fs::*;
use exec_server_protocol::rpc::method;
use std::sync::Mutex;

/// A one-shot method, past the sandbox gate: run in the daemon or confined in the helper.
pub(crate) async fn one_shot<M: OneShot>(
    call: &Call,
    config: &Config,
    mut params: M::Params,
) -> Result<Success, FsError> {
    if let Some(bytes) = M::reply_budget(&mut params, config).await {
        call.reserve_reply(bytes).await;
    }
    let listed = M::touches(&params)
        .first()
        .and_then(|(uri, _)| uri.to_path().ok());
    let mut result = run_routed::<M>(&route(M::take_sandbox(&mut params))?, params).await?;
    if let Some(listed) = listed {
        M::hide_placeholders(
            &listed,
            &mut result,
            &crate::sandbox::protected::is_placeholder,
        );
    }
    Ok(Success::Json(result))
}

/// Runs a one-shot operation whose sandbox was already routed: here, or in the helper.
pub(crate) async fn run_routed<M: OneShot>(
    route: &Route,
    params: M::Params,
) -> Result<serde_json::Value, FsError> {
    match route {
        Route::Direct => blocking(move || M::run(params)).await,
        Route::Confined(confined) => confined.one_shot::<M>(params).await,
    }
}

pub(crate) async fn open(
    fs: &ConnectionFs,
    mut params: OpenParams,
) -> Result<HandleResult, FsError> {
    let handles = &fs.handles;
    let handle_id = id_or_new(params.handle_id.take(), "file handle")?;
    let reservation = handles.reserve(handle_id.clone())?;
    let handle = match route(params.sandbox.take())? {
        Route::Direct => {
            let path = host_path(&params.path)?;
            let mode = params.mode.unwrap_or_default();
            let follow = follow(params.follow_symlinks);
            blocking(move || Handle::open(&path, mode, follow)).await?
        }
        Route::Confined(confined) => {
            let (file, transfer) = confined.open(params).await?;
            Handle::from_transfer(file, transfer, confined)?
        }
    };
    reservation.fill(handle);
    Ok(HandleResult { handle_id })
}

/// The reply is a [`ReadBlockResult`], its chunk kept apart from the JSON.
pub(crate) async fn read_block(
    fs: &ConnectionFs,
    params: ReadBlockParams,
) -> Result<Success, FsError> {
    let ReadBlockParams {
        handle_id,
        offset,
        len,
    } = params;
    read_stream::check_block(offset, len)?;
    let handles = &fs.handles;
    let handle = handles
        .get(&handle_id)
        .ok_or_else(|| FsError::UnknownHandle(handle_id.clone()))?;
    let id = handle_id.clone();
    let outcome = blocking(move || match &*handle {
        Handle::Read(file) => read_stream::read_block(file, offset, len)
            .map_err(|err| FsError::Io { err, path: None }),
        Handle::Write(_) => Err(not_open_for(&id, "reading")),
    })
    .await;
    // A failed read closes the handle, as in the reference; so does a read a write handle
    // refused (upstream's fails on the write-only descriptor), uncommitted blocks discarded.
    let (chunk, eof) = outcome.inspect_err(|_| drop(handles.remove(&handle_id)))?;
    Ok(Success::WithChunk {
        result: serde_json::Map::from_iter([("eof".to_owned(), eof.into())]),
        chunk,
    })
}

fn not_open_for(handle_id: &str, what: &'static str) -> FsError {
    FsError::NotOpenFor {
        id: handle_id.to_owned(),
        what,
    }
}

fn unknown_handle(handle_id: &str) -> FsError {
    FsError::UnknownHandle(handle_id.to_owned())
}

/// Write errors leave the handle open: the client decides whether to retry or discard.
pub(crate) async fn write_block(
    fs: &ConnectionFs,
    params: WriteBlockParams,
) -> Result<WriteBlockResult, FsError> {
    let WriteBlockParams {
        handle_id,
        offset,
        chunk,
    } = params;
    let handle = fs
        .handles
        .get(&handle_id)
        .ok_or_else(|| unknown_handle(&handle_id))?;
    let next_offset = blocking(move || match &*handle {
        Handle::Write(writer) => match lock(writer).as_mut() {
            Some(writer) => writer.write_block(offset, &chunk.0),
            None => Err(unknown_handle(&handle_id)),
        },
        Handle::Read(_) => Err(not_open_for(&handle_id, "writing")),
    })
    .await?;
    Ok(WriteBlockResult { next_offset })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// Idempotent. A `replace` handle is committed here (unless `discard`), after any block
/// still being written.
pub(crate) async fn close(fs: &ConnectionFs, params: CloseParams) -> Result<EmptyResult, FsError> {
    let Some(handle) = fs.handles.remove(&params.handle_id) else {
        return Ok(EmptyResult {});
    };
    if let Handle::Write(_) = &*handle {
        let discard = params.discard;
        let pending = blocking(move || match &*handle {
            Handle::Write(writer) => match lock(writer).take() {
                Some(writer) => writer.finish(discard),
                None => Ok(None),
            },
            Handle::Read(_) => Ok(None),
        })
        .await?;
        if let Some((name, confined)) = pending {
            confined.install(name).await?;
        }
    }
    Ok(EmptyResult {})
}

/// Changes are sent to `outbound` as `fs/changed`; `budget` bounds the directories watched.
pub(crate) async fn watch(
    fs: &ConnectionFs,
    budget: WatchBudget,
    outbound: &Outbound,
    params: WatchParams,
) -> Result<WatchResult, FsError> {
    refuse(route(params.sandbox)?, method::FS_WATCH)?;
    let watch_id = id_or_new(params.watch_id, "watch")?;
    let path = host_path(&params.path)?;
    fs.watches
        .watch(
            watch_id.clone(),
            path,
            params.recursive,
            outbound.clone(),
            budget,
        )
        .await?;
    Ok(WatchResult { watch_id })
}

/// A missing-path watch fires `fs/missingChanged` on `outbound`, within `budget`.
pub(crate) async fn watch_missing(
    fs: &ConnectionFs,
    budget: WatchBudget,
    outbound: &Outbound,
    params: WatchMissingParams,
) -> Result<WatchMissingResult, FsError> {
    let used = fs.watches.used();
    let watching = fs.missing.watch(params, used, budget, outbound).await?;
    Ok(WatchMissingResult { watching })
}

pub(crate) async fn unwatch(
    fs: &ConnectionFs,
    params: UnwatchParams,
) -> Result<EmptyResult, FsError> {
    fs.watches.unwatch(&params.watch_id).await;
    Ok(EmptyResult {})
}
