//! One connection on stdin/stdout: one JSON value per line. Stdout carries only the protocol.

use crate::rpc::outbound::{Message as OutboundMessage, Outbound};
use crate::server::{self, AtEnd, Daemon, Frame};
use futures::StreamExt as _;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, FramedRead};

pub(crate) async fn serve(daemon: Arc<Daemon>) -> anyhow::Result<()> {
    tracing::info!("exec-server listening on stdio");
    serve_lines(tokio::io::stdin(), tokio::io::stdout(), daemon).await;
    Ok(())
}

/// One connection of one JSON value per line, `input` to `output`.
pub(crate) async fn serve_lines(
    input: impl AsyncRead,
    mut output: impl AsyncWrite + Unpin + Send + 'static,
    daemon: Arc<Daemon>,
) {
    // One message per line: no room for binary payloads.
    let (outbound, mut queue) = Outbound::new(false, daemon.config.outbound_buffer_bytes);
    let writer = tokio::spawn(async move {
        while let Some(message) = queue.recv().await {
            let OutboundMessage::Text(text) = message else {
                unreachable!("binary payloads are never enabled on stdio")
            };
            let written = async {
                output.write_all(text.as_bytes()).await?;
                output.write_all(b"\n").await?;
                output.flush().await
            };
            if written.await.is_err() {
                break;
            }
            // One local pipe: what is written there counts as received.
            queue.acknowledge_sent();
        }
    });
    let codec = Lines(AnyDelimiterCodec::new_with_max_length(
        b"\n".to_vec(),
        b"\n".to_vec(),
        daemon.config.max_message_bytes,
    ));
    // A read error ends the connection.
    let lines = FramedRead::new(input, codec)
        .take_while(|frame| std::future::ready(frame.is_ok()))
        .filter_map(|frame| {
            std::future::ready(match frame {
                Ok(Frame::Message(line)) if line.trim_ascii().is_empty() => None,
                frame => frame.ok(),
            })
        });
    // The daemon's parent, which holds its stdin and stdout.
    let who = crate::audit::Identity::anonymous("stdio");
    server::serve(
        lines,
        outbound,
        daemon,
        who,
        "JSON-RPC message from stdio".into(),
        AtEnd::Answer,
    )
    .await;
    let _ = writer.await;
}

/// Lines of at most the configured length. A longer one is an [`Frame::Oversized`] and the
/// rest of it is skipped, while the connection goes on: `FramedRead` would end the stream at
/// the codec's first error, so that error is made a frame here.
struct Lines(AnyDelimiterCodec);

impl Lines {
    fn frame(
        decoded: Result<Option<bytes::Bytes>, AnyDelimiterCodecError>,
    ) -> std::io::Result<Option<Frame>> {
        match decoded {
            Ok(line) => Ok(line.map(Frame::Message)),
            Err(AnyDelimiterCodecError::MaxChunkLengthExceeded) => Ok(Some(Frame::Oversized)),
            Err(AnyDelimiterCodecError::Io(err)) => Err(err),
        }
    }
}

impl tokio_util::codec::Decoder for Lines {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut bytes::BytesMut) -> std::io::Result<Option<Frame>> {
        Self::frame(self.0.decode(buf))
    }

    fn decode_eof(&mut self, buf: &mut bytes::BytesMut) -> std::io::Result<Option<Frame>> {
        Self::frame(self.0.decode_eof(buf))
    }
}
