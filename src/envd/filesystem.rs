//! `filesystem.Filesystem`: stat, list, make, move and remove, as envd words their answers;
//! paths resolved for the Basic-auth user (relative ones from its home), made directories
//! handed to that user. Each call runs on a blocking thread.

use super::confine;
use super::connect::{body_bytes, no_method, server_stream, unary, Code, ConnectError};
use super::entry::{blocking, entry_info, internal, is_artifact};
use super::messages::*;
use super::users::Account;
use super::Envd;
use crate::fs::sandbox::Confined;
use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use exec_server_protocol::fs::{RemoveParams, RenameParams};
use exec_server_protocol::methods as m;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(super) async fn rpc(envd: Arc<Envd>, method: &str, headers: HeaderMap, body: Body) -> Response {
    let h = &headers;
    if method == "WatchDir" {
        let headers = headers.clone();
        return server_stream(h, body, move |request, events| {
            envd.watch_dir(headers, request, events)
        })
        .await;
    }
    let account = envd.accounts.of_request(h);
    let within = envd.daemon.config.upgrade_timeout;
    let (body, account) = match (body_bytes(body, within).await, account) {
        (Ok(body), Ok(account)) => (body, account),
        (Err(error), _) | (_, Err(error)) => return error.into_response(),
    };
    let confined = match envd.confined(&account) {
        Ok(confined) => confined,
        Err(error) => return error.into_response(),
    };
    let watchers = &envd.watchers;
    match method {
        "CreateWatcher" => {
            unary(h, body, async |r: WatchRequest| {
                envd.create_watcher(&account, r).await
            })
            .await
        }
        "GetWatcherEvents" => {
            unary(h, body, async |r: WatcherId| watchers.events(&r.watcher_id)).await
        }
        "RemoveWatcher" => {
            unary(h, body, async |r: WatcherId| watchers.remove(&r.watcher_id)).await
        }
        _ => path_rpc(method, h, body, account, confined.as_ref()).await,
    }
}

/// The calls on paths, each run on a blocking thread, or by the sandbox helper when the
/// listener's profile restricts (`confine`).
async fn path_rpc(
    method: &str,
    h: &HeaderMap,
    body: Bytes,
    account: Account,
    confined: Option<&Confined>,
) -> Response {
    let account = &account;
    match method {
        "Stat" => {
            unary(h, body, async |r: PathRequest| {
                stat(account.resolve(&r.path), confined).await
            })
            .await
        }
        "MakeDir" => {
            unary(h, body, async |r: PathRequest| {
                make_dir(account.resolve(&r.path), account, confined).await
            })
            .await
        }
        "Move" => {
            unary(h, body, async |r: MoveRequest| {
                let (from, to) = (account.resolve(&r.source), account.resolve(&r.destination));
                rename(from, to, account, confined).await
            })
            .await
        }
        "ListDir" => {
            unary(h, body, async |r: ListDirRequest| {
                let (path, depth) = (account.resolve(&r.path), r.depth.max(1));
                match confined {
                    Some(confined) => confine::list_dir(confined, &path, depth).await,
                    None => blocking(move || list_dir(&path, depth)).await,
                }
            })
            .await
        }
        "Remove" => {
            unary(h, body, async |r: PathRequest| {
                remove(account.resolve(&r.path), confined).await
            })
            .await
        }
        other => no_method("filesystem.Filesystem", other),
    }
}

async fn stat(path: PathBuf, confined: Option<&Confined>) -> Result<EntryResponse, ConnectError> {
    if let Some(confined) = confined {
        let entry = confine::stat(confined, &path).await?;
        return Ok(EntryResponse { entry });
    }
    blocking(move || {
        Ok(EntryResponse {
            entry: entry_info(&path)?,
        })
    })
    .await
}

/// Creates `dir` and its missing parents, each handed to `account` (as envd's EnsureDirs).
pub(super) fn ensure_dirs(dir: &Path, account: &Account) -> Result<(), ConnectError> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(path) = at.filter(|path| std::fs::symlink_metadata(path).is_err()) {
        missing.push(path.to_path_buf());
        at = path.parent();
    }
    for path in missing.into_iter().rev() {
        match std::fs::create_dir(&path) {
            Ok(()) => chown(&path, account)?,
            Err(err) if err.kind() == ErrorKind::AlreadyExists => {}
            Err(err) => return Err(internal("error creating directory", err)),
        }
    }
    Ok(())
}

pub(super) fn chown(path: &Path, account: &Account) -> Result<(), ConnectError> {
    if !account.is_other() {
        return Ok(());
    }
    std::os::unix::fs::lchown(path, Some(account.uid), Some(account.gid))
        .map_err(|err| internal("error changing ownership", err))
}

