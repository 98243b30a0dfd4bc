//! `process/start.networkProxy` (capability `networkProxyLaunch`) beside codex's server: the
//! executor launches codex's managed proxy for the one process, points its proxy variables at
//! it, and confines its network to it. The same requests are refused or carried alike (host
//! allowlist and denylist, local and private destinations, limited mode, CONNECT, SOCKS5), the
//! same `network/policyDecision` audit comes, and a host the policy leaves open is asked of the
//! client (`network/policyRequest`) alike. Bad launches are refused alike.

use super::{handshaken, Both};
use crate::common::http_server::HttpServer;
use crate::common::{unb64, Client, TIMEOUT};
use serde_json::{json, Value};
use std::path::Path;

/// A workspace-write sandbox over `root`, the network restricted (codex's wire form).
pub(crate) fn sandbox(root: &Path) -> Value {
    let uri = format!("file://{}", root.display());
    json!({"permissions": {"type": "managed", "file_system": {"type": "restricted", "entries": [
            {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
            {"path": {"type": "path", "path": uri}, "access": "write"}]},
        "network": "restricted"},
        "cwd": uri, "workspaceRoots": [uri], "windowsSandboxLevel": "disabled",
        "useLegacyLandlock": false})
}

/// `networkProxy` allowing `domains`, with `proxy` members changed.
pub(crate) fn network_proxy(domains: Value, proxy: Value) -> Value {
    let mut config = json!({"enabled": true, "enableSocks5": false, "enableSocks5Udp": false,
        "allowUpstreamProxy": false, "dangerouslyAllowAllUnixSockets": false, "mode": "full",
        "domains": domains, "unixSockets": {}, "allowLocalBinding": false});
    for (key, value) in proxy.as_object().unwrap() {
        config[key] = value.clone();
    }
    json!({"proxy": config})
}

/// What one proxied command came to: its standard output, its exit code, the audit (without time,
/// client port and destination port, which differ by run) and the decisions asked.
#[derive(Debug, PartialEq)]
pub(crate) struct Outcome {
    pub output: String,
    pub exit_code: Value,
    pub audit: Vec<Value>,
    pub asked: Vec<Value>,
}

/// Runs `argv` in a sandbox over `root` with `proxy` on `client`, answering any decision asked
/// with `verdict`.
pub(crate) async fn run(
    client: &Client,
    root: &Path,
    id: &str,
    argv: &[&str],
    proxy: Value,
    verdict: Value,
) -> Outcome {
    let mut start = json!({"processId": id, "argv": argv,
        "cwd": format!("file://{}", root.display()),
        "env": {"PATH": "/usr/bin:/bin"}, "tty": false, "sandbox": sandbox(root),
        "enforceManagedNetwork": true});
    start["networkProxy"] = proxy;
    client.call("process/start", start).await;
    let mut outcome = Outcome {
        output: String::new(),
        exit_code: Value::Null,
        audit: Vec::new(),
        asked: Vec::new(),
    };
    loop {
        let message = tokio::time::timeout(TIMEOUT, client.next_notification())
            .await
            .expect("the process closes in time");
        let params = &message["params"];
        match message["method"].as_str().unwrap() {
            "network/policyRequest" => {
                outcome.asked.push(params.clone());
                let reply = json!({"id": message["id"], "result": {"decision": verdict}});
                client.send_text(reply.to_string()).await;
            }
            "network/policyDecision" => {
                let mut event = params.clone();
                for volatile in ["timestamp", "client", "port"] {
                    event.as_object_mut().unwrap().remove(volatile);
                }
                outcome.audit.push(event);
            }
            _ if params["processId"] != id => {}
            // Standard error is left out: how it interleaves with the output is a race.
            "process/output" if params["stream"] == "stdout" => {
                outcome.output += &String::from_utf8_lossy(&unb64(&params["chunk"]));
            }
            "process/exited" => outcome.exit_code = params["exitCode"].clone(),
            "process/closed" => return outcome,
            _ => {}
        }
    }
}

/// The response as the command saw it: the first status line, `x-proxy-error`, and the body
/// (a 403's JSON account parsed); other headers (a `Date`) left out.
fn response(output: &str) -> Value {
    let head = output
        .split_once("\r\n\r\n")
        .map_or(output, |(head, _)| head);
    // The last header block's body: through a tunnel, the proxy's reply then the origin's.
    let body = output.rsplit_once("\r\n\r\n").map_or("", |(_, body)| body);
    let mut lines = head.lines();
    let status = lines.next().unwrap_or_default().trim().to_owned();
    let proxy_error = lines
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("x-proxy-error"))
        .map(|(_, value)| value.trim().to_owned());
    let body = match status.contains(" 403 ") {
        true => serde_json::from_str(body).unwrap_or(Value::Null),
        false => json!(body),
    };
    json!({"status": status, "proxyError": proxy_error, "body": body})
}

