//! The one-shot `fs/*` methods (everything but streams and watches) as one value: decoded from
//! the wire, then run to completion as blocking work with the same code either by the daemon
//! (no restricting sandbox) or by the sandbox helper, confined (`helper`).

use super::host::host_path;
use super::{copy, file, ops, walk};
use crate::rpc::dispatch::{decode, encode};
use crate::rpc::RpcError;
use base64::Engine as _;
use exec_server_protocol::fs::*;
use exec_server_protocol::rpc::method;
use exec_server_protocol::sandbox::FileSystemSandboxContext;
use serde_json::Value;
use std::path::PathBuf;

pub enum Request {
    ReadFile(ReadFileParams),
    WriteFile(WriteFileParams),
    CreateDirectory(CreateDirectoryParams),
    GetMetadata(GetMetadataParams),
    ReadDirectory(PathParams),
    Remove(RemoveParams),
    Copy(CopyParams),
    Rename(RenameParams),
    Canonicalize(PathParams),
    Walk(WalkParams),
}

impl Request {
    /// None when `name` is not a one-shot method.
    pub fn decode(name: &str, params: Option<Value>) -> Option<Result<Self, RpcError>> {
        Some(match name {
            method::FS_READ_FILE => decode(params).map(Self::ReadFile),
            method::FS_WRITE_FILE => decode(params).map(Self::WriteFile),
            method::FS_CREATE_DIRECTORY => decode(params).map(Self::CreateDirectory),
            method::FS_GET_METADATA => decode(params).map(Self::GetMetadata),
            method::FS_READ_DIRECTORY => decode(params).map(Self::ReadDirectory),
            method::FS_REMOVE => decode(params).map(Self::Remove),
            method::FS_COPY => decode(params).map(Self::Copy),
            method::FS_RENAME => decode(params).map(Self::Rename),
            method::FS_CANONICALIZE => decode(params).map(Self::Canonicalize),
            method::FS_WALK => decode(params).map(Self::Walk),
            _ => return None,
        })
    }

