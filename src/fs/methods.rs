//! The `fs/*` methods: decode, pass the sandbox gate, then run the blocking work off the
//! runtime, or confined in the sandbox helper.

use super::handles::Handle;
use super::host::{blocking, host_path, id_or_new};
use super::oneshot::{follow, Request};
use super::read_stream;
use super::sandbox::{refuse, route, Route};
use super::WatchBudget;
use crate::rpc::dispatch::{decode, encode, RequestCtx};
use crate::rpc::reply::Success;
use crate::rpc::RpcError;
use exec_server_protocol::fs::*;
use exec_server_protocol::rpc::method;
use serde_json::Value;
use std::sync::Mutex;

pub async fn handle(
    ctx: &RequestCtx,
    name: &str,
    params: Option<Value>,
) -> Result<Success, RpcError> {
    let json = match name {
        method::FS_OPEN => encode(open(ctx, decode(params)?).await),
        method::FS_READ_BLOCK => return read_block(ctx, decode(params)?).await,
        method::FS_WRITE_BLOCK => encode(write_block(ctx, decode(params)?).await),
        method::FS_CLOSE => encode(close(ctx, decode(params)?).await),
        method::FS_WATCH => encode(watch(ctx, decode(params)?).await),
        method::FS_UNWATCH => encode(unwatch(ctx, decode(params)?).await),
        _ => match Request::decode(name, params) {
            Some(request) => {
                let mut request = request?;
                if let Request::ReadFile(params) = &mut request {
                    budget_read_file(ctx, params).await;
                }
                one_shot(request).await
            }
            None => Err(RpcError::method_not_found(name)),
        },
    };
    json.map(Success::Json)
}

/// Applies the daemon's cap on whole-file reads (the helper reads `maxBytes` too) and reserves
/// outbound budget for the reply: the encoded file, twice, as the reply `Value` and its text
/// exist together for a moment. A size that cannot be known (stat fails, or 0 under /proc)
/// reserves for the cap.
async fn budget_read_file(ctx: &RequestCtx, params: &mut ReadFileParams) {
    let cap = ctx.connection.registry.config.max_read_file_bytes;
    let limit = params.max_bytes.map_or(cap, |max| max.min(cap));
    params.max_bytes = Some(limit);
    let size = match host_path(&params.path) {
        Ok(path) if follow(params.follow_symlinks) => tokio::fs::metadata(path).await,
        Ok(path) => tokio::fs::symlink_metadata(path).await,
        Err(_) => return,
    }
    .map_or(0, |meta| meta.len());
    let size = if size == 0 { limit } else { size.min(limit) };
    let encoded = usize::try_from(size.div_ceil(3) * 4).unwrap_or(usize::MAX);
    ctx.reserve_reply(encoded.saturating_mul(2)).await;
}

/// Past the sandbox gate, the same operation runs in the daemon or confined in the helper.
async fn one_shot(mut request: Request) -> Result<Value, RpcError> {
    match route(request.take_sandbox())? {
        Route::Direct => blocking(move || request.run()).await,
        Route::Confined(confined) => confined.one_shot(request).await,
    }
}

async fn open(ctx: &RequestCtx, mut params: OpenParams) -> Result<HandleResult, RpcError> {
    let handles = &ctx.connection.fs.handles;
    let handle_id = id_or_new(params.handle_id.take(), "file handle")?;
    let reservation = handles.reserve(handle_id.clone())?;
    let handle = match route(params.sandbox.take())? {
        Route::Direct => {
            let path = host_path(&params.path)?;
            let mode = params.mode.unwrap_or_default();
            let follow = follow(params.follow_symlinks);
            blocking(move || Handle::open(&path, mode, follow)).await?
        }
        Route::Confined(confined) => confined.open(params).await?,
    };
    reservation.fill(handle);
    Ok(HandleResult { handle_id })
}

/// The reply is a [`ReadBlockResult`], its chunk kept apart from the JSON.
async fn read_block(ctx: &RequestCtx, params: ReadBlockParams) -> Result<Success, RpcError> {
    let ReadBlockParams {
        handle_id,
        offset,
        len,
    } = params;
    read_stream::check_block(offset, len)?;
    let handles = &ctx.connection.fs.handles;
    let handle = handles
        .get(&handle_id)
        .ok_or_else(|| RpcError::not_found(format!("unknown file read handle `{handle_id}`")))?;
    let id = handle_id.clone();
    let outcome = blocking(move || match &*handle {
        Handle::Read(file) => Ok(read_stream::read_block(file, offset, len)),
        Handle::Write(_) => Err(not_open_for(&id, "reading")),
    })
    .await?;
    match outcome {
        Ok((chunk, eof)) => Ok(Success::WithChunk {
            result: serde_json::Map::from_iter([("eof".to_owned(), eof.into())]),
            chunk,
        }),
        Err(err) => {
            // A failed read closes the handle, as in the reference.
            handles.remove(&handle_id);
            Err(RpcError::from_io(&err))
        }
    }
}

fn not_open_for(handle_id: &str, what: &str) -> RpcError {
    RpcError::invalid_request(format!("file handle `{handle_id}` is not open for {what}"))
}

fn unknown_handle(handle_id: &str) -> RpcError {
    RpcError::not_found(format!("unknown file handle `{handle_id}`"))
}

/// Write errors leave the handle open: the client decides whether to retry or discard.
async fn write_block(
    ctx: &RequestCtx,
    params: WriteBlockParams,
) -> Result<WriteBlockResult, RpcError> {
    let WriteBlockParams {
        handle_id,
        offset,
        chunk,
    } = params;
    let handle = ctx
        .connection
        .fs
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
async fn close(ctx: &RequestCtx, params: CloseParams) -> Result<EmptyResult, RpcError> {
    let Some(handle) = ctx.connection.fs.handles.remove(&params.handle_id) else {
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

async fn watch(ctx: &RequestCtx, params: WatchParams) -> Result<WatchResult, RpcError> {
    refuse(route(params.sandbox)?, method::FS_WATCH)?;
    let watch_id = id_or_new(params.watch_id, "watch")?;
    let path = host_path(&params.path)?;
    let registry = &ctx.connection.registry;
    let budget = WatchBudget {
        daemon: registry.watched_directories.clone(),
        daemon_limit: registry.config.max_watched_directories,
        connection_limit: registry.config.max_watched_directories_per_connection,
    };
    ctx.connection
        .fs
        .watches
        .watch(
            watch_id.clone(),
            path,
            params.recursive,
            ctx.connection.outbound.clone(),
            budget,
        )
        .await?;
    Ok(WatchResult { watch_id })
}

async fn unwatch(ctx: &RequestCtx, params: UnwatchParams) -> Result<EmptyResult, RpcError> {
    ctx.connection.fs.watches.unwatch(&params.watch_id).await;
    Ok(EmptyResult {})
}
