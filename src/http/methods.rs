//! The `http/request` method.

use super::request::build as build_request;
use super::{body, client, describe, HttpError, HttpStreams};
use crate::rpc::Call;
use exec_server_protocol::base64_bytes::Base64Bytes;
use exec_server_protocol::http::{HttpHeader, HttpRequestParams, HttpRequestResult};
use reqwest::header::HeaderMap;

/// Sends the request; a buffered body may hold `limit` bytes at most. A streamed one follows
/// the reply as notifications on `streams`, which stop with the connection.
pub(crate) async fn request(
    call: &Call,
    streams: &HttpStreams,
    limit: usize,
    params: HttpRequestParams,
) -> Result<HttpRequestResult, HttpError> {
    let (policy, stream_id) = (
        params.redirect_policy,
        params.stream_response.then(|| params.request_id.clone()),
    );
    let request = build_request(params, |var| std::env::var(var).ok())?;
    let reservation = stream_id.map(|id| streams.reserve(&id)).transpose()?;
    let response = client::send(request, policy).await?;
    let status = response.status().as_u16();
    let headers = response_headers(response.headers());
    let body = match reservation {
        None => buffered_body(call, limit, response).await?,
        Some(reservation) => {
            // The reply (status and headers) must reach the client before the first delta.
            let stream = body::stream(
                response,
                reservation,
                call.outbound().clone(),
                streams.stop_token(),
            );
            call.after_reply(move || {
                tokio::spawn(stream);
            });
            Vec::new()
        }
    };
    Ok(HttpRequestResult {
        status,
        headers,
        body_base64: Base64Bytes(body),
    })
}

/// The whole body, up to the daemon's limit. Outbound budget is reserved first for what the
/// reply holds at its peak: the body, and its base64 as a `Value` and as text.
async fn buffered_body(
    call: &Call,
    limit: usize,
    mut response: reqwest::Response,
) -> Result<Vec<u8>, HttpError> {
    let too_large = || HttpError::BodyTooLarge { limit };
    let known = match response.content_length() {
        Some(length) if length > limit as u64 => return Err(too_large()),
        known => known.map(|length| length as usize),
    };
    let expected = known.unwrap_or(limit);
    call.reserve_reply(expected.saturating_add(expected.div_ceil(3).saturating_mul(8)))
        .await;
    let mut body = Vec::with_capacity(known.unwrap_or(0));
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) if body.len() + chunk.len() > limit => return Err(too_large()),
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => return Ok(body),
            Err(err) => return Err(HttpError::ReadBody(describe(&err))),
        }
    }
}

/// In order, repeats kept, names lower-case; a value that is not UTF-8 is dropped.
fn response_headers(headers: &HeaderMap) -> Vec<HttpHeader> {
    headers
        .iter()
        .filter_map(|(name, value)| {
            Some(HttpHeader {
                name: name.as_str().to_owned(),
                value: std::str::from_utf8(value.as_bytes()).ok()?.to_owned(),
            })
        })
        .collect()
}
