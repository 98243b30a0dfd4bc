//! Buffered `http/request`: the daemon makes the request and returns the whole response.

use crate::{Client, Error, Retry};
use exec_server_protocol::base64_bytes::Base64Bytes;
use serde::{Deserialize, Serialize};

pub const REQUEST: &str = "http/request";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub name: String,
    pub value: String,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<Header>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<Base64Bytes>,
    /// A total deadline; None waits as long as the daemon does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    pub request_id: String,
    pub stream_response: bool,
}

impl HttpRequest {
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            method: method.into(),
            url: url.into(),
            headers: Vec::new(),
            body_base64: None,
            timeout_ms: None,
            request_id: uuid::Uuid::new_v4().to_string(),
            stream_response: false,
        }
    }

    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push(Header {
            name: name.into(),
            value: value.into(),
        });
        self
    }

    pub fn body(mut self, body: Vec<u8>) -> Self {
        self.body_base64 = Some(Base64Bytes(body));
        self
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<Header>,
    pub body_base64: Base64Bytes,
}

impl Client {
    /// Not repeated after a dropped connection: the request may not be idempotent.
    pub async fn http_request(&self, request: &HttpRequest) -> Result<HttpResponse, Error> {
        self.request(REQUEST, request, Retry::Never).await
    }
}
