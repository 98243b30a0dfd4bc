//! The `process/*` methods: a session's process table, asked for what each method does. The
//! one place a session's errors and a process's meet: `process/read` fails with either, so it
//! answers with the JSON-RPC error itself.

use super::network_proxy::SessionReporter;
use super::{shell_snapshot, Daemon};
use crate::ipc::message::RunAs;
use crate::launcher::sandboxed::Launch;
use crate::launcher::spec::{LaunchSpec, DEFAULT_SIZE};
use crate::netproxy::Proxy;
use crate::process::snapshot::{Eligible, Restore};
use crate::process::{env, input_quiet, limits, Lookup, ManagedProcess, Origin};
use crate::process::{ProcessError, Timing};
use crate::rpc::{Call, RpcError};
use crate::sandbox;
use crate::sandbox::plan::ManagedPlan;
use crate::session::Session;
use bytes::Bytes;
use exec_server_protocol::base64_bytes::Base64Bytes;
use exec_server_protocol::fs::EmptyResult;
use exec_server_protocol::process::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// The process's events are pushed once `call`'s reply is queued; `daemon` runs the capture
/// of a shell snapshot it asks for.
pub(crate) async fn start(
    daemon: &Daemon,
    session: &Session,
    call: &Call,
    params: StartParams,
) -> Result<StartResult, ProcessError> {
    // The client's span context is the launch span's parent; this daemon exports no traces
    // itself, so it is recorded for log correlation.
    let span = tracing::info_span!(
        "process_start",
        process_id = %params.process_id,
        parent = tracing::field::Empty
    );
    if let Some(trace) = &params.trace {
        span.record("parent", tracing::field::display(trace));
    }
    start_once(daemon, session, call, &params)
        .instrument(span)
        .await
}

/// An idempotent start first looks for the process it repeats (waiting out a start of it in
/// progress); losing the race for the id to another start is the same as finding it.
async fn start_once(
    daemon: &Daemon,
    session: &Session,
    call: &Call,
    params: &StartParams,
) -> Result<StartResult, ProcessError> {
    loop {
        if params.idempotent {
            if let Some(process) = session.processes.settled(&params.process_id).await {
                return process.repeat(params);
            }
            if let Some(repeated) = session.processes.repeat_forgotten(params) {
                return repeated;
            }
        }
        // A reply never sent (its connection ended) drops the hook, which releases the events.
        let (replied, on_reply) = tokio::sync::oneshot::channel();
        call.after_reply(move || {
            let _ = replied.send(());
        });
        match launch_with(session, params, None, on_reply, Some(daemon)).await {
            Err(ProcessError::Exists(_)) if params.idempotent => continue,
            outcome => return outcome,
        }
    }
}

/// Launches `params` in `session` (as `run_as`, when given: unsandboxed launches only); its
/// events are pushed once `on_reply` resolves.
pub(crate) async fn launch(
    session: &Session,
    params: &StartParams,
    run_as: Option<RunAs>,
    on_reply: tokio::sync::oneshot::Receiver<()>,
) -> Result<StartResult, ProcessError> {
    launch_with(session, params, run_as, on_reply, None).await
}

