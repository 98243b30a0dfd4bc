//! The WebSocket listener: `/` upgrades (guarded against browsers and, when configured, by a
//! bearer token), `/readyz` answers 200. One JSON-RPC message per frame, Text or Binary.

use crate::rpc::connection::{self, Frame};
use crate::rpc::outbound::{self, Outbound};
use crate::session::Registry;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use futures::{SinkExt as _, StreamExt as _};
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use subtle::ConstantTimeEq as _;

const PROTOCOL_ERROR: u16 = 1002;
const MESSAGE_TOO_BIG: u16 = 1009;

/// Initial WebSocket read buffer per connection.
const READ_BUFFER_BYTES: usize = 8 * 1024;

pub async fn serve(addr: SocketAddr, registry: Arc<Registry>) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    // The one line on stdout: clients and harnesses read the bound address from it.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "ws://{local}")?;
    stdout.flush()?;
    drop(stdout);
    tracing::info!("exec-server listening on ws://{local}");
    let app = Router::new()
        .route("/readyz", get(|| async { StatusCode::OK }))
        .route("/", any(upgrade))
        .with_state(registry);
    // Without TCP_NODELAY a small reply waits for the client's delayed ACK (~40 ms).
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
        let _ = stream.set_nodelay(true);
    });
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

async fn upgrade(
    State(registry): State<Arc<Registry>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    // A browser page must never drive this daemon (cross-site WebSocket hijacking).
    if headers.contains_key(header::ORIGIN) {
        return (StatusCode::FORBIDDEN, "browser origins may not connect").into_response();
    }
    if let Some(token) = &registry.config.connection_token {
        let expected = format!("Bearer {token}");
        let given = headers
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        if !bool::from(given.ct_eq(expected.as_bytes())) {
            return (StatusCode::UNAUTHORIZED, "missing or wrong bearer token").into_response();
        }
    }
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => return rejection.into_response(),
    };
    // Messages up to twice the JSON-RPC limit arrive and get a JSON-RPC error naming the
    // limit; beyond that the WebSocket layer closes with 1009 (message too big).
    let hard_limit = registry.config.max_message_bytes.saturating_mul(2);
    // tungstenite zero-fills its whole read buffer on the first read: the 128 KiB default
    // would be resident for every idle connection. Larger messages grow it as needed.
    ws.read_buffer_size(READ_BUFFER_BYTES)
        .max_message_size(hard_limit)
        .max_frame_size(hard_limit)
        .on_upgrade(move |socket| run(socket, registry, peer))
}

async fn run(socket: WebSocket, registry: Arc<Registry>, peer: SocketAddr) {
    let (mut sink, stream) = socket.split();
    let (outbound, mut queue) = Outbound::new(true, registry.config.outbound_buffer_bytes);
    let ping_interval = registry.config.ping_interval;
    // Set by the reading side when the peer broke the protocol; sent in our Close frame.
    let close_code = Arc::new(AtomicU16::new(0));
    let writer_close_code = close_code.clone();
    let writer = tokio::spawn(async move {
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + ping_interval, ping_interval);
        loop {
            let message = tokio::select! {
                message = queue.recv() => match message {
                    Some(outbound::Message::Text(text)) => Message::Text(text.into()),
                    Some(outbound::Message::Binary(bytes)) => Message::Binary(bytes.into()),
                    None => break,
                },
                _ = ping.tick() => Message::Ping(Default::default()),
            };
            if sink.send(message).await.is_err() {
                return;
            }
        }
        let frame = match writer_close_code.load(Ordering::Relaxed) {
            0 => None,
            code => Some(CloseFrame {
                code,
                reason: "".into(),
            }),
        };
        let _ = sink.send(Message::Close(frame)).await;
    });
    let frames = stream
        .take_while(move |message| {
            if let Err(err) = message {
                // tungstenite reports an over-long message as a capacity error.
                let too_big = err.to_string().contains("Space limit exceeded");
                close_code.store(
                    if too_big {
                        MESSAGE_TOO_BIG
                    } else {
                        PROTOCOL_ERROR
                    },
                    Ordering::Relaxed,
                );
            }
            std::future::ready(matches!(message, Ok(m) if !matches!(m, Message::Close(_))))
        })
        .filter_map(|message| {
            std::future::ready(match message {
                Ok(Message::Text(text)) => Some(Frame::Message(text.into())),
                Ok(Message::Binary(bytes)) => Some(Frame::Message(bytes)),
                _ => None,
            })
        });
    let context = format!("websocket JSON-RPC message from exec-server websocket {peer}");
    connection::serve(frames, outbound, registry, context).await;
    let _ = writer.await;
}
