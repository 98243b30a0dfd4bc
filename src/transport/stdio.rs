//! One connection on stdin/stdout: one JSON value per line. Stdout carries only the protocol.

use crate::rpc::outbound::{Message as OutboundMessage, Outbound};
use crate::server::{self, AtEnd, Frame};
use crate::session::Registry;
use futures::StreamExt as _;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, FramedRead};

pub async fn serve(registry: Arc<Registry>) -> anyhow::Result<()> {
    tracing::info!("exec-server listening on stdio");
    serve_lines(tokio::io::stdin(), tokio::io::stdout(), registry).await;
    Ok(())
}

/// One connection of one JSON value per line, `input` to `output`.
pub(crate) async fn serve_lines(
    input: impl AsyncRead,
    mut output: impl AsyncWrite + Unpin + Send + 'static,
    registry: Arc<Registry>,
) {
    // One message per line: no room for binary payloads.
    let (outbound, mut queue) = Outbound::new(false, registry.config.outbound_buffer_bytes);
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
        }
    });
    let codec = AnyDelimiterCodec::new_with_max_length(
        b"\n".to_vec(),
        b"\n".to_vec(),
        registry.config.max_message_bytes,
    );
    let lines = FramedRead::new(input, codec)
        .take_while(|line| std::future::ready(!matches!(line, Err(AnyDelimiterCodecError::Io(_)))))
        .filter_map(|line| {
            std::future::ready(match line {
                Ok(line) if line.trim_ascii().is_empty() => None,
                Ok(line) => Some(Frame::Message(line)),
                // The codec skips the rest of an over-long line; the connection names the limit.
                Err(_) => Some(Frame::Oversized),
            })
        });
    server::serve(
        lines,
        outbound,
        registry,
        "JSON-RPC message from stdio".into(),
        AtEnd::Answer,
    )
    .await;
    let _ = writer.await;
}
