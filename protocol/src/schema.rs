//! JSON Schema for every wire message, keyed by method and direction.

use crate::{environment, http, process, rpc, session};
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
