//! codex's managed network proxy on the executor (`networkProxyLaunch`, issue #42): with the
//! feature `network_proxy` on and a domain allowlist, and network access in the sandbox profile
//! (codex starts the proxy only then), codex sends every sandboxed `process/start` of the turn
//! with `networkProxy` and `enforceManagedNetwork`, and the executor runs codex's HTTP proxy
//! beside the command, points the command's proxy variables at it, and lets the command reach
//! nothing else. What the proxy allows reaches a server on the host; what it does not is
//! answered 403 by the proxy itself, before any lookup or connection.

use super::{assert_same, Sandbox, Turn};
use crate::common::http_server::HttpServer;
use codex_scripted_model::Step;

/// The proxy on, allowing only the literal `127.0.0.1` (not `localhost`). With
/// `allow_local_binding` false (the default) the proxy's `NO_PROXY` is empty: even loopback goes
/// through it.
const PROXY_CONFIG: &str = "[features.network_proxy]\nenabled = true\nmode = \"full\"\n\
                            domains = { \"127.0.0.1\" = \"allow\" }\n";

/// `curl` through the proxy the command's environment names: the body, the status and the
/// proxy's verdict header, with none of the headers whose values change from run to run.
fn fetch(url: &str) -> Step {
    Step::sh(format!(
        "curl -sS --max-time 10 -o - \
         -w '\\nstatus=%{{http_code}} proxy-error=%header{{x-proxy-error}}\\n' {url}"
    ))
}

#[tokio::test]
async fn the_managed_proxy_lets_through_only_its_allowlist() {
    let server = HttpServer::start().await;
    let target = server.url("/target");
    let port = server.base.rsplit(':').next().unwrap();
    let outcome = assert_same(
        &Turn::new(vec![
            fetch(&target),
            fetch("http://example.org/"),
            fetch(&format!("http://localhost:{port}/target")),
            Step::sh(format!(
                "curl -sS --noproxy '*' --max-time 10 {target} > /dev/null 2>&1 \
                 && echo direct-connected || echo direct-refused"
            )),
        ])
        // Network access in the profile, which the managed proxy then confines to itself.
        .sandbox(Sandbox::WorkspaceWrite { network: true })
        .config(PROXY_CONFIG)
        .recording_methods("process/start")
        .recording_fields(&["networkProxy", "enforceManagedNetwork"]),
    )
    .await;
    let told = |step: usize| outcome.told[step].clone().unwrap_or_default();
    assert!(
        told(0).ends_with("\ntarget\nstatus=200 proxy-error="),
        "{}",
        told(0)
    );
    for blocked in [1, 2] {
        assert!(
            told(blocked).contains("status=403 proxy-error=blocked-by-allowlist"),
            "{}",
            told(blocked)
        );
    }
    assert!(
        told(1).contains("\"reason\":\"not_allowed\""),
        "{}",
        told(1)
    );
    assert!(told(3).contains("direct-refused"), "{}", told(3));
    // One request per executor reached the server: the allowed one.
    assert_eq!(server.hits(), 2);
    let methods = outcome.methods.unwrap();
    let starts = methods.get("process/start");
    assert!(starts.is_some(), "{methods:?}");
    for field in ["networkProxy", "enforceManagedNetwork"] {
        assert_eq!(
            methods.get(&format!("process/start {field}")),
            starts,
            "every start carries {field}: {methods:?}"
        );
    }
}

/// Transparent TCP (`networkProxyTransparentTcp`): with `transparent_tcp` (and SOCKS5, which it
/// needs) in the proxy's config, a command that ignores the proxy variables, bash's `/dev/tcp`
/// here, is still carried through the proxy's policy: the host's own address, listed, is
/// reached; a public address not listed is not. codex refuses the tool call outright on an
/// executor without the capability ("selected exec-server does not support transparent TCP").
#[tokio::test]
async fn transparent_tcp_carries_a_raw_connection_through_the_policy() {
    let host = crate::codex_differential::network_proxy::host_address();
    let server = HttpServer::start_on(host).await;
    let port = server.base.rsplit(':').next().unwrap();
    let config = format!(
        "[features.network_proxy]\nenabled = true\nmode = \"full\"\nenable_socks5 = true\n\
         transparent_tcp = true\ndomains = {{ \"{host}\" = \"allow\" }}\n"
    );
    let raw = |address: String| {
        Step::sh(format!(
            "exec 3<>/dev/tcp/{address}/{port} && \
             printf 'GET /target HTTP/1.0\\r\\nHost: t\\r\\n\\r\\n' >&3 && \
             cat <&3 2>/dev/null | tail -n 1; echo ' raw-done'"
        ))
    };
    let outcome = assert_same(
        &Turn::new(vec![raw(host.to_string()), raw("8.8.8.8".to_owned())])
            .sandbox(Sandbox::WorkspaceWrite { network: true })
            .config(Box::leak(config.into_boxed_str()))
            .recording_methods("process/start")
            .recording_fields(&["networkProxy"]),
    )
    .await;
    let told = |step: usize| outcome.told[step].clone().unwrap_or_default();
    assert!(told(0).contains("target raw-done"), "{}", told(0));
    assert!(!told(1).contains("target"), "{}", told(1));
    assert_eq!(server.hits(), 2, "the listed address, once per executor");
}
