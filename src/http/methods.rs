//! The `http/request` method.

use super::{body, client, describe, request};
use crate::rpc::dispatch::{decode, encode, RequestCtx};
use crate::rpc::RpcError;
use exec_server_protocol::base64_bytes::Base64Bytes;
use exec_server_protocol::http::{HttpHeader, HttpRequestParams, HttpRequestResult};
use exec_server_protocol::rpc::method;
use reqwest::header::HeaderMap;
use serde_json::Value;

pub async fn handle(
    ctx: &RequestCtx,
    name: &str,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    match name {
        method::HTTP_REQUEST => encode(http_request(ctx, decode(params)?).await),
        _ => Err(RpcError::method_not_found(name)),
    }
}

async fn http_request(
    ctx: &RequestCtx,
    params: HttpRequestParams,
) -> Result<HttpRequestResult, RpcError> {
    let (policy, stream_id) = (
        params.redirect_policy,
        params.stream_response.then(|| params.request_id.clone()),
    );
    let request = request::build(params, |var| std::env::var(var).ok())?;
    let reservation = stream_id
        .map(|id| ctx.connection.http.reserve(&id))
        .transpose()?;
    let response = client::send(request, policy).await?;
    let status = response.status().as_u16();
    let headers = response_headers(response.headers());
    let body = match reservation {
        None => buffered_body(ctx, response).await?,
        Some(reservation) => {
            // The reply (status and headers) must reach the client before the first delta.
            let stream = body::stream(
                response,
                reservation,
                ctx.connection.outbound.clone(),
                ctx.connection.http.stop_token(),
            );
            ctx.after_reply(move || {
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
    ctx: &RequestCtx,
    mut response: reqwest::Response,
) -> Result<Vec<u8>, RpcError> {
    let limit = ctx.connection.registry.config.max_http_body_bytes;
    let too_large = || {
        RpcError::invalid_request(format!(
            "http/request response body exceeds the limit of {limit} bytes for a buffered \
             response; send the request with streamResponse: true to receive the body as \
             http/request/bodyDelta notifications"
        ))
    };
    let known = match response.content_length() {
        Some(length) if length > limit as u64 => return Err(too_large()),
        known => known.map(|length| length as usize),
    };
    let expected = known.unwrap_or(limit);
    ctx.reserve_reply(expected.saturating_add(expected.div_ceil(3).saturating_mul(8)))
        .await;
    let mut body = Vec::with_capacity(known.unwrap_or(0));
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) if body.len() + chunk.len() > limit => return Err(too_large()),
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => return Ok(body),
            Err(err) => {
                return Err(RpcError::internal(format!(
                    "failed to read http/request response body: {}",
                    describe(&err)
                )))
            }
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
