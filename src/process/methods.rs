//! The `process/*` methods.

use super::spawn::{LaunchSpec, Limits, DEFAULT_SIZE};
use super::{env, Lookup, ManagedProcess};
use crate::rpc::dispatch::{decode, encode, RequestCtx};
use crate::rpc::RpcError;
use crate::sandbox;
use bytes::Bytes;
use exec_server_protocol::base64_bytes::Base64Bytes;
use exec_server_protocol::process::*;
use exec_server_protocol::rpc::method;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

pub async fn handle(
    ctx: &RequestCtx,
    name: &str,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    match name {
        method::PROCESS_START => {
            let params: StartParams = decode(params)?;
            // The client's span context is the launch span's parent; this daemon exports no
            // traces itself, so it is recorded for log correlation.
            let span = tracing::info_span!(
                "process_start",
                process_id = %params.process_id,
                parent = tracing::field::Empty
            );
            if let Some(trace) = &params.trace {
                span.record("parent", tracing::field::display(trace));
            }
            encode(start(ctx, params).instrument(span).await)
        }
        method::PROCESS_READ => encode(read(ctx, decode(params)?).await),
        method::PROCESS_WRITE => encode(write(ctx, decode(params)?)),
        method::PROCESS_SIGNAL => encode(signal(ctx, decode(params)?)),
        method::PROCESS_TERMINATE => encode(terminate(ctx, decode(params)?)),
        method::PROCESS_RESIZE => encode(resize(ctx, decode(params)?)),
        method::PROCESS_CLOSE_STDIN => encode(close_stdin(ctx, decode(params)?)),
        _ => Err(RpcError::method_not_found(name)),
    }
}

async fn start(ctx: &RequestCtx, params: StartParams) -> Result<StartResult, RpcError> {
    let Some((program, args)) = params.argv.split_first() else {
        return Err(RpcError::invalid_params("argv must not be empty"));
    };
    let cwd = params.cwd.to_path().map_err(|err| {
        RpcError::invalid_params(format!(
            "cwd URI `{}` is not valid on this exec-server host: {err}",
            params.cwd
        ))
    })?;
    // A resolution that walks directory trees runs off the async workers.
    let prepared = if params.sandbox.as_ref().is_some_and(sandbox::prepare_walks) {
        let (params, cwd) = (params.clone(), cwd.clone());
        tokio::task::spawn_blocking(move || sandbox::prepare_start(&params, &cwd))
            .await
            .map_err(|err| RpcError::internal(err.to_string()))??
    } else {
        sandbox::prepare_start(&params, &cwd)?
    };
    let (limits, timeout) = limits(params.limits.as_ref())?;
    let env = env::child_env(params.env_policy.as_ref(), &params.env, std::env::vars());
    let spec = LaunchSpec {
        program: program.clone(),
        args: args.to_vec(),
        arg0: params.arg0,
        cwd,
        env,
        tty: params.tty,
        pipe_stdin: params.pipe_stdin,
        stdin_fd: None,
        size: params.size.unwrap_or(DEFAULT_SIZE),
        limits,
    };
    let mut spec = spec;
    let (launch, sandbox_type) = match prepared {
        None => (None, SandboxType::None),
        Some(prepared) => (Some(prepared.launch(&mut spec)?), SandboxType::LinuxSeccomp),
    };
    // A reply never sent (its connection ended) drops the hook, which releases the events too.
    let (replied, on_reply) = tokio::sync::oneshot::channel();
    ctx.after_reply(move || {
        let _ = replied.send(());
    });
    ctx.session
        .processes
        .start(params.process_id.clone(), spec, launch, timeout, on_reply)
        .await?;
    tracing::info!(sandbox = ?sandbox_type, "process started");
    Ok(StartResult {
        process_id: params.process_id,
        sandbox_type,
    })
}

/// Accepted ranges: beyond them a limit is a mistake, not a limit.
const MAX_TIMEOUT_MS: i64 = 30 * 24 * 3600 * 1000;
const MAX_OPEN_FILES: i64 = 1 << 20;
const MAX_CPU_SECONDS: i64 = 365 * 24 * 3600;
const MIN_MEMORY_BYTES: i64 = 1 << 20;
const MAX_MEMORY_BYTES: i64 = 1 << 50;
/// The kernel's own ceiling on pids.
const MAX_PROCESSES: i64 = 1 << 22;