/// Each case on both daemons, in order: (what the command saw, its audit), ours then codex's.
async fn on_both(cases: &[(&[&str], Value)], verdict: Value) -> (Vec<Value>, Vec<Value>) {
    let both = Both::start();
    let mut results = Vec::new();
    for url in both.urls() {
        let root = crate::common::scratch_dir();
        let client = handshaken(url).await;
        let mut seen = Vec::new();
        for (index, (argv, proxy)) in cases.iter().enumerate() {
            let id = format!("p{index}");
            let outcome = run(
                &client,
                root.path(),
                &id,
                argv,
                proxy.clone(),
                verdict.clone(),
            );
            let outcome = outcome.await;
            seen.push(
                json!({"response": response(&outcome.output), "exit": outcome.exit_code,
                "audit": outcome.audit, "asked": outcome.asked}),
            );
        }
        results.push(seen);
    }
    let codex = results.pop().unwrap();
    (results.pop().unwrap(), codex)
}

fn curl<'a>(extra: &[&'a str], url: &'a str) -> Vec<&'a str> {
    let mut argv = vec!["curl", "-sS", "-i", "--max-time", "5"];
    argv.extend_from_slice(extra);
    argv.push(url);
    argv
}

/// The host policy decides alike: a literal 127.0.0.1 allowed is reached (once); a host not
/// listed, a denied one (deny wins over `*`), `localhost` and a private address under `*`
/// (local destinations need a literal entry), and a POST in limited mode are refused with
/// codex's 403, header and JSON account, and audited alike.
#[tokio::test]
async fn the_host_policy_decides_alike() {
    let server = HttpServer::start().await;
    let target = format!("{}/target", server.base);
    let port = server.base.rsplit(':').next().unwrap().to_owned();
    let localhost = format!("http://localhost:{port}/target");
    let local = json!({"127.0.0.1": "allow"});
    let cases: Vec<(Vec<&str>, Value)> = vec![
        (curl(&[], &target), network_proxy(local.clone(), json!({}))),
        (
            curl(&[], "http://example.org/"),
            network_proxy(json!({"example.com": "allow"}), json!({})),
        ),
        (
            curl(&[], &target),
            network_proxy(json!({"*": "allow", "127.0.0.1": "deny"}), json!({})),
        ),
        (
            curl(&[], &localhost),
            network_proxy(json!({"*": "allow"}), json!({})),
        ),
        (
            curl(&[], "http://10.1.2.3/"),
            network_proxy(json!({"*": "allow"}), json!({})),
        ),
        (
            curl(&["-X", "POST"], &target),
            network_proxy(local, json!({"mode": "limited"})),
        ),
    ];
    let cases: Vec<(&[&str], Value)> = cases.iter().map(|(a, p)| (&a[..], p.clone())).collect();
    let (ours, codex) = on_both(&cases, json!({"type": "deny"})).await;
    assert_eq!(ours, codex);
    let hits = server
        .state
        .target_hits
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        hits, 2,
        "the allowed request reached the server once per daemon"
    );
    assert_eq!(
        ours[0]["response"]["status"], "HTTP/1.1 200 OK",
        "{ours:#?}"
    );
    let refusals: Vec<&Value> = ours[1..]
        .iter()
        .map(|o| &o["response"]["proxyError"])
        .collect();
    let expected = [
        "blocked-by-allowlist",
        "blocked-by-denylist",
        "blocked-by-allowlist",
        "blocked-by-allowlist",
        "blocked-by-method-policy",
    ];
    assert_eq!(
        refusals,
        expected.map(|e| json!(e)).iter().collect::<Vec<_>>()
    );
}

