//! codex's managed network proxy, launched for one process (`process/start.networkProxy`,
//! capability `networkProxyLaunch`).
//!
//! The proxy has no listener of its own on the host: its HTTP (and SOCKS5) ports are listeners
//! in the process's own network namespace, which the sandbox helper opens and the daemon serves
//! (`crate::launcher::bridge`), so only that process reaches it, and it goes when the process's
//! sandbox state does. The command's environment names it (`HTTP_PROXY` and the rest, as
//! codex's proxy sets them); the sandbox leaves it no other way out. Each request is decided by
//! the host policy ([`policy`]), the client when the policy leaves it open and asked for that
//! ([`Reporter::ask`]), and the mode guard; every decision is audited to the client
//! (`network/policyDecision`).

mod http;
pub(crate) mod policy;
mod socks;
pub(crate) mod transparent;

use exec_server_protocol::network::{
    NetworkMode, NetworkProtocol, NetworkProxyLaunch, PolicyDecisionNotification,
    PolicyRequestParams, PolicyRequestTarget, PolicyVerdict,
};
use policy::{HostPolicy, Refusal};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The HTTP proxy's port in the process's network namespace (codex's default).
pub(crate) const HTTP_PORT: u16 = 3128;
/// The SOCKS5 proxy's port there (codex's default).
pub(crate) const SOCKS_PORT: u16 = 8081;

/// How long the proxy waits for a destination to accept.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the client's answer may take beyond its own budget: the round trip to it.
const DECISION_TRANSPORT_ALLOWANCE: Duration = Duration::from_secs(2);

/// Where a process's proxy reports: its session's client, when one is attached.
pub(crate) trait Reporter: Send + Sync {
    /// Queues `event` for the client (best effort: none is attached, none is told).
    fn audit(&self, event: PolicyDecisionNotification);
    /// Asks the client to decide `request`; None when no client answered within `within`.
    fn ask(
        &self,
        request: PolicyRequestParams,
        within: Duration,
    ) -> futures::future::BoxFuture<'static, Option<PolicyVerdict>>;
}

/// A `networkProxy` this executor cannot launch.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyConfigError {
    #[error("invalid network proxy config: executor-local network proxy launch requires an enabled proxy")]
    Disabled,
    #[error("network policy decision callback timeout must be nonzero")]
    ZeroDecisionTimeout,
    #[error(
        "invalid network proxy config: transparent_tcp requires an enabled managed SOCKS5 proxy"
    )]
    TransparentWithoutSocks,
}

/// One process's proxy.
pub(crate) struct Proxy {
    process_id: String,
    hosts: HostPolicy,
    mode: NetworkMode,
    socks: bool,
    transparent_tcp: bool,
    allow_local: bool,
    decision_timeout: Option<Duration>,
    reporter: Arc<dyn Reporter>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("process_id", &self.process_id)
            .finish_non_exhaustive()
    }
}

/// A request the proxy refuses, and who refused it.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub reason: String,
    /// `deny` or `ask`.
    pub decision: &'static str,
    /// `baseline_policy`, `mode_guard` or `decider`.
    pub source: &'static str,
    /// The `x-proxy-error` header.
    pub header: &'static str,
    pub message: &'static str,
}

impl Block {
    fn refused(refusal: Refusal) -> Self {
        Self {
            reason: refusal.reason().to_owned(),
            decision: "deny",
            source: "baseline_policy",
            header: refusal.header(),
            message: refusal.message(),
        }
    }

    fn method() -> Self {
        Self {
            reason: "method_not_allowed".to_owned(),
            decision: "deny",
            source: "mode_guard",
            header: "blocked-by-method-policy",
            message: "Method not allowed in limited mode.",
        }
    }
}

/// One request the proxy is asked to carry.
pub(crate) struct Request<'a> {
    pub protocol: NetworkProtocol,
    /// As the policy compares it ([`policy::normalize`]), and as it is reported.
    pub host: String,
    pub port: u16,
    pub method: Option<&'a str>,
    pub client: SocketAddr,
}

impl<'a> Request<'a> {
    pub(crate) fn new(
        protocol: NetworkProtocol,
        host: &str,
        port: u16,
        method: Option<&'a str>,
        client: SocketAddr,
    ) -> Self {
        Self {
            protocol,
            host: policy::normalize(host),
            port,
            method,
            client,
        }
    }
}

