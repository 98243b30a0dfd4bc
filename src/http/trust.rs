//! What codex's outbound HTTP client adds to a plain one, for `http/request` to behave the same
//! (`codex-rs/http-client`): a custom CA bundle for TLS-intercepting corporate proxies, and the
//! Cloudflare cookies that keep ChatGPT's load balancing sticky.

use reqwest::cookie::{CookieStore, Jar};
use reqwest::header::HeaderValue;
use std::sync::{Arc, LazyLock};
use url::Url;

/// The variables naming a PEM bundle to trust besides the platform roots, first set (and
/// non-empty) wins.
const CA_VARIABLES: [&str; 2] = ["CODEX_CA_CERTIFICATE", "SSL_CERT_FILE"];

const CA_HINT: &str = "If you set CODEX_CA_CERTIFICATE or SSL_CERT_FILE, ensure it points to a \
                       PEM file containing one or more CERTIFICATE blocks, or unset it to use \
                       system roots.";

/// The certificates of the bundle the environment names, if it names one; its failure as
/// codex words it (the request then fails with it rather than trusting less than asked).
pub(super) fn custom_roots() -> Result<Vec<reqwest::Certificate>, String> {
    let Some((variable, path)) = CA_VARIABLES.iter().find_map(|&variable| {
        std::env::var_os(variable)
            .filter(|path| !path.is_empty())
            .map(|path| (variable, std::path::PathBuf::from(path)))
    }) else {
        return Ok(Vec::new());
    };
    let shown = path.display();
    let text = std::fs::read(&path).map_err(|err| {
        format!(
            "Failed to read CA certificate file {shown} selected by {variable}: {err}. {CA_HINT}"
        )
    })?;
    // OpenSSL writes trusted certificates under their own label; the DER inside is read alike.
    // Other blocks (CRLs, keys) are skipped by the bundle reader.
    let text =
        String::from_utf8_lossy(&text).replace("TRUSTED CERTIFICATE-----", "CERTIFICATE-----");
    let invalid = |detail: String| {
        format!("Failed to load CA certificates from {shown} selected by {variable}: {detail}. {CA_HINT}")
    };
    let certificates = reqwest::Certificate::from_pem_bundle(text.as_bytes())
        .map_err(|err| invalid(err.to_string()))?;
    if certificates.is_empty() {
        return Err(invalid("no certificates found in PEM file".into()));
    }
    tracing::info!(
        "http/request trusts the {} certificate(s) of {shown} ({variable}) besides the system roots",
        certificates.len()
    );
    Ok(certificates)
}

/// The one cookie jar of the daemon's `http/request` clients.
pub(super) static COOKIES: LazyLock<Arc<CloudflareCookies>> = LazyLock::new(Arc::default);

/// Stores and replays Cloudflare's service cookies for ChatGPT's hosts, and nothing else: no
/// other cookie is kept (a session cookie set in the same response is dropped), and nothing is
/// sent to another host.
#[derive(Default)]
pub(super) struct CloudflareCookies(Jar);

impl CookieStore for CloudflareCookies {
    fn set_cookies(&self, headers: &mut dyn Iterator<Item = &HeaderValue>, url: &Url) {
        if !is_chatgpt(url) {
            return;
        }
        let mut kept = headers.filter(|header| {
            header
                .to_str()
                .ok()
                .and_then(|text| text.split_once('='))
                .is_some_and(|(name, _)| is_cloudflare_cookie(name.trim()))
        });
        self.0.set_cookies(&mut kept, url);
    }

    fn cookies(&self, url: &Url) -> Option<HeaderValue> {
        if !is_chatgpt(url) {
            return None;
        }
        self.0.cookies(url)
    }
}

/// https to `chatgpt.com`, `chat.openai.com`, `chatgpt-staging.com`, or a subdomain of the
/// first or the last.
fn is_chatgpt(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.to_ascii_lowercase();
    url.scheme() == "https"
        && (host == "chat.openai.com"
            || ["chatgpt.com", "chatgpt-staging.com"]
                .iter()
                .any(|domain| host == *domain || host.ends_with(&format!(".{domain}"))))
}

fn is_cloudflare_cookie(name: &str) -> bool {
    const NAMES: [&str; 9] = [
        "__cf_bm",
        "__cflb",
        "__cfruid",
        "__cfseq",
        "__cfwaitingroom",
        "_cfuvid",
        "cf_clearance",
        "cf_ob_info",
        "cf_use_ob",
    ];
    NAMES.contains(&name) || name.starts_with("cf_chl_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_chatgpt_hosts_over_https_take_cookies() {
        for url in [
            "https://chatgpt.com/backend-api/x",
            "https://ab.chatgpt.com/",
            "https://chat.openai.com/",
            "https://chatgpt-staging.com/",
            "https://x.chatgpt-staging.com/",
            "https://CHATGPT.com/",
        ] {
            assert!(is_chatgpt(&Url::parse(url).unwrap()), "{url}");
        }
        for url in [
            "http://chatgpt.com/",
            "https://api.openai.com/",
            "https://x.chat.openai.com/",
            "https://notchatgpt.com/",
            "https://chatgpt.com.evil.example/",
        ] {
            assert!(!is_chatgpt(&Url::parse(url).unwrap()), "{url}");
        }
    }

    #[test]
    fn only_cloudflare_service_cookies_are_kept() {
        let jar = CloudflareCookies::default();
        let url = Url::parse("https://chatgpt.com/").unwrap();
        let set = [
            HeaderValue::from_static("__cflb=west; Path=/"),
            HeaderValue::from_static("session=secret; Path=/"),
            HeaderValue::from_static("cf_chl_rc_i=1; Path=/"),
        ];
        jar.set_cookies(&mut set.iter(), &url);
        let sent = jar.cookies(&url).unwrap();
        let mut sent: Vec<&str> = sent.to_str().unwrap().split("; ").collect();
        sent.sort_unstable();
        assert_eq!(sent, ["__cflb=west", "cf_chl_rc_i=1"]);
        let other = Url::parse("https://api.openai.com/").unwrap();
        assert_eq!(jar.cookies(&other), None);
    }
}
