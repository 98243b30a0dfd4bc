//! The one registration with the environment registry: `POST
//! {base}/cloud/environment/{ID}/direct/register`, checked as codex checks the reply, with
//! codex's messages.

use super::auth::Signer;
use crate::config::RemoteConfig;
use axum::http::{header, Request, StatusCode};
use std::time::Duration;

/// The one transport of direct mode, asked for and required back.
const DIRECT_TRANSPORT: &str = "direct_jsonrpc_v1";

/// codex's limit on a registry call.
const REGISTRY_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest reply read: a registration is a few hundred bytes, and of an error reply only
/// [`ERROR_PREVIEW_BYTES`] are shown.
const MAX_REPLY_BYTES: usize = 64 * 1024;

/// The longest piece of an error reply shown.
const ERROR_PREVIEW_BYTES: usize = 4096;

/// Where to dial, as the registry said.
pub(super) struct Registration {
    pub(super) url: url::Url,
    pub(super) registration_id: String,
}

/// The reply's members; others are ignored. A missing one is a deserialization error, an empty
/// `url` or `registration_id` "incomplete" data, as in codex.
#[derive(serde::Deserialize)]
struct Reply {
    environment_id: String,
    url: String,
    transport: String,
    registration_id: String,
}

/// Registers `remote` with its registry; every failure is fatal, as in codex.
pub(super) async fn register(
    remote: &RemoteConfig,
    signer: &Signer,
) -> anyhow::Result<Registration> {
    let endpoint = format!(
        "{}/cloud/environment/{}/direct/register",
        remote.registry.as_str().trim_end_matches('/'),
        remote.environment_id
    );
    let body = format!(r#"{{"transport":"{DIRECT_TRANSPORT}"}}"#).into_bytes();
    let mut request = Request::post(&endpoint)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.clone())?;
    signer
        .sign(&mut request, &[header::CONTENT_TYPE], &body)
        .await?;
    // reqwest is built without a default crypto provider (ring instead of aws-lc).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REGISTRY_TIMEOUT)
        .build()?;
    let failed =
        |err: reqwest::Error| anyhow::anyhow!("environment registry request failed: {err}");
    let response = client
        .execute(reqwest::Request::try_from(request)?)
        .await
        .map_err(failed)?;
    let status = response.status();
    let body = read_capped(response, &endpoint).await?;
    parse(status, &body, &remote.environment_id)
}

/// The reply's body, read as it arrives and refused once past [`MAX_REPLY_BYTES`]: a registry
/// (or whoever answers in its place) must not make the daemon hold whatever it sends.
async fn read_capped(mut response: reqwest::Response, endpoint: &str) -> anyhow::Result<Vec<u8>> {
    let too_large = || {
        tracing::error!(
            endpoint,
            limit = MAX_REPLY_BYTES,
            "the environment registry's reply is too large; not read further"
        );
        anyhow::anyhow!("environment registry reply exceeds the {MAX_REPLY_BYTES}-byte limit")
    };
    if response
        .content_length()
        .is_some_and(|length| length > MAX_REPLY_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|err| anyhow::anyhow!("environment registry request failed: {err}"))?
    {
        if body.len() + chunk.len() > MAX_REPLY_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The registration a reply of `status` with `body` gives, or codex's error for it.
fn parse(status: StatusCode, body: &[u8], environment_id: &str) -> anyhow::Result<Registration> {
    if !status.is_success() {
        return Err(refusal(status, &String::from_utf8_lossy(body)));
    }
    let reply: Reply = serde_json::from_slice(body).map_err(|err| {
        anyhow::anyhow!("failed to serialize or deserialize exec-server JSON: {err}")
    })?;
    check(reply, environment_id)
}

#[doc(hidden)]
/// The registry reply's parser, for the fuzz target (fuzz/): the URL to dial and the
/// registration id, or the error's text.
pub fn parse_reply(
    status: u16,
    body: &[u8],
    environment_id: &str,
) -> Result<(String, String), String> {
    let status = StatusCode::from_u16(status).map_err(|err| err.to_string())?;
    parse(status, body, environment_id)
        .map(|registration| (registration.url.into(), registration.registration_id))
        .map_err(|err| format!("{err:#}"))
}

/// The reply's members, as codex requires them.
fn check(reply: Reply, environment_id: &str) -> anyhow::Result<Registration> {
    anyhow::ensure!(
        reply.environment_id == environment_id,
        "environment registry returned a different environment id"
    );
    anyhow::ensure!(
        reply.transport == DIRECT_TRANSPORT,
        "environment registry returned unsupported direct transport `{}`",
        reply.transport
    );
    anyhow::ensure!(
        !reply.url.is_empty() && !reply.registration_id.is_empty(),
        "environment registry returned incomplete direct connection data"
    );
    let url = url::Url::parse(&reply.url)
        .map_err(|err| anyhow::anyhow!("environment registry returned an invalid url: {err}"))?;
    crate::config::require_secure(&url, "wss")?;
    Ok(Registration {
        url,
        registration_id: reply.registration_id,
    })
}

/// A non-2xx reply, in codex's words: `{"error":{"code","message"}}` when the body is that.
fn refusal(status: StatusCode, body: &str) -> anyhow::Error {
    #[derive(serde::Deserialize)]
    struct Body {
        error: Detail,
    }
    #[derive(serde::Deserialize)]
    struct Detail {
        code: Option<String>,
        message: Option<String>,
    }
    let mut preview = body.trim();
    if preview.len() > ERROR_PREVIEW_BYTES {
        let mut end = ERROR_PREVIEW_BYTES;
        while !preview.is_char_boundary(end) {
            end -= 1;
        }
        preview = &preview[..end];
    }
    let detail = serde_json::from_str::<Body>(body)
        .ok()
        .map(|body| body.error);
    let code = detail.as_ref().and_then(|detail| detail.code.clone());
    let message = detail
        .and_then(|detail| detail.message)
        .unwrap_or_else(|| match preview {
            "" => "empty or malformed error body".to_owned(),
            text => text.to_owned(),
        });
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        return anyhow::anyhow!(
            "environment registry authentication error: environment registry authentication \
             failed ({status}): {message}"
        );
    }
    match code {
        Some(code) => {
            anyhow::anyhow!("environment registry request failed ({status}, {code}): {message}")
        }
        None => anyhow::anyhow!("environment registry request failed ({status}): {message}"),
    }
}