/// CONNECT tunnels (`curl -p`) and SOCKS5 (`enableSocks5`, `ALL_PROXY=socks5h://`) go through
/// the same policy alike: an allowed destination is reached through each, another refused.
#[tokio::test]
async fn tunnels_and_socks_go_through_the_same_policy_alike() {
    let server = HttpServer::start().await;
    let target = format!("{}/target", server.base);
    let local = json!({"127.0.0.1": "allow"});
    let socks = json!({"enableSocks5": true});
    let via_socks = [
        "sh",
        "-c",
        "curl -sS --max-time 5 -x \"$ALL_PROXY\" \"$0\"; echo \" exit=$?\"",
    ];
    let cases: Vec<(Vec<&str>, Value)> = vec![
        (
            curl(&["-p"], &target),
            network_proxy(local.clone(), json!({})),
        ),
        (
            curl(&["-p"], "http://example.org/"),
            network_proxy(local.clone(), json!({})),
        ),
        (
            [&via_socks[..], &[target.as_str()]].concat(),
            network_proxy(local.clone(), socks.clone()),
        ),
        (
            [&via_socks[..], &["http://example.org/"]].concat(),
            network_proxy(local, socks),
        ),
    ];
    let cases: Vec<(&[&str], Value)> = cases.iter().map(|(a, p)| (&a[..], p.clone())).collect();
    let (mut ours, mut codex) = on_both(&cases, json!({"type": "deny"})).await;
    // A refused CONNECT's body is the proxy's own text; the status and header are compared.
    for outcome in [&mut ours[1], &mut codex[1]] {
        outcome["response"]["body"] = Value::Null;
    }
    assert_eq!(ours, codex);
    assert_eq!(ours[2]["response"]["status"], "target exit=0", "{ours:#?}");
    let hits = server
        .state
        .target_hits
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        hits, 4,
        "each allowed tunnel reached the server, on each daemon"
    );
}

/// With `policyDecisionTimeoutMs`, a host the policy does not allow is asked of the client
/// (`network/policyRequest`), and its answer decides, audited as the decider's: `ask` and
/// `deny` refuse with `blocked-by-policy`; a local destination is never asked.
#[tokio::test]
async fn the_client_decides_what_the_policy_leaves_open_alike() {
    let server = HttpServer::start().await;
    let target = format!("{}/target", server.base);
    let callbacks = |domains: Value| {
        let mut proxy = network_proxy(domains, json!({}));
        proxy["policyDecisionTimeoutMs"] = json!(5_000);
        proxy
    };
    let cases: Vec<(Vec<&str>, Value)> = vec![
        (
            curl(&[], "http://example.net/"),
            callbacks(json!({"example.com": "allow"})),
        ),
        (
            curl(&[], &target),
            callbacks(json!({"example.com": "allow"})),
        ),
    ];
    let cases: Vec<(&[&str], Value)> = cases.iter().map(|(a, p)| (&a[..], p.clone())).collect();
    let verdict = json!({"type": "ask", "reason": "the user decides"});
    let (ours, codex) = on_both(&cases, verdict).await;
    assert_eq!(ours, codex);
    assert_eq!(
        ours[0]["asked"][0]["request"]["host"], "example.net",
        "{ours:#?}"
    );
    assert_eq!(ours[0]["response"]["proxyError"], "blocked-by-policy");
    assert_eq!(
        ours[1]["asked"],
        json!([]),
        "a local destination is not asked"
    );
}

/// One of the host's own IPv4 addresses other than loopback, which a sandbox reaches only
/// through a route out of its namespace (here: transparent TCP's).
pub(crate) fn host_address() -> std::net::IpAddr {
    let listed = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .expect("iproute2's ip runs");
    // `2: eth0    inet 192.0.2.2/24 brd ...`
    String::from_utf8_lossy(&listed.stdout)
        .split_whitespace()
        .skip_while(|word| *word != "inet")
        .nth(1)
        .and_then(|cidr| cidr.split('/').next()?.parse().ok())
        .expect("the host has an IPv4 address other than loopback")
}

