//! Buffered `http/request`: the daemon makes the request and returns the whole response.

use crate::{Client, Error};
use exec_server_protocol::base64_bytes::Base64Bytes;
pub use exec_server_protocol::http::{
    HttpHeader, HttpRequestHeader, HttpRequestParams, HttpRequestResult, RedirectPolicy,
};
use exec_server_protocol::methods;

/// A buffered request to `url` with a fresh request id.
pub fn request(method: impl Into<String>, url: impl Into<String>) -> HttpRequestParams {
    HttpRequestParams {
        method: method.into(),
        url: url.into(),
        headers: Vec::new(),
        body_base64: None,
        timeout_ms: None,
        redirect_policy: RedirectPolicy::Follow,
        request_id: uuid::Uuid::new_v4().to_string(),
        stream_response: false,
    }
}

/// Adds a header to a request built with [`request`].
pub fn with_header(
    mut params: HttpRequestParams,
    name: impl Into<String>,
    value: impl Into<String>,
) -> HttpRequestParams {
    params.headers.push(HttpRequestHeader {
        name: name.into(),
        value: value.into(),
        value_env_var: None,
    });
    params
}

/// Sets the body of a request built with [`request`].
pub fn with_body(mut params: HttpRequestParams, body: Vec<u8>) -> HttpRequestParams {
    params.body_base64 = Some(Base64Bytes(body));
    params
}

impl Client {
    /// A buffered request (`streamResponse` is forced off). Not repeated after a dropped
    /// connection: the request may not be idempotent.
    pub async fn http_request(
        &self,
        params: &HttpRequestParams,
    ) -> Result<HttpRequestResult, Error> {
        let mut params = params.clone();
        params.stream_response = false;
        self.send::<methods::HttpRequest>(&params).await
    }
}