impl Proxy {
    /// The proxy `launch` asks for, for process `process_id`, reporting to `reporter`.
    pub(crate) fn new(
        launch: &NetworkProxyLaunch,
        process_id: &str,
        reporter: Arc<dyn Reporter>,
    ) -> Result<Self, ProxyConfigError> {
        let config = &launch.proxy;
        if !config.enabled {
            return Err(ProxyConfigError::Disabled);
        }
        if launch.policy_decision_timeout_ms == Some(0) {
            return Err(ProxyConfigError::ZeroDecisionTimeout);
        }
        if config.transparent_tcp && !config.enable_socks5 {
            return Err(ProxyConfigError::TransparentWithoutSocks);
        }
        Ok(Self {
            process_id: process_id.to_owned(),
            hosts: HostPolicy::new(config),
            mode: config.mode,
            socks: config.enable_socks5,
            transparent_tcp: config.transparent_tcp,
            allow_local: config.allow_local_binding,
            decision_timeout: launch.policy_decision_timeout_ms.map(Duration::from_millis),
            reporter,
        })
    }

    /// The ports the process's namespace listens on for the proxy.
    pub(crate) fn ports(&self) -> Vec<u16> {
        match self.socks {
            true => vec![HTTP_PORT, SOCKS_PORT],
            false => vec![HTTP_PORT],
        }
    }

    /// Whether every TCP connection of the process comes to this proxy ([`transparent`]).
    pub(crate) fn transparent_tcp(&self) -> bool {
        self.transparent_tcp
    }

    pub(crate) fn allow_local_binding(&self) -> bool {
        self.allow_local
    }

    /// Points the command's proxy variables at this proxy, as codex's proxy does.
    pub(crate) fn apply_env(&self, env: &mut BTreeMap<String, String>) {
        let http = format!("http://127.0.0.1:{HTTP_PORT}");
        let socks = format!("socks5h://127.0.0.1:{SOCKS_PORT}");
        let set = |env: &mut BTreeMap<String, String>, keys: &[&str], value: &str| {
            for key in keys {
                env.insert((*key).to_owned(), value.to_owned());
            }
        };
        set(env, &[PROXY_ACTIVE], "1");
        let local = if self.allow_local { "1" } else { "0" };
        set(env, &[ALLOW_LOCAL_BINDING], local);
        set(env, HTTP_PROXY_KEYS, &http);
        // With local binding, local destinations are direct; without, the proxy decides them.
        let no_proxy = match self.allow_local {
            true => "localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16",
            false => "",
        };
        set(env, NO_PROXY_KEYS, no_proxy);
        set(env, &[ELECTRON_GET_USE_PROXY], "true");
        set(env, &[NODE_USE_ENV_PROXY], "1");
        let all = if self.socks { &socks } else { &http };
        set(env, ALL_PROXY_KEYS, all);
    }

    /// Serves one connection the process made to `port` of its proxy.
    pub(crate) async fn serve(self: Arc<Self>, stream: tokio::net::TcpStream, port: u16) {
        let Ok(client) = stream.peer_addr() else {
            return;
        };
        match port {
            SOCKS_PORT if self.socks => socks::serve(self, stream, client).await,
            _ => http::serve(self, stream, client).await,
        }
    }

    /// Decides `request`: Ok with the addresses to connect to, or the block. Every decision
    /// is audited.
    pub(crate) async fn decide(&self, request: &Request<'_>) -> Result<Vec<SocketAddr>, Block> {
        let decided = self.decide_host(request).await;
        let (decision, source, reason, policy_override) = match &decided {
            Ok((_, true)) => ("allow", "decider", "not_allowed", true),
            Ok((_, false)) => ("allow", "baseline_policy", "allow", false),
            Err(block) => (block.decision, block.source, block.reason.as_str(), false),
        };
        self.audit(
            request,
            "domain",
            (decision, source, reason),
            policy_override,
        );
        let (addresses, _) = decided?;
        let read_only = matches!(request.method, Some("GET" | "HEAD" | "OPTIONS"));
        if self.mode == NetworkMode::Limited && !read_only {
            let block = Block::method();
            let verdict = (block.decision, block.source, block.reason.as_str());
            self.audit(request, "non_domain", verdict, false);
            return Err(block);
        }
        Ok(addresses)
    }

    /// The host policy's answer, the client's when the policy leaves it open, and the addresses
    /// (resolved once, checked, then connected to); true: the client overrode the policy.
    async fn decide_host(&self, request: &Request<'_>) -> Result<(Vec<SocketAddr>, bool), Block> {
        let host = request.host.as_str();
        let overridden = match self.hosts.check(host) {
            Ok(()) => false,
            Err(Refusal::NotAllowed) if self.decision_timeout.is_some() => {
                self.ask(request).await?;
                true
            }
            Err(refusal) => return Err(Block::refused(refusal)),
        };
        let addresses = resolve(host, request.port).await;
        // A local host got here listed literally (or local destinations are allowed).
        if !policy::is_local_host(host) {
            self.hosts
                .check_resolved(&addresses)
                .map_err(Block::refused)?;
        }
        Ok((addresses, overridden))
    }