/// [`launch`], in the shell snapshot `params` asks for when `snapshots` runs captures.
async fn launch_with(
    session: &Session,
    params: &StartParams,
    run_as: Option<RunAs>,
    on_reply: tokio::sync::oneshot::Receiver<()>,
    snapshots: Option<&Daemon>,
) -> Result<StartResult, ProcessError> {
    let Some((program, args)) = params.argv.split_first() else {
        return Err(ProcessError::EmptyArgv);
    };
    let cwd = params
        .cwd
        .to_path()
        .map_err(|source| ProcessError::BadCwd {
            uri: params.cwd.to_string(),
            source,
        })?;
    let proxy = managed_proxy(session, params)?;
    let proxied = proxy.as_ref().map(|proxy| ManagedPlan {
        ports: proxy.ports(),
        allow_local_binding: proxy.allow_local_binding(),
        transparent_tcp: proxy.transparent_tcp(),
    });
    // A resolution that walks directory trees runs off the async workers.
    let prepared = if params.sandbox.as_ref().is_some_and(sandbox::prepare_walks) {
        let (params, cwd) = (params.clone(), cwd.clone());
        tokio::task::spawn_blocking(move || sandbox::prepare_start(&params, &cwd, proxied))
            .await
            .map_err(ProcessError::PrepareTask)?
            .map_err(RpcError::from)?
    } else {
        sandbox::prepare_start(params, &cwd, proxied).map_err(RpcError::from)?
    };
    let (limits, timeout) = limits(params.limits.as_ref())?;
    let timing = Timing {
        timeout,
        input_quiet: input_quiet(params.input_wait_ms)?,
    };
    debug_assert_eq!(timing, Timing::of(params));
    let mut env = env::child_env(params.env_policy.as_ref(), &params.env, std::env::vars());
    if let Some(proxy) = &proxy {
        proxy.apply_env(&mut env);
    }
    let (args, env) = in_snapshot(session, params, snapshots, args, env).await?;
    let mut spec = LaunchSpec {
        program: program.clone(),
        args,
        arg0: params.arg0.clone(),
        cwd,
        env,
        tty: params.tty,
        pipe_stdin: params.pipe_stdin,
        stdin_fd: None,
        size: params.size.unwrap_or(DEFAULT_SIZE),
        limits,
        run_as,
    };
    let (launch, sandbox_type) = match prepared {
        None => (None, SandboxType::None),
        // The sandbox helper keeps the daemon's credentials: no caller sandboxes another user.
        Some(_) if spec.run_as.is_some() => return Err(ProcessError::SandboxedOtherUser),
        Some(prepared) => {
            let launch =
                Launch::new(prepared, &mut spec).map_err(|error| ProcessError::Launch {
                    program: program.clone(),
                    error,
                })?;
            let launch = match proxy {
                Some(proxy) => launch.with_proxy(proxy),
                None => launch,
            };
            (Some(launch), SandboxType::LinuxSeccomp)
        }
    };
    let origin = Origin {
        params: Origin::identity(params),
        sandbox_type,
        idempotent: params.idempotent,
    };
    session
        .processes
        .start(origin, spec, launch, timing, on_reply)
        .await?;
    Ok(StartResult {
        process_id: params.process_id.clone(),
        sandbox_type,
        sandbox_backend: crate::sandbox::backend_for(sandbox_type),
        existing: false,
    })
}

/// The managed proxy `params.networkProxy` asks for, reporting to `session`'s client.
fn managed_proxy(session: &Session, params: &StartParams) -> Result<Option<Arc<Proxy>>, RpcError> {
    let Some(launch) = &params.network_proxy else {
        return Ok(None);
    };
    let reporter = Arc::new(SessionReporter::new(session.attachment()));
    let proxy = Proxy::new(launch, &params.process_id, reporter)
        .map_err(|err| RpcError::invalid_params(err.to_string()))?;
    // Its TUN device is part of the sandbox's own network namespace (codex's message).
    if proxy.transparent_tcp() && params.sandbox.is_none() {
        return Err(RpcError::invalid_params(
            "transparent TCP requires a managed Linux sandbox",
        ));
    }
    if proxy.transparent_tcp() && !crate::netproxy::transparent::available() {
        return Err(RpcError::invalid_params(format!(
            "transparent TCP is not available on this host: it has no {} \
             (networkProxyTransparentTcp is false)",
            crate::sandbox::plan::TUN_DEVICE
        )));
    }
    Ok(Some(Arc::new(proxy)))
}

