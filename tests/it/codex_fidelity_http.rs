//! `http/request`'s outbound trust as codex's (issue 29, gap 8), after codex's
//! `codex-rs/exec-server/tests/chatgpt_cloudflare_affinity.rs`: through a TLS-intercepting
//! CONNECT proxy with a throwaway CA (`support::tls_intercept`), offline, this daemon and codex's
//! own exec-server trust the CA named by `CODEX_CA_CERTIFICATE` or `SSL_CERT_FILE`, and keep
//! and replay only Cloudflare's cookies, only to ChatGPT's hosts.

use crate::common::codex_peer::CodexPeer;
use crate::common::{Client, Daemon};
use crate::support::tls_intercept::{InterceptingProxy, Seen};
use serde_json::{json, Value};

/// A daemon (ours or codex's) whose `http/request`s go through `proxy`, trusting its CA through
/// `variable` (none: only the system roots).
enum Peer {
    Ours(Daemon),
    Codex(CodexPeer),
}

impl Peer {
    fn url(&self) -> &str {
        match self {
            Peer::Ours(daemon) => &daemon.url,
            Peer::Codex(codex) => &codex.url,
        }
    }
}

fn start(
    codex: bool,
    proxy: &InterceptingProxy,
    ca: &tempfile::NamedTempFile,
    variable: Option<&str>,
) -> Peer {
    let proxy_url = format!("http://127.0.0.1:{}", proxy.port);
    let ca = ca.path().to_str().unwrap();
    let mut env = vec![("HTTPS_PROXY", proxy_url.as_str()), ("NO_PROXY", "")];
    env.extend(variable.map(|variable| (variable, ca)));
    if codex {
        Peer::Codex(CodexPeer::start_with(&[], &env))
    } else {
        Peer::Ours(Daemon::start_with(&[], &env))
    }
}

fn ca_file(proxy: &InterceptingProxy) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &proxy.ca_pem).unwrap();
    file
}

async fn get(client: &Client, id: &str, url: &str) -> Result<Value, Value> {
    let params = json!({"method": "GET", "url": url, "requestId": id});
    client.request("http/request", params).await
}

/// The cookies of a request, as a sorted list.
fn cookies(seen: &Seen) -> Vec<String> {
    let mut cookies: Vec<String> = seen
        .cookie
        .iter()
        .flat_map(|header| header.split("; ").map(str::to_owned))
        .collect();
    cookies.sort();
    cookies
}

/// The requests of the affinity scenario, and the cookies each carried to the proxy.
async fn affinity_scenario(peer: &Peer, proxy: &InterceptingProxy) -> Vec<(String, Vec<String>)> {
    let client = Client::connect(peer.url()).await;
    client.initialize(None).await.unwrap();
    let urls = [
        "https://chatgpt.com/backend-api/a?set=__cflb=west&set=session=secret&set=_cfuvid=u1",
        "https://chatgpt.com/backend-api/b",
        "https://api.openai.com/v1/c",
        "https://ab.chatgpt.com/backend-api/d",
        "https://chatgpt.com/backend-api/e?set=__cflb=central",
        "https://chatgpt.com/backend-api/f",
    ];
    for (index, url) in urls.iter().enumerate() {
        let reply = get(&client, &format!("r{index}"), url).await;
        let reply = reply.unwrap_or_else(|err| panic!("{url}: {err}"));
        assert_eq!(reply["status"], 200, "{url}");
    }
    proxy
        .seen()
        .iter()
        .map(|seen| (format!("{}{}", seen.host, seen.path), cookies(seen)))
        .collect()
}

#[tokio::test]
async fn chatgpt_cloudflare_affinity_cookies_through_a_tls_intercepting_proxy() {
    let mut outcomes = Vec::new();
    for codex in [false, true] {
        let proxy = InterceptingProxy::start().await;
        let ca = ca_file(&proxy);
        let peer = start(codex, &proxy, &ca, Some("CODEX_CA_CERTIFICATE"));
        outcomes.push(affinity_scenario(&peer, &proxy).await);
    }
    let (ours, codex) = (&outcomes[0], &outcomes[1]);
    assert_eq!(ours, codex, "ours vs codex");
    let sent: Vec<Vec<&str>> = ours
        .iter()
        .map(|(_, cookies)| cookies.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(
        sent,
        [
            vec![],
            // The session cookie set beside them is not kept.
            vec!["__cflb=west", "_cfuvid=u1"],
            // Nothing for another host.
            vec![],
            // Set without a Domain, they are chatgpt.com's alone (normal cookie rules).
            vec![],
            vec!["__cflb=west", "_cfuvid=u1"],
            // The newer value replaces the older.
            vec!["__cflb=central", "_cfuvid=u1"],
        ],
        "{ours:?}"
    );
}

#[tokio::test]
async fn custom_ca_from_ssl_cert_file_and_none_without_it() {
    for codex in [false, true] {
        let who = if codex { "codex" } else { "ours" };
        let proxy = InterceptingProxy::start().await;
        let ca = ca_file(&proxy);
        let trusting = start(codex, &proxy, &ca, Some("SSL_CERT_FILE"));
        let client = Client::connect(trusting.url()).await;
        client.initialize(None).await.unwrap();
        let reply = get(&client, "r", "https://chatgpt.com/x").await;
        assert_eq!(reply.unwrap()["status"], 200, "{who}");

        let untrusting = start(codex, &proxy, &ca, None);
        let client = Client::connect(untrusting.url()).await;
        client.initialize(None).await.unwrap();
        let error = get(&client, "r", "https://chatgpt.com/x")
            .await
            .unwrap_err();
        assert_eq!(error["code"], -32603, "{who}: {error}");
        // codex names the request only; ours adds the causes.
        let message = error["message"].as_str().unwrap();
        let failed = "http/request failed: error sending request for url (https://chatgpt.com/x)";
        assert!(message.starts_with(failed), "{who}: {message}");
        assert!(
            codex || message.contains("UnknownIssuer"),
            "{who}: {message}"
        );
    }
}
