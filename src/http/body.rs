//! Streams one response body as `http/request/bodyDelta` notifications.

use super::describe;
use super::streams::Reservation;
use crate::rpc::outbound::Outbound;
use exec_server_protocol::base64_bytes::Base64Bytes;
use exec_server_protocol::http::HttpBodyDelta;
use exec_server_protocol::rpc::method;
use tokio_util::sync::CancellationToken;

/// Largest decoded payload of one delta; a bigger network chunk is split.
pub(super) const MAX_DELTA_BYTES: usize = 1024 * 1024;

/// Sends the body as deltas (seq from 1) and a terminal `done` frame, unless `stop` fires
/// first: then the connection is gone and there is nobody to tell.
pub(super) async fn stream(
    response: reqwest::Response,
    reservation: Reservation,
    outbound: Outbound,
    stop: CancellationToken,
) {
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = pump(response, reservation, &outbound) => {}
    }
}

async fn pump(mut response: reqwest::Response, reservation: Reservation, outbound: &Outbound) {
    let request_id = reservation.request_id().to_owned();
    let mut seq = 0;
    let mut send = |bytes: &[u8], done: bool, error: Option<String>| {
        seq += 1;
        let delta = HttpBodyDelta {
            request_id: request_id.clone(),
            seq,
            delta_base64: Base64Bytes(bytes.to_vec()),
            done,
            error,
        };
        async move {
            outbound
                .notify(method::HTTP_REQUEST_BODY_DELTA, &delta)
                .await
                .is_ok()
        }
    };
    // Awaiting each send leaves the body unread while the client is slow (backpressure).
    let error = loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                for piece in chunk.chunks(MAX_DELTA_BYTES) {
                    if !send(piece, false, None).await {
                        return;
                    }
                }
            }
            Ok(None) => break None,
            Err(err) => {
                break Some(format!(
                    "failed to read http/request response body: {}",
                    describe(&err)
                ))
            }
        }
    };
    // Released before the terminal frame, so a client that reuses the id as soon as it sees
    // the frame is not refused.
    drop(reservation);
    send(&[], true, error).await;
}
