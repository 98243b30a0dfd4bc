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
