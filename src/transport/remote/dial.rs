//! Dialing the rendezvous: TCP (and TLS for `wss://`), the WebSocket handshake with the
//! credential, and the dialed socket seen as the listener's upgraded ones are (axum's message
//! type), so that `ws::run` serves both.

use super::auth::Signer;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes};
use axum::http::StatusCode;
use dial_tungstenite::tungstenite::{self, client::IntoClientRequest as _, protocol};
use dial_tungstenite::WebSocketStream;
use futures::{Sink, Stream};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// codex's limit on a dial, TCP to the end of the handshake.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a dial failed.
pub(super) enum DialError {
    /// 401 or 403 on the upgrade: the credential is refused, and dialing again would not help.
    Refused(anyhow::Error),
    Failed(anyhow::Error),
}

/// Dials `url` with the credential of `signer`; inbound messages up to `max_message_bytes`.
pub(super) async fn dial(
    url: &url::Url,
    signer: &Signer,
    max_message_bytes: usize,
) -> Result<Dialed, DialError> {
    let shown = shown(url);
    // codex's words.
    let context = format!("failed to connect to exec-server websocket `{shown}`");
    let failed = |err: anyhow::Error| DialError::Failed(err.context(context.clone()));
    match tokio::time::timeout(DIAL_TIMEOUT, handshake(url, signer, max_message_bytes)).await {
        Err(_) => Err(failed(anyhow::anyhow!("connection timed out"))),
        Ok(Ok(socket)) => Ok(socket),
        Ok(Err(Handshake::Other(err))) => Err(failed(err)),
        Ok(Err(Handshake::Status(status))) => {
            let err = anyhow::anyhow!("{context}: HTTP error: {status}");
            match status {
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(DialError::Refused(err)),
                _ => Err(DialError::Failed(err)),
            }
        }
    }
}

/// `url` without its query, which may hold a credential: how errors show it (as codex does).
pub(super) fn shown(url: &url::Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

enum Handshake {
    Status(StatusCode),
    Other(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for Handshake {
    fn from(err: E) -> Self {
        Self::Other(err.into())
    }
}

async fn handshake(
    url: &url::Url,
    signer: &Signer,
    max_message_bytes: usize,
) -> Result<Dialed, Handshake> {
    let host = url
        .host_str()
        .ok_or_else(|| anyhow::anyhow!("the URL has no host"))?;
    let port = url
        .port_or_known_default()
        .ok_or_else(|| anyhow::anyhow!("the URL has no port"))?;
    let tcp = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port)).await?;
    // Small replies must not wait for the peer's delayed ACK (~40 ms).
    tcp.set_nodelay(true)?;
    let stream: Box<dyn Io> = if url.scheme() == "wss" {
        Box::new(tls(host, tcp).await?)
    } else {
        Box::new(tcp)
    };
    let mut request = url.as_str().into_client_request()?;
    signer.sign(&mut request, &[], b"").await?;
    // Messages up to twice the JSON-RPC limit arrive and get a JSON-RPC error naming it, as on
    // the listener.
    let hard_limit = max_message_bytes.saturating_mul(2);
    let config = protocol::WebSocketConfig::default()
        .max_message_size(Some(hard_limit))
        .max_frame_size(Some(hard_limit));
    match dial_tungstenite::client_async_with_config(request, stream, Some(config)).await {
        Ok((socket, _)) => Ok(Dialed(socket)),
        Err(tungstenite::Error::Http(response)) => Err(Handshake::Status(response.status())),
        Err(err) => Err(err.into()),
    }
}

/// A TLS connection to `host` over `tcp`, checked with the platform's verifier (as reqwest's
/// registration is).
async fn tls(
    host: &str,
    tcp: tokio::net::TcpStream,
) -> anyhow::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    use rustls_platform_verifier::BuilderVerifierExt as _;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_platform_verifier()?
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_owned())?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    Ok(connector.connect(name, tcp).await?)
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A dialed WebSocket, its messages converted to and from axum's (the same bytes).
pub(super) struct Dialed(WebSocketStream<Box<dyn Io>>);

impl Stream for Dialed {
    type Item = Result<Message, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            return Poll::Ready(match Pin::new(&mut self.0).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => None,
                Poll::Ready(Some(Err(err))) => Some(Err(axum::Error::new(err))),
                Poll::Ready(Some(Ok(message))) => match from_tungstenite(message) {
                    Some(message) => Some(Ok(message)),
                    // A raw frame: only seen when writing, never read.
                    None => continue,
                },
            });
        }
    }
}

impl Sink<Message> for Dialed {
    type Error = axum::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut self.0)
            .poll_ready(cx)
            .map_err(axum::Error::new)
    }

    fn start_send(mut self: Pin<&mut Self>, message: Message) -> Result<(), Self::Error> {
        let message = into_tungstenite(message).map_err(axum::Error::new)?;
        Pin::new(&mut self.0)
            .start_send(message)
            .map_err(axum::Error::new)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut self.0)
            .poll_flush(cx)
            .map_err(axum::Error::new)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut self.0)
            .poll_close(cx)
            .map_err(axum::Error::new)
    }
}

fn from_tungstenite(message: tungstenite::Message) -> Option<Message> {
    use tungstenite::Message as T;
    Some(match message {
        // Already UTF-8: the check is a fast scan, the bytes are not copied.
        T::Text(text) => Message::Text(Utf8Bytes::try_from(bytes::Bytes::from(text)).ok()?),
        T::Binary(bytes) => Message::Binary(bytes),
        T::Ping(bytes) => Message::Ping(bytes),
        T::Pong(bytes) => Message::Pong(bytes),
        T::Close(frame) => Message::Close(frame.map(|frame| CloseFrame {
            code: frame.code.into(),
            reason: Utf8Bytes::from(frame.reason.as_str()),
        })),
        T::Frame(_) => return None,
    })
}

fn into_tungstenite(message: Message) -> Result<tungstenite::Message, std::str::Utf8Error> {
    use tungstenite::Message as T;
    Ok(match message {
        // Already UTF-8: the check is a fast scan, the bytes are not copied.
        Message::Text(text) => T::Text(tungstenite::Utf8Bytes::try_from(bytes::Bytes::from(text))?),
        Message::Binary(bytes) => T::Binary(bytes),
        Message::Ping(bytes) => T::Ping(bytes),
        Message::Pong(bytes) => T::Pong(bytes),
        Message::Close(frame) => T::Close(frame.map(|frame| protocol::CloseFrame {
            code: frame.code.into(),
            reason: frame.reason.as_str().to_owned().into(),
        })),
    })
}
