//! agent-sandbox's gRPC `process.v1.ProcessService` (`sandboxd/process.proto`) on a port of its
//! own (`--sandboxd-grpc-listen`), as the contract places it: HTTP/2 cleartext (h2c), which
//! the agent-sandbox router cannot proxy (HTTP/1.1 upstream), so clients reach the pod
//! directly. tonic's server core does the framing, status and codec; the calls are `process`.
//! Every call needs the listener's token (`authorization: Bearer`), when one is set.

pub mod messages;
mod process;

use crate::server::admission::{accept_tcp, Peer};
use crate::server::pending_http::PendingHttp;
use crate::server::Daemon;
use axum::http::{Request, Response};
use process::Processes;
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
    let app = axum::Router::new().fallback(move |request: Request<axum::body::Body>| {
        let processes = processes.clone();
        async move { call(&processes, request).await.map(axum::body::Body::new) }
    });
    // Until its first call, a connection holds a place of the listener's HTTP phase, under
    // its deadline, as the other listeners' do; h2c pings end a vanished peer's.
    let http = PendingHttp::new(app, &daemon.config);
    tokio::spawn(async move {
        loop {
            // A sandbox on the host network must not drive the daemon from outside it.
            let (stream, peer) = accept_tcp(&listener).await;
            http.serve(stream, Peer::of_ip(peer.ip()));
        }
    });
    Ok(())
}

/// One call, dispatched on its path as tonic's generated servers do.
async fn call(processes: &Arc<Processes>, request: Request<axum::body::Body>) -> Response<Body> {
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

/// The listener's token, when one is set, in `authorization: Bearer` or `x-access-token`.
fn authorize(daemon: &Daemon, request: &Request<axum::body::Body>) -> Result<(), Status> {
    let Some(auth) = daemon.config.upgrade_auth.as_ref() else {
        return Ok(());
    };
    auth.check(request.headers())
        .map_err(Status::unauthenticated)
}
