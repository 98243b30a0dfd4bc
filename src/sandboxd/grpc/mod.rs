//! agent-sandbox's gRPC `process.v1.ProcessService` (`sandboxd/process.proto`) on a port of its
//! own (`--sandboxd-grpc-listen`), as the contract places it: HTTP/2 cleartext (h2c), which
//! the agent-sandbox router cannot proxy (HTTP/1.1 upstream), so clients reach the pod
//! directly. tonic's server core does the framing, status and codec; the calls are `process`.
//! Every call needs the listener's token (`authorization: Bearer`), when one is set.

pub mod messages;
mod process;

use crate::server::admission::{accept_tcp, Peer};
use crate::server::Daemon;
use axum::http::{header, Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use process::Processes;
use std::convert::Infallible;
use std::sync::Arc;
use tonic::body::Body;
use tonic::Status;

/// The largest request message decoded (the contract's requests are small; stdin comes in
/// pieces): a larger one is refused (tonic: OUT_OF_RANGE) on its length prefix, unbuffered.
const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// Binds `--sandboxd-grpc-listen`, when set, and serves it in a task of its own.
pub(crate) async fn spawn(daemon: &Arc<Daemon>) -> anyhow::Result<()> {
    let Some(addr) = daemon.config.sandboxd_grpc_listen else {
        return Ok(());
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| anyhow::anyhow!("cannot listen for sandboxd gRPC on {addr}: {err}"))?;
    let local = listener.local_addr()?;
    crate::sandbox::peers::note_listener(local);
    tracing::info!("sandboxd gRPC listening on http://{local}");
    // One session for the listener, named after its address so a restart finds it again.
    let session = daemon.sessions.hold(&format!("sandboxd grpc {addr}"))?;
    let processes = Arc::new(Processes {
        daemon: daemon.clone(),
        session,
    });
    tokio::spawn(async move {
        loop {
            // A sandbox on the host network must not drive the daemon from outside it.
            let (stream, peer) = accept_tcp(&listener).await;
            tracing::debug!(peer = ?Peer::of_ip(peer.ip()), "sandboxd gRPC connection");
            tokio::spawn(serve(stream, processes.clone()));
        }
    });
    Ok(())
}

async fn serve(stream: tokio::net::TcpStream, processes: Arc<Processes>) {
    let ping = processes.daemon.config.ping_interval;
    let service = hyper::service::service_fn(move |request| {
        let processes = processes.clone();
        async move { Ok::<_, Infallible>(call(&processes, request).await) }
    });
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    // A vanished peer's connection ends at an unanswered ping.
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(ping)
        .keep_alive_timeout(ping);
    let _ = builder
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// One call, dispatched on its path as tonic's generated servers do.
async fn call(processes: &Arc<Processes>, request: Request<Incoming>) -> Response<Body> {
    if let Err(status) = authorize(&processes.daemon, &request) {
        return status.into_http();
    }
    let this = processes.clone();
    macro_rules! unary {
        ($method:ident) => {
            grpc()
                .unary(
                    tower::service_fn(move |request: tonic::Request<_>| {
                        let this = this.clone();
                        async move { this.$method(request.into_inner()).map(tonic::Response::new) }
                    }),
                    request,
                )
                .await
        };
    }
    match request.uri().path() {
        "/process.v1.ProcessService/Start" => {
            let start = tower::service_fn(move |request: tonic::Request<_>| {
                let this = this.clone();
                async move {
                    let events = this.start(request.into_inner()).await?;
                    let stream = futures::stream::unfold(events, |mut events| async move {
                        events.recv().await.map(|event| (event, events))
                    });
                    Ok(tonic::Response::new(Box::pin(stream)))
                }
            });
            grpc().server_streaming(start, request).await
        }
        "/process.v1.ProcessService/Execute" => {
            let execute = tower::service_fn(move |request: tonic::Request<_>| {
                let this = this.clone();
                async move {
                    this.execute(request.into_inner())
                        .await
                        .map(tonic::Response::new)
                }
            });
            grpc().unary(execute, request).await
        }
        "/process.v1.ProcessService/WriteStdin" => unary!(write_stdin),
        "/process.v1.ProcessService/SendSignal" => unary!(send_signal),
        "/process.v1.ProcessService/ResizeTTY" => unary!(resize_tty),
        other => Status::unimplemented(format!("no method {other}")).into_http(),
    }
}

/// tonic's server side of one call, with prost's codec for its messages.
fn grpc<T, U>() -> tonic::server::Grpc<tonic_prost::ProstCodec<T, U>>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    tonic::server::Grpc::new(tonic_prost::ProstCodec::default())
        .max_decoding_message_size(MAX_REQUEST_BYTES)
}

/// The listener's token, when one is set, in `authorization: Bearer`.
fn authorize(daemon: &Daemon, request: &Request<Incoming>) -> Result<(), Status> {
    let Some(auth) = daemon.config.upgrade_auth.as_ref() else {
        return Ok(());
    };
    auth.check(request.headers().get(header::AUTHORIZATION))
        .map_err(Status::unauthenticated)
}
