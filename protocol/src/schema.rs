//! JSON Schema for every wire message, keyed by method and direction.

use crate::{environment, fs, http, process, rpc, session};
use schemars::{schema_for, Schema};

/// `(name, schema)` for each message: `<method>.params`, `<method>.result`, notifications'
/// params, and the envelope itself.
pub fn all() -> Vec<(&'static str, Schema)> {
    vec![
        ("message", schema_for!(rpc::Message)),
        ("initialize.params", schema_for!(session::InitializeParams)),
        ("initialize.result", schema_for!(session::InitializeResult)),
        ("process/start.params", schema_for!(process::StartParams)),
        ("process/start.result", schema_for!(process::StartResult)),
        ("process/read.params", schema_for!(process::ReadParams)),
        ("process/read.result", schema_for!(process::ReadResult)),
        ("process/write.params", schema_for!(process::WriteParams)),
        ("process/write.result", schema_for!(process::WriteResult)),
        ("process/signal.params", schema_for!(process::SignalParams)),
        (
            "process/terminate.params",
            schema_for!(process::ProcessIdParams),
        ),
        (
            "process/terminate.result",
            schema_for!(process::TerminateResult),
        ),
        ("process/resize.params", schema_for!(process::ResizeParams)),
        (
            "process/closeStdin.params",
            schema_for!(process::ProcessIdParams),
        ),
        (
            "process/output.params",
            schema_for!(process::OutputNotification),
        ),
        (
            "process/exited.params",
            schema_for!(process::ExitedNotification),
        ),
        (
            "process/closed.params",
            schema_for!(process::ClosedNotification),
        ),
        ("fs/readFile.params", schema_for!(fs::ReadFileParams)),
        ("fs/readFile.result", schema_for!(fs::ReadFileResult)),
        ("fs/writeFile.params", schema_for!(fs::WriteFileParams)),
        ("fs/writeFile.result", schema_for!(fs::EmptyResult)),
        (
            "fs/createDirectory.params",
            schema_for!(fs::CreateDirectoryParams),
        ),
        ("fs/createDirectory.result", schema_for!(fs::EmptyResult)),
        ("fs/getMetadata.params", schema_for!(fs::GetMetadataParams)),
        ("fs/getMetadata.result", schema_for!(fs::Metadata)),
        ("fs/readDirectory.params", schema_for!(fs::PathParams)),
        (
            "fs/readDirectory.result",
            schema_for!(fs::ReadDirectoryResult),
        ),
        ("fs/remove.params", schema_for!(fs::RemoveParams)),
        ("fs/remove.result", schema_for!(fs::EmptyResult)),
        ("fs/copy.params", schema_for!(fs::CopyParams)),
        ("fs/copy.result", schema_for!(fs::EmptyResult)),
        ("fs/rename.params", schema_for!(fs::RenameParams)),
        ("fs/rename.result", schema_for!(fs::EmptyResult)),
        ("fs/canonicalize.params", schema_for!(fs::PathParams)),
        (
            "fs/canonicalize.result",
            schema_for!(fs::CanonicalizeResult),
        ),
        ("fs/walk.params", schema_for!(fs::WalkParams)),
        ("fs/walk.result", schema_for!(fs::WalkResult)),
        ("fs/open.params", schema_for!(fs::OpenParams)),
        ("fs/open.result", schema_for!(fs::HandleResult)),
        ("fs/readBlock.params", schema_for!(fs::ReadBlockParams)),
        ("fs/readBlock.result", schema_for!(fs::ReadBlockResult)),
        ("fs/writeBlock.params", schema_for!(fs::WriteBlockParams)),
        ("fs/writeBlock.result", schema_for!(fs::WriteBlockResult)),
        ("fs/close.params", schema_for!(fs::CloseParams)),
        ("fs/close.result", schema_for!(fs::EmptyResult)),
        ("fs/watch.params", schema_for!(fs::WatchParams)),
        ("fs/watch.result", schema_for!(fs::WatchResult)),
        ("fs/unwatch.params", schema_for!(fs::UnwatchParams)),
        ("fs/unwatch.result", schema_for!(fs::EmptyResult)),
        ("fs/changed.params", schema_for!(fs::ChangedNotification)),
        (
            "environment/info.result",
            schema_for!(environment::EnvironmentInfo),
        ),
        (
            "environment/status.result",
            schema_for!(environment::EnvironmentStatus),
        ),
        ("http/request.params", schema_for!(http::HttpRequestParams)),
        ("http/request.result", schema_for!(http::HttpRequestResult)),
        (
            "http/request/bodyDelta.params",
            schema_for!(http::HttpBodyDelta),
        ),
    ]
}