async fn make_dir(
    path: PathBuf,
    account: &Account,
    confined: Option<&Confined>,
) -> Result<EntryResponse, ConnectError> {
    absent(&path, confine::is_dir(confined, &path).await?)?;
    match confined {
        Some(confined) => confine::make_dirs(confined, &path).await?,
        None => {
            let (path, account) = (path.clone(), account.clone());
            blocking(move || ensure_dirs(&path, &account)).await?
        }
    }
    stat(path, confined).await
}

/// Fails as envd's MakeDir does when something is at `path` already (`existing`: whether it
/// is a directory).
fn absent(path: &Path, existing: Option<bool>) -> Result<(), ConnectError> {
    match existing {
        Some(true) => {
            let message = format!("directory already exists: {}", path.display());
            Err(ConnectError::new(Code::AlreadyExists, message))
        }
        Some(false) => {
            let message = format!(
                "path already exists but it is not a directory: {}",
                path.display()
            );
            Err(ConnectError::new(Code::InvalidArgument, message))
        }
        None => Ok(()),
    }
}

async fn rename(
    from: PathBuf,
    to: PathBuf,
    account: &Account,
    confined: Option<&Confined>,
) -> Result<EntryResponse, ConnectError> {
    let Some(confined) = confined else {
        let account = account.clone();
        return blocking(move || rename_here(&from, &to, &account)).await;
    };
    if let Some(parent) = to.parent() {
        confine::make_dirs(confined, parent).await?;
    }
    let params = RenameParams {
        source_path: confine::uri(&from)?,
        destination_path: confine::uri(&to)?,
        overwrite: true,
        sandbox: None,
    };
    confine::run::<m::FsRename>(confined, params).await?;
    stat(to, Some(confined)).await
}

fn rename_here(from: &Path, to: &Path, account: &Account) -> Result<EntryResponse, ConnectError> {
    if let Some(parent) = to.parent() {
        ensure_dirs(parent, account)?;
    }
    std::fs::rename(from, to).map_err(|err| match err.kind() {
        ErrorKind::NotFound => {
            ConnectError::new(Code::NotFound, format!("source file not found: {err}"))
        }
        _ => internal("error renaming", err),
    })?;
    Ok(EntryResponse {
        entry: entry_info(to)?,
    })
}

async fn remove(path: PathBuf, confined: Option<&Confined>) -> Result<Empty, ConnectError> {
    let Some(confined) = confined else {
        return blocking(move || remove_here(&path)).await;
    };
    let params = RemoveParams {
        path: confine::uri(&path)?,
        recursive: Some(true),
        force: Some(true),
        follow_symlinks: None,
        sandbox: None,
    };
    confine::run::<m::FsRemove>(confined, params).await?;
    Ok(Empty {})
}

/// Removes a file or a whole tree; a missing path is no error (Go's `os.RemoveAll`).
fn remove_here(path: &Path) -> Result<Empty, ConnectError> {
    let outcome = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(err) => Err(err),
    };
    match outcome {
        Ok(()) => Ok(Empty {}),
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(Empty {}),
        Err(err) => Err(internal("error removing file or directory", err)),
    }
}

/// The entries under `dir` down to `depth` levels, named by the path asked for (not the one
/// a symlink leads to), entries vanishing meanwhile left out.
fn list_dir(dir: &Path, depth: u32) -> Result<ListDirResponse, ConnectError> {
    let resolved = std::fs::canonicalize(dir).map_err(|err| match err.kind() {
        ErrorKind::NotFound => ConnectError::new(Code::NotFound, format!("path not found: {err}")),
        _ => internal("error resolving symlink", err),
    })?;
    if !resolved.is_dir() {
        let message = format!("path is not a directory: {}", dir.display());
        return Err(ConnectError::new(Code::InvalidArgument, message));
    }
    let mut entries = Vec::new();
    let mut pending: Vec<(PathBuf, u32)> = vec![(PathBuf::new(), 1)];
    while let Some((relative, level)) = pending.pop() {
        let read = std::fs::read_dir(resolved.join(&relative))
            .map_err(|err| internal(&format!("error reading directory {}", dir.display()), err))?;
        let mut names: Vec<_> = read
            .filter_map(Result::ok)
            .map(|entry| entry.file_name())
            .collect();
        names.sort();
        for name in names.into_iter().rev() {
            let relative = relative.join(&name);
            if is_artifact(&resolved.join(&relative)) {
                continue;
            }
            let Ok(mut entry) = entry_info(&resolved.join(&relative)) else {
                continue;
            };
            entry.path = dir.join(&relative).display().to_string();
            let is_dir =
                std::fs::symlink_metadata(resolved.join(&relative)).is_ok_and(|meta| meta.is_dir());
            if is_dir && level < depth {
                pending.push((relative, level + 1));
            }
            entries.push(entry);
        }
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(ListDirResponse { entries })
}
