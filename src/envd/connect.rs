//! The Connect protocol (connectrpc.com), as envd and its SDKs speak it, in both of its codecs:
//! unary calls with `application/json` or `application/proto` bodies, server streams and
//! client streams with `application/connect+json` or `application/connect+proto` bodies of
//! 5-byte envelopes (a flags byte, a big-endian length) and an end-of-stream envelope carrying
//! the error (JSON in either codec, as the protocol has it), errors of unary calls as Connect
//! error JSON. An answer is in the codec its request used.
//!
//! Written here rather than taken from a crate: the Rust Connect crates generate their
//! services from .proto files with protoc (absent here, and a build step for every client of
//! the tree), while envd's seventeen methods need only this framing over axum, with serde and
//! prost deriving the codecs on one set of messages (`messages`).

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt as _};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::time::Duration;
use tokio::sync::mpsc;
use tower_http::timeout::TimeoutError;

/// An envelope flag: the message is compressed (never accepted: the SDKs do not compress).
const FLAG_COMPRESSED: u8 = 0x01;
/// An envelope flag: the end-of-stream message.
const FLAG_END_STREAM: u8 = 0x02;
/// The largest message accepted in a request (stdin chunks are the largest the SDKs send).
pub(crate) const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Messages a server stream may have queued before its producer waits for the client.
const STREAM_QUEUE: usize = 16;

/// Connect's error codes (the names are the wire's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    Canceled,
    InvalidArgument,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    DeadlineExceeded,
    Unimplemented,
    Internal,
    Unavailable,
    Unauthenticated,
}

impl Code {
    fn name(self) -> &'static str {
        match self {
            Self::Canceled => "canceled",
            Self::InvalidArgument => "invalid_argument",
            Self::NotFound => "not_found",
            Self::AlreadyExists => "already_exists",
            Self::PermissionDenied => "permission_denied",
            Self::ResourceExhausted => "resource_exhausted",
            Self::FailedPrecondition => "failed_precondition",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::Unimplemented => "unimplemented",
            Self::Internal => "internal",
            Self::Unavailable => "unavailable",
            Self::Unauthenticated => "unauthenticated",
        }
    }

    /// The HTTP status of a unary error with this code (the protocol's table).
    pub(super) fn status(self) -> StatusCode {
        match self {
            Self::Canceled => StatusCode::from_u16(499).expect("valid"),
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Self::InvalidArgument => StatusCode::BAD_REQUEST,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::AlreadyExists => StatusCode::CONFLICT,
            Self::PermissionDenied => StatusCode::FORBIDDEN,
            Self::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Self::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
            Self::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
            Self::Unimplemented => StatusCode::NOT_IMPLEMENTED,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
        }
    }
}

/// A Connect error: its code and message.
#[derive(Debug)]
pub(crate) struct ConnectError {
    pub code: Code,
    pub message: String,
}

impl ConnectError {
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({ "code": self.code.name(), "message": self.message })
    }
}

impl IntoResponse for ConnectError {
    fn into_response(self) -> Response {
        let mut response = (self.code.status(), axum::Json(self.json())).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

/// A unary call's body, at most [`MAX_MESSAGE_BYTES`], all of it arrived `within` (a client
/// that trickles it would hold its connection, and a descriptor, for as long as it likes).
pub(crate) async fn body_bytes(body: Body, within: Duration) -> Result<Bytes, ConnectError> {
    let late = || {
        let message = format!("the request body did not arrive within {within:?}");
        ConnectError::new(Code::DeadlineExceeded, message)
    };
    match tokio::time::timeout(within, axum::body::to_bytes(body, MAX_MESSAGE_BYTES)).await {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(err)) if caused_by::<TimeoutError>(&err) => Err(late()),
        Ok(Err(err)) => Err(ConnectError::new(Code::ResourceExhausted, err.to_string())),
        Err(_) => Err(late()),
    }
}

/// Whether `E` is somewhere in `err`'s chain of sources.
fn caused_by<E: std::error::Error + 'static>(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut at = Some(err);
    while let Some(err) = at {
        if err.is::<E>() {
            return true;
        }
        at = err.source();
    }
    false
}

/// The answer to a call of a method this daemon does not serve.
pub(crate) fn no_method(service: &str, method: &str) -> Response {
    let message = format!("no method /{service}/{method}");
    ConnectError::new(Code::Unimplemented, message).into_response()
}

