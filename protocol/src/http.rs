//! `http/request`, executed by the daemon, and its `http/request/bodyDelta` stream.

use crate::base64_bytes::Base64Bytes;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A request header. Order and repeats are kept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpRequestHeader {
    pub name: String,
    /// The value, or with `valueEnvVar` the prefix put before the variable's value.
    pub value: String,
    /// Reads the rest of the value from this variable of the daemon's environment, so a secret
    /// never crosses the wire (capability `httpHeaderEnvVars`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_env_var: Option<String>,
}

/// A response header: lower-case name, UTF-8 value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpHeader {
    pub name: String,
    pub value: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum RedirectPolicy {
    /// Follow redirects, up to 10.
    #[default]
    Follow,
    /// Return a 3xx response as it is.
    Stop,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpRequestParams {
    /// An HTTP method token, e.g. `GET`.
    pub method: String,
    /// An absolute `http` or `https` URL.
    pub url: String,
    #[serde(default)]
    pub headers: Vec<HttpRequestHeader>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<Base64Bytes>,
    /// A total deadline in milliseconds, body included; absent or null means none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub redirect_policy: RedirectPolicy,
    /// Caller-chosen id that names the body stream; required even for buffered requests.
    pub request_id: String,
    /// Stream the body as `http/request/bodyDelta` notifications after the response.
    #[serde(default)]
    pub stream_response: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpRequestResult {
    pub status: u16,
    pub headers: Vec<HttpHeader>,
    /// The whole body; empty when it streams.
    pub body_base64: Base64Bytes,
}

/// One piece of a streamed response body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpBodyDelta {
    pub request_id: String,
    /// 1 for the first delta, then contiguous.
    pub seq: u64,
    /// At most 1 MiB decoded; empty in the terminal frame.
    pub delta_base64: Base64Bytes,
    /// True only in the terminal frame.
    pub done: bool,
    /// In the terminal frame, why the body failed; null on a clean end.
    #[serde(default)]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn http_request_timeout_treats_omitted_and_null_as_no_timeout() {
        let base = json!({"method": "GET", "url": "http://127.0.0.1/", "requestId": "r"});
        let omitted: HttpRequestParams = serde_json::from_value(base.clone()).unwrap();
        let mut with_null = base;
        with_null["timeoutMs"] = json!(null);
        let null: HttpRequestParams = serde_json::from_value(with_null).unwrap();
        assert_eq!(omitted.timeout_ms, None);
        assert_eq!(null.timeout_ms, None);
        assert_eq!(omitted.redirect_policy, RedirectPolicy::Follow);
        assert!(omitted.headers.is_empty() && !omitted.stream_response);
    }

    #[test]
    fn http_request_requires_a_request_id() {
        let err = serde_json::from_value::<HttpRequestParams>(
            json!({"method": "GET", "url": "http://127.0.0.1/"}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("requestId"), "{err}");
    }
}
