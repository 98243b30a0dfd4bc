//! The `fs/*` methods: decode, pass the sandbox gate, convert paths, then run the blocking
//! work off the runtime.

use super::handles::Handle;
use super::host::{blocking, host_path, id_or_new, open_regular};
use super::sandbox::{ensure_direct, Sandboxed};
use super::write_stream::WriteHandle;
use super::{copy, file, ops, read_stream, walk};
use crate::rpc::dispatch::{decode, encode, RequestCtx};
use crate::rpc::RpcError;
use base64::Engine as _;
use exec_server_protocol::base64_bytes::Base64Bytes;
use exec_server_protocol::fs::*;
use exec_server_protocol::rpc::method;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Mutex;

pub async fn handle(
    ctx: &RequestCtx,
    name: &str,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    match name {
        method::FS_READ_FILE => read_file(gated(params)?).await,
        method::FS_WRITE_FILE => encode(write_file(gated(params)?).await),
        method::FS_CREATE_DIRECTORY => encode(create_directory(gated(params)?).await),
        method::FS_GET_METADATA => encode(get_metadata(gated(params)?).await),
        method::FS_READ_DIRECTORY => encode(read_directory(gated(params)?).await),
        method::FS_REMOVE => encode(remove(gated(params)?).await),
        method::FS_COPY => encode(copy(gated(params)?).await),
        method::FS_RENAME => encode(rename(gated(params)?).await),
        method::FS_CANONICALIZE => encode(canonicalize(gated(params)?).await),
        method::FS_WALK => encode(walk(gated(params)?).await),
        method::FS_OPEN => encode(open(ctx, gated(params)?).await),
        method::FS_READ_BLOCK => encode(read_block(ctx, decode(params)?).await),
        method::FS_WRITE_BLOCK => encode(write_block(ctx, decode(params)?).await),
        method::FS_CLOSE => encode(close(ctx, decode(params)?).await),
        method::FS_WATCH => encode(watch(ctx, gated(params)?).await),
        method::FS_UNWATCH => encode(unwatch(ctx, decode(params)?).await),
        _ => Err(RpcError::method_not_found(name)),
    }
}

/// Decodes params that name paths and lets them through only if they may run directly.
fn gated<T: DeserializeOwned + Sandboxed>(params: Option<Value>) -> Result<T, RpcError> {
    let params: T = decode(params)?;
    ensure_direct(params.sandbox())?;
    Ok(params)
}

fn follow(value: Option<bool>) -> bool {
    value.unwrap_or(true)
}

/// Builds the result without a serde round trip, so the (possibly huge) base64 string is
/// moved into the reply, never copied.
async fn read_file(params: ReadFileParams) -> Result<Value, RpcError> {
    let path = host_path(&params.path)?;
    let limit = params
        .max_bytes
        .map_or(MAX_READ_FILE_BYTES, |max| max.min(MAX_READ_FILE_BYTES));
    let follow = follow(params.follow_symlinks);
    let data = blocking(move || file::read_base64(&path, follow, limit)).await?;
    let mut result = serde_json::Map::new();
    result.insert("dataBase64".into(), Value::String(data));
    Ok(Value::Object(result))
}

async fn write_file(params: WriteFileParams) -> Result<EmptyResult, RpcError> {
    let path = host_path(&params.path)?;
    let data = base64::engine::general_purpose::STANDARD
        .decode(params.data_base64)
        .map_err(|err| {
            RpcError::invalid_request(format!(
                "fs/writeFile requires valid base64 dataBase64: {err}"
            ))
        })?;
    let follow = follow(params.follow_symlinks);
    let atomic = params.atomic;
    blocking(move || file::write(&path, &data, follow, atomic)).await?;
    Ok(EmptyResult {})
}

async fn create_directory(params: CreateDirectoryParams) -> Result<EmptyResult, RpcError> {
    let path = host_path(&params.path)?;
    let recursive = params.recursive.unwrap_or(true);
    let follow = follow(params.follow_symlinks);
    blocking(move || ops::create_directory(&path, recursive, follow)).await?;
    Ok(EmptyResult {})
}