/// One envelope of a stream body.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Envelope {
    pub flags: u8,
    pub data: Bytes,
}

/// Splits a stream body into envelopes as its bytes arrive.
#[derive(Default)]
pub(crate) struct EnvelopeDecoder {
    buffer: bytes::BytesMut,
}

impl EnvelopeDecoder {
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole envelope, if one has arrived; an error for a message over
    /// [`MAX_MESSAGE_BYTES`] or a compressed one.
    pub(crate) fn next(&mut self) -> Result<Option<Envelope>, ConnectError> {
        if self.buffer.len() < 5 {
            return Ok(None);
        }
        let flags = self.buffer[0];
        let len = u32::from_be_bytes(self.buffer[1..5].try_into().expect("4 bytes")) as usize;
        if len > MAX_MESSAGE_BYTES {
            return Err(ConnectError::new(
                Code::ResourceExhausted,
                format!("message of {len} bytes is over the limit of {MAX_MESSAGE_BYTES}"),
            ));
        }
        if flags & FLAG_COMPRESSED != 0 {
            return Err(ConnectError::new(
                Code::Internal,
                "compressed messages are not accepted (send identity)",
            ));
        }
        if self.buffer.len() < 5 + len {
            return Ok(None);
        }
        let mut frame = self.buffer.split_to(5 + len);
        let data = frame.split_off(5).freeze();
        Ok(Some(Envelope { flags, data }))
    }

    /// Whether bytes of an unfinished envelope are left.
    pub(crate) fn has_partial(&self) -> bool {
        !self.buffer.is_empty()
    }
}

pub(crate) fn envelope(flags: u8, data: &[u8]) -> Bytes {
    let mut framed = Vec::with_capacity(5 + data.len());
    framed.push(flags);
    framed.extend_from_slice(&(data.len() as u32).to_be_bytes());
    framed.extend_from_slice(data);
    framed.into()
}

fn end_stream(error: Option<&ConnectError>) -> Bytes {
    let body = match error {
        Some(error) => serde_json::json!({ "error": error.json() }),
        None => serde_json::json!({}),
    };
    envelope(FLAG_END_STREAM, body.to_string().as_bytes())
}

/// One of envd's messages: both codecs derived on it (`messages`).
pub(crate) trait Message:
    prost::Message + Default + Serialize + DeserializeOwned + Send + 'static
{
}

impl<T: prost::Message + Default + Serialize + DeserializeOwned + Send + 'static> Message for T {}

/// The codec of a call, named by its request's content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Codec {
    /// The proto3 JSON mapping (what the E2B SDKs send).
    Json,
    /// Protobuf's binary encoding (the default of most other Connect clients).
    Proto,
}

impl Codec {
    /// A stream's codec, and the one its answer is in (JSON when the request's is refused: the
    /// end-of-stream error is JSON either way).
    fn of_stream(headers: &HeaderMap) -> (Result<Self, ConnectError>, Self) {
        let codec = Self::of(headers, true);
        let answer = *codec.as_ref().unwrap_or(&Self::Json);
        (codec, answer)
    }

    /// What a request says about itself: its codec and, for streams, its framing.
    fn of(headers: &HeaderMap, streaming: bool) -> Result<Self, ConnectError> {
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        let media = content_type.split(';').next().unwrap_or("").trim();
        for codec in [Self::Json, Self::Proto] {
            if media == codec.content_type(streaming) {
                return Ok(codec);
            }
        }
        let (json, proto) = (
            Self::Json.content_type(streaming),
            Self::Proto.content_type(streaming),
        );
        Err(ConnectError::new(
            Code::Unimplemented,
            format!("content type `{content_type}` is not served; this envd speaks `{json}` and `{proto}`"),
        ))
    }