/// Validates `process/start.limits`: per process and per tree, and the timeout.
fn limits(limits: Option<&ProcessLimits>) -> Result<(Limits, Option<Duration>), RpcError> {
    let Some(limits) = limits else {
        return Ok((Limits::default(), None));
    };
    let check = |name: &str, value: Option<i64>, (min, max): (i64, i64)| match value {
        Some(value) if !(min..=max).contains(&value) => Err(RpcError::invalid_params(format!(
            "limits.{name} must be between {min} and {max}, not {value}"
        ))),
        value => Ok(value.map(|value| value as u64)),
    };
    let (memory, pids) = super::cgroup::supported();
    for (name, value, supported) in [
        ("maxMemoryBytes", limits.max_memory_bytes, memory),
        ("maxProcesses", limits.max_processes, pids),
    ] {
        if value.is_some() && !supported {
            return Err(RpcError::invalid_params(format!(
                "limits.{name} cannot be enforced on this executor: it has no cgroup controller \
                 for it (environment/info capabilities.processTreeLimits)"
            )));
        }
    }
    let timeout =
        check("timeoutMs", limits.timeout_ms, (1, MAX_TIMEOUT_MS))?.map(Duration::from_millis);
    let limits = Limits {
        max_open_files: check("maxOpenFiles", limits.max_open_files, (1, MAX_OPEN_FILES))?,
        max_cpu_seconds: check(
            "maxCpuSeconds",
            limits.max_cpu_seconds,
            (1, MAX_CPU_SECONDS),
        )?,
        max_memory_bytes: check(
            "maxMemoryBytes",
            limits.max_memory_bytes,
            (MIN_MEMORY_BYTES, MAX_MEMORY_BYTES),
        )?,
        max_processes: check("maxProcesses", limits.max_processes, (1, MAX_PROCESSES))?,
    };
    Ok((limits, timeout))
}

fn require(ctx: &RequestCtx, id: &str) -> Result<Arc<ManagedProcess>, RpcError> {
    match ctx.session.processes.lookup(id) {
        Lookup::Ready(process) => Ok(process),
        Lookup::Starting => Err(RpcError::invalid_request(format!(
            "process id {id} is starting"
        ))),
        Lookup::Unknown => Err(RpcError::invalid_request(format!(
            "unknown process id {id}"
        ))),
    }
}

async fn read(ctx: &RequestCtx, params: ReadParams) -> Result<ReadResult, RpcError> {
    let process = require(ctx, &params.process_id)?;
    let after_seq = params.after_seq.unwrap_or(0);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(params.wait_ms.unwrap_or(0));
    let mut changes = process.subscribe();
    let mut attachment = ctx.session.attachment();
    let snapshot = loop {
        changes.borrow_and_update();
        let snapshot = process.read(after_seq, params.max_bytes);
        if snapshot.ready || tokio::time::Instant::now() >= deadline {
            break snapshot;
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = attachment.changed() => ctx.ensure_attached()?,
            _ = tokio::time::sleep_until(deadline) => {}
        }
    };
    ctx.ensure_attached()?;
    Ok(ReadResult {
        chunks: snapshot
            .chunks
            .into_iter()
            .map(|chunk| OutputChunk {
                seq: chunk.seq,
                stream: chunk.stream,
                chunk: Base64Bytes(chunk.data.to_vec()),
            })
            .collect(),
        next_seq: snapshot.next_seq,
        exited: snapshot.exit_code.is_some(),
        exit_code: snapshot.exit_code,
        closed: snapshot.closed,
        failure: None,
        sandbox_denied: snapshot.sandbox_denied,
        first_retained_seq: snapshot.first_retained_seq,
        truncated: snapshot.truncated,
        details: snapshot.details,
        live_descendants: process.live_descendants(),
    })
}

fn write(ctx: &RequestCtx, params: WriteParams) -> Result<WriteResult, RpcError> {
    if params.write_id.is_empty() {
        return Err(RpcError::invalid_params("writeId must not be empty"));
    }
    let status = match ctx.session.processes.lookup(&params.process_id) {
        Lookup::Unknown => WriteStatus::UnknownProcess,
        Lookup::Starting => WriteStatus::Starting,
        Lookup::Ready(process) => process.write(&params.write_id, Bytes::from(params.chunk.0))?,
    };
    Ok(WriteResult { status })
}

fn signal(ctx: &RequestCtx, params: SignalParams) -> Result<Value, RpcError> {
    // Unknown, starting and exited processes are not an error, as in the reference.
    if let Lookup::Ready(process) = ctx.session.processes.lookup(&params.process_id) {
        process.signal(params.signal)?;
    }
    Ok(Value::Object(Default::default()))
}

fn terminate(ctx: &RequestCtx, params: ProcessIdParams) -> Result<TerminateResult, RpcError> {
    Ok(TerminateResult {
        running: ctx.session.processes.terminate(&params.process_id),
    })
}

fn resize(ctx: &RequestCtx, params: ResizeParams) -> Result<Value, RpcError> {
    require(ctx, &params.process_id)?.resize(TerminalSize {
        rows: params.rows,
        cols: params.cols,
    })?;
    Ok(Value::Object(Default::default()))
}

fn close_stdin(ctx: &RequestCtx, params: ProcessIdParams) -> Result<Value, RpcError> {
    require(ctx, &params.process_id)?.close_stdin()?;
    Ok(Value::Object(Default::default()))
}
