//! Pooled HTTP clients, built once per daemon, and the choice between them.
//!
//! reqwest fixes proxies and the redirect policy per client, so there is one client for each
//! combination of route (through the ambient proxies, or direct for literal loopback URLs) and
//! redirect policy; each keeps its own connection pool. They share one cookie jar and one trust
//! configuration (`trust`).

use super::{describe, HttpError};
use exec_server_protocol::http::RedirectPolicy;
use reqwest::redirect::Policy;
use std::sync::OnceLock;
use url::{Host, Url};

/// `[direct][stop]`, each built on first use.
static CLIENTS: [[OnceLock<Result<reqwest::Client, String>>; 2]; 2] =
    [const { [const { OnceLock::new() }; 2] }; 2];

/// Sends `request`; a failure to connect, send or meet the deadline is -32603.
pub(super) async fn send(
    request: reqwest::Request,
    policy: RedirectPolicy,
) -> Result<reqwest::Response, HttpError> {
    let direct = is_literal_loopback(request.url());
    let stop = policy == RedirectPolicy::Stop;
    let client = CLIENTS[direct as usize][stop as usize]
        .get_or_init(|| build(direct, policy))
        .as_ref()
        .map_err(|err| HttpError::Send(err.clone()))?;
    client
        .execute(request)
        .await
        .map_err(|err| HttpError::Send(describe(&err)))
}

/// A client as codex builds its own: trusting the bundle `CODEX_CA_CERTIFICATE` or
/// `SSL_CERT_FILE` names besides the system roots, and sharing the daemon's Cloudflare cookies.
fn build(direct: bool, policy: RedirectPolicy) -> Result<reqwest::Client, String> {
    // reqwest is built without a default crypto provider (ring instead of aws-lc). A second
    // install attempt fails harmlessly.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let redirect = match policy {
        RedirectPolicy::Stop => Policy::none(),
        RedirectPolicy::Follow if direct => stay_on_loopback(),
        RedirectPolicy::Follow => Policy::default(),
    };
    let builder = reqwest::Client::builder()
        .redirect(redirect)
        .tls_certs_merge(super::trust::custom_roots()?)
        .cookie_provider(super::trust::COOKIES.clone());
    let builder = if direct { builder.no_proxy() } else { builder };
    builder.build().map_err(|err| describe(&err))
}

/// The direct client skips the proxies, so it must not follow a redirect off loopback: that
/// request would bypass the proxy the daemon's environment asks for.
fn stay_on_loopback() -> Policy {
    let limited = Policy::default();
    Policy::custom(move |attempt| {
        if is_literal_loopback(attempt.url()) {
            limited.redirect(attempt)
        } else {
            attempt.error("a redirect from a loopback URL to another host is not followed")
        }
    })
}

/// 127.0.0.0/8, ::1 or `localhost`: reached directly, never through an ambient proxy.
fn is_literal_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        Some(Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_loopback_urls_are_recognised() {
        for url in [
            "http://127.0.0.1:8080/",
            "http://127.9.8.7/",
            "https://[::1]/x",
            "http://localhost/",
            "http://LOCALHOST:1/",
        ] {
            assert!(is_literal_loopback(&Url::parse(url).unwrap()), "{url}");
        }
        for url in [
            "http://128.0.0.1/",
            "http://10.0.0.1/",
            "http://[::2]/",
            "http://localhost.example/",
            "http://example.com/",
        ] {
            assert!(!is_literal_loopback(&Url::parse(url).unwrap()), "{url}");
        }
    }
}