    fn content_type(self, streaming: bool) -> &'static str {
        match (self, streaming) {
            (Self::Json, false) => "application/json",
            (Self::Proto, false) => "application/proto",
            (Self::Json, true) => "application/connect+json",
            (Self::Proto, true) => "application/connect+proto",
        }
    }

    /// A message from its bytes; an empty unary body is the empty message in either codec.
    pub(crate) fn decode<T: Message>(self, data: Bytes) -> Result<T, ConnectError> {
        let decoded = match self {
            Self::Json if data.is_empty() => {
                serde_json::from_slice(b"{}").map_err(|e| e.to_string())
            }
            Self::Json => serde_json::from_slice(&data).map_err(|err| err.to_string()),
            Self::Proto => T::decode(data).map_err(|err| err.to_string()),
        };
        decoded.map_err(|err| {
            ConnectError::new(Code::InvalidArgument, format!("invalid message: {err}"))
        })
    }

    pub(crate) fn encode<T: Message>(self, message: &T) -> Vec<u8> {
        match self {
            Self::Json => serde_json::to_vec(message).expect("messages serialize"),
            Self::Proto => message.encode_to_vec(),
        }
    }
}

/// The request's `Connect-Timeout-Ms`, if any.
pub(crate) fn timeout(headers: &HeaderMap) -> Option<Duration> {
    let ms: u64 = headers
        .get("connect-timeout-ms")?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    Some(Duration::from_millis(ms))
}

/// A unary call: `body` decoded, `handler`'s answer encoded, in the request's codec.
pub(crate) async fn unary<Req, Resp, F>(headers: &HeaderMap, body: Bytes, handler: F) -> Response
where
    Req: Message,
    Resp: Message,
    F: AsyncFnOnce(Req) -> Result<Resp, ConnectError>,
{
    let outcome = async {
        let codec = Codec::of(headers, false)?;
        Ok::<_, ConnectError>((codec, handler(codec.decode(body)?).await?))
    }
    .await;
    match outcome {
        Ok((codec, message)) => {
            let mut response = Response::new(Body::from(codec.encode(&message)));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(codec.content_type(false)),
            );
            response
        }
        Err(error) => error.into_response(),
    }
}

/// A client stream's request messages, decoded as they arrive.
pub(crate) type Requests<Req> =
    std::pin::Pin<Box<dyn Stream<Item = Result<Req, ConnectError>> + Send + 'static>>;

/// Where a server stream's handler sends its messages; a send fails once the client is gone.
pub(crate) struct StreamSender<T>(mpsc::Sender<T>);

impl<T> StreamSender<T> {
    pub(crate) async fn send(&self, message: impl Into<T>) -> Result<(), ConnectError> {
        (self.0.send(message.into()).await)
            .map_err(|_| ConnectError::new(Code::Canceled, "the client went away"))
    }
}

/// A server-streaming call: the single request message decoded, then `handler` runs in a task
/// of its own and what it sends goes out as it comes, its outcome in the end-of-stream message.
/// The task ends when the client goes away (its next send fails).
pub(crate) async fn server_stream<Req, Resp, F, Fut>(
    headers: &HeaderMap,
    body: Body,
    handler: F,
) -> Response
where
    Req: Message,
    Resp: Message,
    F: FnOnce(Req, StreamSender<Resp>) -> Fut,
    Fut: std::future::Future<Output = Result<(), ConnectError>> + Send + 'static,
{
    let (sender, receiver) = mpsc::channel(STREAM_QUEUE);
    let (done_sender, done) = tokio::sync::oneshot::channel();
    let (codec, answer_codec) = Codec::of_stream(headers);
    match async { first_message::<Req>(body, codec?).await }.await {
        Ok(request) => {
            let work = handler(request, StreamSender(sender));
            tokio::spawn(async move {
                let _ = done_sender.send(work.await);
            });
        }
        Err(error) => {
            let _ = done_sender.send(Err(error));
        }
    }
    let messages = tokio_stream_of(receiver).map(move |message: Resp| {
        Ok::<_, std::convert::Infallible>(envelope(0, &answer_codec.encode(&message)))
    });
    let end = futures::stream::once(async move {
        let outcome = done.await.unwrap_or_else(|_| {
            Err(ConnectError::new(
                Code::Internal,
                "the handler ended unexpectedly",
            ))
        });
        Ok(end_stream(outcome.err().as_ref()))
    });
    stream_response(messages.chain(end), answer_codec)
}

