//! The managed network proxy (`networkProxyLaunch`): what `process/start.networkProxy` asks the
//! executor to launch beside the command, the audit of each decision it takes
//! (`network/policyDecision`), and the decisions it asks the client for (`network/policyRequest`,
//! a request from the executor to the client). Names and shapes are codex's
//! (`RemoteNetworkProxyLaunchConfig`, exec-server-protocol `network_policy.rs`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The method of the executor's request to the client for a decision the policy leaves open.
pub const NETWORK_POLICY_REQUEST: &str = "network/policyRequest";

/// `process/start.networkProxy`: the proxy to launch for this one process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkProxyLaunch {
    pub proxy: NetworkProxyConfig,
    /// Who the decisions are audited for; kept as sent, not interpreted here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_metadata: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    /// Present: a host the policy does not allow is asked of the client
    /// (`network/policyRequest`), which has this long to answer (must be nonzero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_decision_timeout_ms: Option<u64>,
    /// codex's controller-side policy context; kept as sent, not interpreted here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_context: Option<serde_json::Value>,
}

/// The proxy's policy (codex's `RemoteNetworkProxyConfig`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkProxyConfig {
    /// Must be true: a launch asks for a proxy that runs.
    pub enabled: bool,
    /// Also a SOCKS5 listener (`ALL_PROXY=socks5h://…`).
    #[serde(default)]
    pub enable_socks5: bool,
    /// SOCKS5 UDP ASSOCIATE; refused here (the sandbox has no UDP).
    #[serde(default)]
    pub enable_socks5_udp: bool,
    /// Whether the proxy may itself go through the executor's HTTP(S)_PROXY; this executor
    /// connects directly either way.
    #[serde(default)]
    pub allow_upstream_proxy: bool,
    /// macOS only (`x-unix-socket`); unix socket proxying is refused on Linux.
    #[serde(default)]
    pub dangerously_allow_all_unix_sockets: bool,
    #[serde(default)]
    pub mode: NetworkMode,
    /// Host patterns: exact, `*.example.com` (subdomains), `**.example.com` (the apex too) or
    /// `*` (every host). Deny wins; with no allow entry, nothing is allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domains: Option<BTreeMap<String, DomainPermission>>,
    /// macOS only; kept as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unix_sockets: Option<BTreeMap<String, String>>,
    /// False: loopback and private addresses are refused unless listed literally, and names
    /// that resolve to them are refused even when listed.
    #[serde(default)]
    pub allow_local_binding: bool,
    /// Every TCP connection of the command goes to the proxy, not only proxy-aware clients'
    /// (`networkProxyTransparentTcp`); not offered by this executor.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub transparent_tcp: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// Every method and tunnel, within the domain policy.
    #[default]
    Full,
    /// Read-only: GET, HEAD and OPTIONS; tunnels (CONNECT, SOCKS5) are refused, since the proxy
    /// cannot see the method inside them.
    Limited,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DomainPermission {
    /// The entry is ignored.
    None,
    Allow,
    Deny,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NetworkProtocol {
    Http,
    HttpsConnect,
    Socks5Tcp,
    Socks5Udp,
}

/// `network/policyDecision`: one decision of a process's proxy, for the client's audit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyDecisionNotification {
    pub process_id: String,
    /// RFC 3339, milliseconds, UTC.
    pub timestamp: String,
    /// `domain` (the host policy) or `non_domain` (the mode guard).
    pub scope: String,
    /// `allow`, `deny` or `ask`.
    pub decision: String,
    /// `baseline_policy`, `mode_guard` or `decider` (the client's answer).
    pub source: String,
    /// `allow`, `denied`, `not_allowed`, `not_allowed_local`, `method_not_allowed`, or the
    /// client's reason.
    pub reason: String,
    pub protocol: NetworkProtocol,
    pub host: String,
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The command's end of the connection, `address:port`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The client allowed a host the policy did not.
    pub policy_override: bool,
}

/// `network/policyRequest` params: a host the policy does not allow, asked of the client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRequestParams {
    pub process_id: String,
    pub request: PolicyRequestTarget,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRequestTarget {
    pub protocol: NetworkProtocol,
    pub host: String,
    pub port: u16,
}

/// The client's answer to `network/policyRequest`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRequestResult {
    pub decision: PolicyVerdict,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum PolicyVerdict {
    Allow,
    Deny {
        #[serde(default)]
        reason: String,
    },
    /// Refused for now; the client will ask its user.
    Ask {
        #[serde(default)]
        reason: String,
    },
}