/// A command that ignores the proxy variables: bash's `/dev/tcp` straight at `$0:$1`, one
/// HTTP/1.0 request for `/target`, what comes back, then ` done`.
pub(crate) const RAW_GET: &str = "exec 3<>/dev/tcp/$0/$1 && \
    printf 'GET /target HTTP/1.0\r\nHost: t\r\n\r\n' >&3 && cat <&3; echo ' done'";

/// Transparent TCP (`transparentTcp`, with SOCKS5 as codex requires) carries the connections
/// of a command that ignores the proxy variables through the same policy, audited as SOCKS5,
/// alike: a literal allowed address is reached; the same address under `*` (local: it needs a
/// literal) and a public one not listed are refused, the connection closed. (codex's stack
/// resets a refused connection where ours closes it, which only the command's standard error
/// shows; it is not compared.)
#[tokio::test]
async fn transparent_tcp_carries_what_ignores_the_proxy_alike() {
    let host = host_address();
    let server = HttpServer::start_on(host).await;
    let port = server.base.rsplit(':').next().unwrap().to_owned();
    let (host, transparent) = (
        host.to_string(),
        json!({"enableSocks5": true, "transparentTcp": true}),
    );
    let raw = |address: &str| {
        ["bash", "-c", RAW_GET, address, port.as_str()]
            .map(str::to_owned)
            .to_vec()
    };
    let cases: Vec<(Vec<String>, Value)> = vec![
        (
            raw(&host),
            network_proxy(json!({ host.as_str(): "allow" }), transparent.clone()),
        ),
        (
            raw(&host),
            network_proxy(json!({"*": "allow"}), transparent.clone()),
        ),
        (
            raw("8.8.8.8"),
            network_proxy(json!({"example.com": "allow"}), transparent),
        ),
    ];
    let argvs: Vec<Vec<&str>> = cases
        .iter()
        .map(|(argv, _)| argv.iter().map(String::as_str).collect())
        .collect();
    let cases: Vec<(&[&str], Value)> = argvs
        .iter()
        .zip(&cases)
        .map(|(argv, (_, proxy))| (&argv[..], proxy.clone()))
        .collect();
    let (ours, codex) = on_both(&cases, json!({"type": "deny"})).await;
    assert_eq!(ours, codex);
    assert_eq!(ours[0]["response"]["body"], "target done\n", "{ours:#?}");
    let refused: Vec<&Value> = ours.iter().map(|o| &o["audit"][0]["reason"]).collect();
    assert_eq!(
        refused,
        [
            &json!("allow"),
            &json!("not_allowed_local"),
            &json!("not_allowed")
        ]
    );
    assert_eq!(ours[0]["audit"][0]["protocol"], "socks5_tcp");
    assert_eq!(
        server
            .state
            .target_hits
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}

/// Launches this executor cannot honour are refused alike: a disabled proxy, a zero decision
/// budget, transparent TCP without SOCKS5, and transparent TCP without a sandbox.
#[tokio::test]
async fn bad_launches_are_refused_alike() {
    let both = Both::start();
    let mut replies = Vec::new();
    for url in both.urls() {
        let root = crate::common::scratch_dir();
        let client = handshaken(url).await;
        let disabled = network_proxy(json!({"*": "allow"}), json!({"enabled": false}));
        let mut zero = network_proxy(json!({"*": "allow"}), json!({}));
        zero["policyDecisionTimeoutMs"] = json!(0);
        let no_socks = network_proxy(json!({"*": "allow"}), json!({"transparentTcp": true}));
        let transparent = json!({"transparentTcp": true, "enableSocks5": true});
        let unsandboxed = network_proxy(json!({"*": "allow"}), transparent);
        for (id, proxy) in [
            ("disabled", disabled),
            ("zero", zero),
            ("no-socks", no_socks),
            ("unsandboxed", unsandboxed),
        ] {
            let mut start = json!({"processId": id, "argv": ["true"],
                "cwd": format!("file://{}", root.path().display()), "env": {}, "tty": false,
                "sandbox": sandbox(root.path()), "networkProxy": proxy});
            if id == "unsandboxed" {
                start["sandbox"] = Value::Null;
            }
            replies.push(client.request("process/start", start).await);
        }
    }
    let codex = replies.split_off(4);
    assert_eq!(replies, codex);
    assert!(replies.iter().all(Result::is_err), "{replies:?}");
}
