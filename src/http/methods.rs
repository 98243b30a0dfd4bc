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
        None => response
            .bytes()
            .await
            .map_err(|err| {
                RpcError::internal(format!(
                    "failed to read http/request response body: {}",
                    describe(&err)
                ))
            })?
            .into(),
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