/// A client-streaming call: `handler` takes the request messages as they arrive.
pub(crate) async fn client_stream<Req, Resp, F, Fut>(
    headers: &HeaderMap,
    body: Body,
    handler: F,
) -> Response
where
    Req: Message,
    Resp: Message,
    F: FnOnce(Requests<Req>) -> Fut,
    Fut: std::future::Future<Output = Result<Resp, ConnectError>>,
{
    let (codec, answer_codec) = Codec::of_stream(headers);
    let outcome = match codec {
        Ok(codec) => handler(Box::pin(messages(body, codec))).await,
        Err(error) => Err(error),
    };
    let frames = match outcome {
        Ok(message) => vec![
            envelope(0, &answer_codec.encode(&message)),
            end_stream(None),
        ],
        Err(error) => vec![end_stream(Some(&error))],
    };
    let frames = frames.into_iter().map(Ok::<_, std::convert::Infallible>);
    stream_response(futures::stream::iter(frames), answer_codec)
}

fn stream_response<S>(frames: S, codec: Codec) -> Response
where
    S: Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static,
{
    let mut response = Response::new(Body::from_stream(frames));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(codec.content_type(true)),
    );
    response
}

fn tokio_stream_of<T: Send + 'static>(receiver: mpsc::Receiver<T>) -> impl Stream<Item = T> {
    futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|message| (message, receiver))
    })
}

/// The request messages of a stream body, decoded as they arrive.
fn messages<Req: Message>(
    body: Body,
    codec: Codec,
) -> impl Stream<Item = Result<Req, ConnectError>> + Send {
    let state = (body.into_data_stream(), EnvelopeDecoder::default(), false);
    futures::stream::unfold(
        state,
        move |(mut body, mut decoder, mut ended)| async move {
            loop {
                if ended {
                    return None;
                }
                match decoder.next() {
                    Err(error) => {
                        ended = true;
                        return Some((Err(error), (body, decoder, ended)));
                    }
                    Ok(Some(envelope)) if envelope.flags & FLAG_END_STREAM != 0 => return None,
                    Ok(Some(envelope)) => {
                        return Some((codec.decode(envelope.data), (body, decoder, ended)));
                    }
                    Ok(None) => {}
                }
                match body.next().await {
                    Some(Ok(bytes)) => decoder.push(&bytes),
                    Some(Err(err)) => {
                        let error =
                            ConnectError::new(Code::Canceled, format!("request body: {err}"));
                        ended = true;
                        return Some((Err(error), (body, decoder, ended)));
                    }
                    None if decoder.has_partial() => {
                        let error = ConnectError::new(Code::InvalidArgument, "truncated message");
                        ended = true;
                        return Some((Err(error), (body, decoder, ended)));
                    }
                    None => return None,
                }
            }
        },
    )
}

/// The one message of a server stream's request. The rest of the body is read to its end in
/// the background: hyper closes a connection whose request body was left unread, and a client
/// may end its body only once the response has begun (the Python SDK's does).
async fn first_message<Req: Message>(body: Body, codec: Codec) -> Result<Req, ConnectError> {
    let mut messages = Box::pin(messages::<Req>(body, codec));
    let first = match messages.next().await {
        Some(message) => message?,
        None => {
            return Err(ConnectError::new(
                Code::InvalidArgument,
                "the request has no message",
            ))
        }
    };
    tokio::spawn(async move { while messages.next().await.is_some() {} });
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_split_however_the_bytes_arrive() {
        let mut framed = envelope(0, b"{\"a\":1}").to_vec();
        framed.extend_from_slice(&end_stream(None));
        let mut decoder = EnvelopeDecoder::default();
        let mut seen = Vec::new();
        for byte in framed {
            decoder.push(&[byte]);
            while let Some(envelope) = decoder.next().unwrap() {
                seen.push(envelope);
            }
        }
        assert_eq!(seen.len(), 2);
        assert_eq!(&seen[0].data[..], b"{\"a\":1}");
        assert_eq!(seen[1].flags, FLAG_END_STREAM);
        assert!(!decoder.has_partial());
    }

    #[test]
    fn oversized_and_compressed_messages_are_refused() {
        let mut decoder = EnvelopeDecoder::default();
        decoder.push(&[0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(decoder.next().unwrap_err().code, Code::ResourceExhausted);
        let mut decoder = EnvelopeDecoder::default();
        decoder.push(&envelope(FLAG_COMPRESSED, b"x"));
        assert_eq!(decoder.next().unwrap_err().code, Code::Internal);
    }
}
