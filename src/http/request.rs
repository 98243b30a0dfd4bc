//! Turns `http/request` params into a `reqwest::Request`, with the reference's validation
//! errors (all -32602).

use super::HttpError;
use exec_server_protocol::http::{HttpRequestHeader, HttpRequestParams};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use std::time::Duration;

/// Builds the request (taking the body without a copy); `env` reads the daemon's environment
/// for `valueEnvVar` headers.
pub(super) fn build(
    params: HttpRequestParams,
    env: impl Fn(&str) -> Option<String>,
) -> Result<reqwest::Request, HttpError> {
    let method = Method::from_bytes(params.method.as_bytes())
        .map_err(|err| HttpError::Invalid(format!("http/request method is invalid: {err}")))?;
    let url = Url::parse(&params.url)
        .map_err(|err| HttpError::Invalid(format!("http/request url is invalid: {err}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(HttpError::Invalid(format!(
            "http/request only supports http and https URLs, got {}",
            url.scheme()
        )));
    }
    let mut headers = HeaderMap::new();
    for header in &params.headers {
        let (name, value) = header_pair(header, &env)?;
        // `append` keeps repeats; `insert` would keep only the last one.
        headers.append(name, value);
    }
    let mut request = reqwest::Request::new(method, url);
    *request.headers_mut() = headers;
    *request.body_mut() = params.body_base64.map(|body| body.0.into());
    *request.timeout_mut() = params.timeout_ms.map(Duration::from_millis);
    Ok(request)
}

fn header_pair(
    header: &HttpRequestHeader,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(HeaderName, HeaderValue), HttpError> {
    let name = HeaderName::from_bytes(header.name.as_bytes())
        .map_err(|err| HttpError::Invalid(format!("http/request header name is invalid: {err}")))?;
    let mut value = header.value.clone();
    if let Some(var) = &header.value_env_var {
        value.push_str(&env_value(&header.name, var, env)?);
    }
    let mut value = HeaderValue::from_str(&value).map_err(|err| {
        HttpError::Invalid(format!(
            "http/request header value is invalid for {name}: {err}"
        ))
    })?;
    // Keeps a value taken from the executor's environment (typically a secret) out of
    // debug output.
    value.set_sensitive(header.value_env_var.is_some());
    Ok((name, value))
}

/// Executor variables no header may carry, as upstream's `HTTP_HEADER_ENV_DENYLIST` (compared
/// case-insensitively): the executor's and the model providers' credentials.
const ENV_DENYLIST: &[&str] = &[
    "CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN",
    "OPENAI_FEDERATION_RULE_ID",
    "OPENAI_IDENTITY_TOKEN_FILE",
    "OPENAI_WORKLOAD_IDENTITY_CONTEXT",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "CODEX_ACCESS_TOKEN",
    "CODEX_CONNECTORS_TOKEN",
    "CODEX_GUARDIAN_DECISIONS_API_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_CLIENT_SECRET",
    "AZURE_FEDERATED_TOKEN_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

/// The value of `var` for header `name`, with upstream's checks and messages; this daemon's
/// own settings (`EXEC_SERVER_*`, such as its connection token) are refused as the denylist is.
fn env_value(
    name: &str,
    var: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<String, HttpError> {
    let denied = ENV_DENYLIST.iter().any(|d| d.eq_ignore_ascii_case(var));
    if denied || crate::process::env::is_daemon_setting(var) {
        return Err(HttpError::Invalid(format!(
            "http/request header {name} cannot use executor environment variable {var}"
        )));
    }
    match env(var) {
        None => Err(HttpError::Invalid(format!(
            "http/request header {name} requires executor environment variable {var}"
        ))),
        Some(value) if value.is_empty() => Err(HttpError::Invalid(format!(
            "http/request header {name} requires a non-empty executor environment variable {var}"
        ))),
        Some(value) => Ok(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(extra: serde_json::Value) -> HttpRequestParams {
        let mut value = json!({"method": "GET", "url": "http://127.0.0.1/", "requestId": "r"});
        value
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(value).unwrap()
    }

    fn error(extra: serde_json::Value) -> String {
        let err = crate::rpc::RpcError::from(build(params(extra), |_| None).unwrap_err());
        assert_eq!(err.code, -32602);
        err.message
    }

    #[test]
    fn validation_errors_use_the_reference_texts() {
        assert_eq!(
            error(json!({"method": "GE T"})),
            "http/request method is invalid: invalid HTTP method"
        );
        assert_eq!(
            error(json!({"url": "not a url"})),
            "http/request url is invalid: relative URL without a base"
        );
        assert_eq!(
            error(json!({"url": "ftp://127.0.0.1/"})),
            "http/request only supports http and https URLs, got ftp"
        );
        assert_eq!(
            error(json!({"headers": [{"name": "bad name", "value": "v"}]})),
            "http/request header name is invalid: invalid HTTP header name"
        );
        assert_eq!(
            error(json!({"headers": [{"name": "x-a", "value": "line\nbreak"}]})),
            "http/request header value is invalid for x-a: failed to parse header value"
        );
        assert_eq!(
            error(
                json!({"headers": [{"name": "Authorization", "value": "Bearer ", "valueEnvVar": "NO_SUCH_VAR"}]})
            ),
            "http/request header Authorization requires executor environment variable NO_SUCH_VAR"
        );
        for var in ["EXEC_SERVER_CONNECTION_TOKEN", "openai_api_key"] {
            assert_eq!(
                error(json!({"headers": [{"name": "authorization", "value": "Bearer ", "valueEnvVar": var}]})),
                format!("http/request header authorization cannot use executor environment variable {var}")
            );
        }
    }

    #[test]
    fn headers_keep_repeats_and_env_values_are_prefixed() {
        let params = params(json!({
            "headers": [
                {"name": "X-Tag", "value": "a"},
                {"name": "x-tag", "value": "b"},
                {"name": "Authorization", "value": "Bearer ", "valueEnvVar": "TOKEN"}
            ],
            "timeoutMs": 50,
            "bodyBase64": "aGk="
        }));
        let request = build(params, |var| (var == "TOKEN").then(|| "s3cret".to_owned())).unwrap();
        let tags: Vec<_> = request.headers().get_all("x-tag").iter().collect();
        assert_eq!(tags, ["a", "b"]);
        let auth = &request.headers()["authorization"];
        assert_eq!(auth, "Bearer s3cret");
        assert!(auth.is_sensitive());
        assert_eq!(request.timeout(), Some(&Duration::from_millis(50)));
        assert_eq!(request.body().and_then(|b| b.as_bytes()), Some(&b"hi"[..]));
    }
}