    pub fn method(&self) -> &'static str {
        match self {
            Self::ReadFile(_) => method::FS_READ_FILE,
            Self::WriteFile(_) => method::FS_WRITE_FILE,
            Self::CreateDirectory(_) => method::FS_CREATE_DIRECTORY,
            Self::GetMetadata(_) => method::FS_GET_METADATA,
            Self::ReadDirectory(_) => method::FS_READ_DIRECTORY,
            Self::Remove(_) => method::FS_REMOVE,
            Self::Copy(_) => method::FS_COPY,
            Self::Rename(_) => method::FS_RENAME,
            Self::Canonicalize(_) => method::FS_CANONICALIZE,
            Self::Walk(_) => method::FS_WALK,
        }
    }

    /// Takes the `sandbox` out, leaving the params the helper receives.
    pub fn take_sandbox(&mut self) -> Option<FileSystemSandboxContext> {
        match self {
            Self::ReadFile(p) => p.sandbox.take(),
            Self::WriteFile(p) => p.sandbox.take(),
            Self::CreateDirectory(p) => p.sandbox.take(),
            Self::GetMetadata(p) => p.sandbox.take(),
            Self::ReadDirectory(p) | Self::Canonicalize(p) => p.sandbox.take(),
            Self::Remove(p) => p.sandbox.take(),
            Self::Copy(p) => p.sandbox.take(),
            Self::Rename(p) => p.sandbox.take(),
            Self::Walk(p) => p.sandbox.take(),
        }
    }

    pub fn params(&self) -> Value {
        let value = match self {
            Self::ReadFile(p) => serde_json::to_value(p),
            Self::WriteFile(p) => serde_json::to_value(p),
            Self::CreateDirectory(p) => serde_json::to_value(p),
            Self::GetMetadata(p) => serde_json::to_value(p),
            Self::ReadDirectory(p) | Self::Canonicalize(p) => serde_json::to_value(p),
            Self::Remove(p) => serde_json::to_value(p),
            Self::Copy(p) => serde_json::to_value(p),
            Self::Rename(p) => serde_json::to_value(p),
            Self::Walk(p) => serde_json::to_value(p),
        };
        value.expect("wire types always serialize")
    }

    /// The host paths the operation reads (false) or changes (true); a rename changes both
    /// directories. Paths that do not convert are left out (the operation refuses them).
    pub fn touches(&self) -> Vec<(PathBuf, bool)> {
        let paths: Vec<(&exec_server_protocol::PathUri, bool)> = match self {
            Self::ReadFile(p) => vec![(&p.path, false)],
            Self::WriteFile(p) => vec![(&p.path, true)],
            Self::CreateDirectory(p) => vec![(&p.path, true)],
            Self::GetMetadata(p) => vec![(&p.path, false)],
            Self::ReadDirectory(p) | Self::Canonicalize(p) => vec![(&p.path, false)],
            Self::Remove(p) => vec![(&p.path, true)],
            Self::Copy(p) => vec![(&p.source_path, false), (&p.destination_path, true)],
            Self::Rename(p) => vec![(&p.source_path, true), (&p.destination_path, true)],
            Self::Walk(p) => vec![(&p.path, false)],
        };
        paths
            .into_iter()
            .filter_map(|(uri, write)| Some((uri.to_path().ok()?, write)))
            .collect()
    }

    /// Runs the operation here and now (blocking).
    pub fn run(self) -> Result<Value, RpcError> {
        match self {
            Self::ReadFile(params) => read_file(params),
            Self::WriteFile(params) => encode(write_file(params)),
            Self::CreateDirectory(params) => {
                let path = host_path(&params.path)?;
                let recursive = params.recursive.unwrap_or(true);
                ops::create_directory(&path, recursive, follow(params.follow_symlinks))?;
                encode(Ok(EmptyResult {}))
            }
            Self::GetMetadata(params) => {
                let path = host_path(&params.path)?;
                encode(ops::metadata(&path, follow(params.follow_symlinks)))
            }
            Self::ReadDirectory(params) => encode(ops::read_directory(&host_path(&params.path)?)),
            Self::Remove(params) => {
                let path = host_path(&params.path)?;
                let recursive = params.recursive.unwrap_or(true);
                let force = params.force.unwrap_or(true);
                ops::remove(&path, recursive, force)?;
                encode(Ok(EmptyResult {}))
            }
            Self::Copy(params) => {
                let source = host_path(&params.source_path)?;
                let destination = host_path(&params.destination_path)?;
                copy::copy(&source, &destination, params.recursive)?;
                encode(Ok(EmptyResult {}))
            }
            Self::Rename(params) => {
                let source = host_path(&params.source_path)?;
                let destination = host_path(&params.destination_path)?;
                ops::rename(&source, &destination, params.overwrite)?;
                encode(Ok(EmptyResult {}))
            }
            Self::Canonicalize(params) => {
                let path = ops::canonicalize(&host_path(&params.path)?)?;
                encode(Ok(CanonicalizeResult { path }))
            }
            Self::Walk(params) => {
                walk::validate(&params.options)?;
                let path = host_path(&params.path)?;
                encode(Ok(walk::walk(&path, params.options)))
            }
        }
    }
}

pub fn follow(value: Option<bool>) -> bool {
    value.unwrap_or(true)
}

/// Builds the result without a serde round trip, so the (possibly huge) base64 string is
/// moved into the reply, never copied.
fn read_file(params: ReadFileParams) -> Result<Value, RpcError> {
    let path = host_path(&params.path)?;
    let limit = params
        .max_bytes
        .map_or(MAX_READ_FILE_BYTES, |max| max.min(MAX_READ_FILE_BYTES));
    let data = file::read_base64(&path, follow(params.follow_symlinks), limit)?;
    let mut result = serde_json::Map::new();
    result.insert("dataBase64".into(), Value::String(data));
    Ok(Value::Object(result))
}

fn write_file(params: WriteFileParams) -> Result<EmptyResult, RpcError> {
    let path = host_path(&params.path)?;
    let data = base64::engine::general_purpose::STANDARD
        .decode(params.data_base64)
        .map_err(|err| {
            RpcError::invalid_request(format!(
                "fs/writeFile requires valid base64 dataBase64: {err}"
            ))
        })?;
    file::write(&path, &data, follow(params.follow_symlinks), params.atomic)?;
    Ok(EmptyResult {})
}