async fn get_metadata(params: GetMetadataParams) -> Result<Metadata, RpcError> {
    let path = host_path(&params.path)?;
    let follow = follow(params.follow_symlinks);
    blocking(move || ops::metadata(&path, follow)).await
}

async fn read_directory(params: PathParams) -> Result<ReadDirectoryResult, RpcError> {
    let path = host_path(&params.path)?;
    blocking(move || ops::read_directory(&path)).await
}

async fn remove(params: RemoveParams) -> Result<EmptyResult, RpcError> {
    let path = host_path(&params.path)?;
    let recursive = params.recursive.unwrap_or(true);
    let force = params.force.unwrap_or(true);
    blocking(move || ops::remove(&path, recursive, force)).await?;
    Ok(EmptyResult {})
}

async fn copy(params: CopyParams) -> Result<EmptyResult, RpcError> {
    let source = host_path(&params.source_path)?;
    let destination = host_path(&params.destination_path)?;
    let recursive = params.recursive;
    blocking(move || copy::copy(&source, &destination, recursive)).await?;
    Ok(EmptyResult {})
}

async fn rename(params: RenameParams) -> Result<EmptyResult, RpcError> {
    let source = host_path(&params.source_path)?;
    let destination = host_path(&params.destination_path)?;
    let overwrite = params.overwrite;
    blocking(move || ops::rename(&source, &destination, overwrite)).await?;
    Ok(EmptyResult {})
}

async fn canonicalize(params: PathParams) -> Result<CanonicalizeResult, RpcError> {
    let path = host_path(&params.path)?;
    let path = blocking(move || ops::canonicalize(&path)).await?;
    Ok(CanonicalizeResult { path })
}

async fn walk(params: WalkParams) -> Result<WalkResult, RpcError> {
    walk::validate(&params.options)?;
    let path = host_path(&params.path)?;
    let options = params.options;
    blocking(move || Ok(walk::walk(&path, options))).await
}

async fn open(ctx: &RequestCtx, params: OpenParams) -> Result<HandleResult, RpcError> {
    let handles = &ctx.connection.fs.handles;
    let handle_id = id_or_new(params.handle_id, "file read handle")?;
    handles.check_room(&handle_id)?;
    let path = host_path(&params.path)?;
    let follow = follow(params.follow_symlinks);
    let handle = match params.mode.unwrap_or_default() {
        OpenMode::Read => {
            let (file, _) = blocking(move || open_regular(&path, follow)).await?;
            Handle::Read(file)
        }
        mode => {
            let handle = blocking(move || WriteHandle::open(&path, mode, follow)).await?;
            Handle::Write(Mutex::new(Some(handle)))
        }
    };
    handles.insert(handle_id.clone(), handle)?;
    Ok(HandleResult { handle_id })
}

async fn read_block(
    ctx: &RequestCtx,
    params: ReadBlockParams,
) -> Result<ReadBlockResult, RpcError> {
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
        Ok((chunk, eof)) => Ok(ReadBlockResult {
            chunk: Base64Bytes(chunk),
            eof,
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
        blocking(move || match &*handle {
            Handle::Write(writer) => match lock(writer).take() {
                Some(writer) => writer.finish(discard),
                None => Ok(()),
            },
            Handle::Read(_) => Ok(()),
        })
        .await?;
    }
    Ok(EmptyResult {})
}

async fn watch(ctx: &RequestCtx, params: WatchParams) -> Result<WatchResult, RpcError> {
    let watch_id = id_or_new(params.watch_id, "watch")?;
    let path = host_path(&params.path)?;
    ctx.connection
        .fs
        .watches
        .watch(
            watch_id.clone(),
            path,
            params.recursive,
            ctx.connection.outbound.clone(),
        )
        .await?;
    Ok(WatchResult { watch_id })
}

async fn unwatch(ctx: &RequestCtx, params: UnwatchParams) -> Result<EmptyResult, RpcError> {
    ctx.connection.fs.watches.unwatch(&params.watch_id).await;
    Ok(EmptyResult {})
}