/// `args` and `env` as `params`'s command runs: in the shell snapshot it asks for, when
/// `snapshots` runs captures and there is one; else as they are.
async fn in_snapshot(
    session: &Session,
    params: &StartParams,
    snapshots: Option<&Daemon>,
    args: &[String],
    env: BTreeMap<String, String>,
) -> Result<(Vec<String>, BTreeMap<String, String>), RpcError> {
    let restore = match (snapshots, Eligible::check(params)?) {
        (Some(daemon), Some(start)) => shell_snapshot::restore(daemon, session, &start, &env).await,
        _ => None,
    };
    Ok(match restore {
        Some(Restore { args, env }) => (args, env),
        None => (args.to_vec(), env),
    })
}

pub(crate) fn list(session: &Session) -> ListResult {
    ListResult {
        processes: session.processes.list(),
    }
}

fn require(session: &Session, id: &str) -> Result<Arc<ManagedProcess>, ProcessError> {
    match session.processes.lookup(id) {
        Lookup::Ready(process) => Ok(process),
        Lookup::Starting => Err(ProcessError::Starting(id.to_owned())),
        Lookup::Unknown => Err(ProcessError::Unknown(id.to_owned())),
    }
}

pub(crate) async fn read(
    session: &Session,
    connection_id: u64,
    params: ReadParams,
) -> Result<ReadResult, RpcError> {
    // A process still starting is read once its start ended (a start is bounded): a client
    // catching up after a reconnect may read a process whose start it is retrying.
    let id = &params.process_id;
    let process = session
        .processes
        .settled(id)
        .await
        .ok_or_else(|| ProcessError::Unknown(id.clone()))?;
    let after_seq = params.after_seq.unwrap_or(0);
    // The client has everything up to `afterSeq`: that may be evicted now.
    process.mark_received(after_seq);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(params.wait_ms.unwrap_or(0));
    let mut changes = process.subscribe();
    let mut attachment = session.attachment();
    let snapshot = loop {
        changes.borrow_and_update();
        let snapshot = process.read(after_seq, params.max_bytes);
        if snapshot.ready || tokio::time::Instant::now() >= deadline {
            break snapshot;
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = attachment.changed() => session.ensure_attached(connection_id)?,
            _ = tokio::time::sleep_until(deadline) => {}
        }
    };
    session.ensure_attached(connection_id)?;
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
        waiting_for_input: process.waiting_for_input(),
        retention: process.retention_status(snapshot.retention),
    })
}

pub(crate) fn write(session: &Session, params: WriteParams) -> Result<WriteResult, ProcessError> {
    if params.write_id.is_empty() {
        return Err(ProcessError::EmptyWriteId);
    }
    let status = match session.processes.lookup(&params.process_id) {
        Lookup::Unknown => WriteStatus::UnknownProcess,
        Lookup::Starting => WriteStatus::Starting,
        Lookup::Ready(process) => process.write(&params.write_id, Bytes::from(params.chunk.0))?,
    };
    Ok(WriteResult { status })
}

pub(crate) fn signal(session: &Session, params: SignalParams) -> Result<EmptyResult, ProcessError> {
    // Unknown, starting and exited processes are not an error, as in the reference.
    if let Lookup::Ready(process) = session.processes.lookup(&params.process_id) {
        process.signal(params.signal)?;
    }
    Ok(EmptyResult {})
}

pub(crate) fn terminate(
    session: &Session,
    params: ProcessIdParams,
) -> Result<TerminateResult, ProcessError> {
    Ok(TerminateResult {
        running: session.processes.terminate(&params.process_id),
    })
}

pub(crate) fn resize(session: &Session, params: ResizeParams) -> Result<EmptyResult, ProcessError> {
    require(session, &params.process_id)?.resize(TerminalSize {
        rows: params.rows,
        cols: params.cols,
    })?;
    Ok(EmptyResult {})
}

pub(crate) fn close_stdin(
    session: &Session,
    params: ProcessIdParams,
) -> Result<EmptyResult, ProcessError> {
    require(session, &params.process_id)?.close_stdin()?;
    Ok(EmptyResult {})
}