    /// The client's decision on a host the policy does not allow; no answer is a refusal.
    async fn ask(&self, request: &Request<'_>) -> Result<(), Block> {
        let within = self.decision_timeout.unwrap_or_default() + DECISION_TRANSPORT_ALLOWANCE;
        let params = PolicyRequestParams {
            process_id: self.process_id.clone(),
            request: PolicyRequestTarget {
                protocol: request.protocol,
                host: request.host.clone(),
                port: request.port,
            },
        };
        let decider = |reason: String, decision| Block {
            reason,
            decision,
            source: "decider",
            header: "blocked-by-policy",
            message: "Request blocked by network policy.",
        };
        match self.reporter.ask(params, within).await {
            Some(PolicyVerdict::Allow) => Ok(()),
            Some(PolicyVerdict::Deny { reason }) => Err(decider(reason, "deny")),
            Some(PolicyVerdict::Ask { reason }) => Err(decider(reason, "ask")),
            None => Err(Block::refused(Refusal::NotAllowed)),
        }
    }

    fn audit(
        &self,
        request: &Request<'_>,
        scope: &str,
        (decision, source, reason): (&str, &str, &str),
        policy_override: bool,
    ) {
        self.reporter.audit(PolicyDecisionNotification {
            process_id: self.process_id.clone(),
            timestamp: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            scope: scope.to_owned(),
            decision: decision.to_owned(),
            source: source.to_owned(),
            reason: reason.to_owned(),
            protocol: request.protocol,
            host: request.host.clone(),
            port: request.port,
            method: request.method.map(str::to_owned),
            client: Some(request.client.to_string()),
            policy_override,
        });
    }
}

/// `host`'s addresses at `port` (an IP is its own); none when the name does not resolve.
async fn resolve(host: &str, port: u16) -> Vec<SocketAddr> {
    if let Ok(ip) = host.parse() {
        return vec![SocketAddr::new(ip, port)];
    }
    match tokio::net::lookup_host((host, port)).await {
        Ok(addresses) => addresses.collect(),
        Err(_) => Vec::new(),
    }
}

/// Connects to the first of `addresses` that accepts.
pub(crate) async fn connect(addresses: &[SocketAddr]) -> std::io::Result<tokio::net::TcpStream> {
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "the host does not resolve");
    for address in addresses {
        match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(address)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(err)) => last = err,
            Err(_) => last = std::io::ErrorKind::TimedOut.into(),
        }
    }
    Err(last)
}

/// Set in a command's environment while codex's managed proxy runs for it.
pub(crate) const PROXY_ACTIVE: &str = "CODEX_NETWORK_PROXY_ACTIVE";
const ALLOW_LOCAL_BINDING: &str = "CODEX_NETWORK_ALLOW_LOCAL_BINDING";
const ELECTRON_GET_USE_PROXY: &str = "ELECTRON_GET_USE_PROXY";
const NODE_USE_ENV_PROXY: &str = "NODE_USE_ENV_PROXY";

/// Whether codex's managed proxy sets `name` in a command's environment (codex's
/// `PROXY_ENV_KEYS`: also its credential broker's and attribution's, which this proxy does not
/// set but a client's own proxy may have).
pub(crate) fn is_proxy_variable(name: &str) -> bool {
    const MARKERS: &[&str] = &[
        PROXY_ACTIVE,
        ALLOW_LOCAL_BINDING,
        ELECTRON_GET_USE_PROXY,
        NODE_USE_ENV_PROXY,
        "CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE",
        "CODEX_NETWORK_PROXY_BROKERED_CREDENTIALS",
        "CODEX_NETWORK_PROXY_ATTRIBUTION",
    ];
    [MARKERS, HTTP_PROXY_KEYS, NO_PROXY_KEYS, ALL_PROXY_KEYS]
        .iter()
        .any(|keys| keys.contains(&name))
}

const ALL_PROXY_KEYS: &[&str] = &["ALL_PROXY", "all_proxy", "FTP_PROXY", "ftp_proxy"];

const HTTP_PROXY_KEYS: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "YARN_HTTP_PROXY",
    "YARN_HTTPS_PROXY",
    "npm_config_http_proxy",
    "npm_config_https_proxy",
    "npm_config_proxy",
    "NPM_CONFIG_HTTP_PROXY",
    "NPM_CONFIG_HTTPS_PROXY",
    "NPM_CONFIG_PROXY",
    "BUNDLE_HTTP_PROXY",
    "BUNDLE_HTTPS_PROXY",
    "PIP_PROXY",
    "DOCKER_HTTP_PROXY",
    "DOCKER_HTTPS_PROXY",
    "WS_PROXY",
    "WSS_PROXY",
    "ws_proxy",
    "wss_proxy",
];

const NO_PROXY_KEYS: &[&str] = &[
    "NO_PROXY",
    "no_proxy",
    "npm_config_noproxy",
    "NPM_CONFIG_NOPROXY",
    "YARN_NO_PROXY",
    "BUNDLE_NO_PROXY",
];
