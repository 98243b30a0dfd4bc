//! The host policy of a managed proxy: which hosts a process may reach, as codex's proxy
//! decides it (`network-proxy` README, "Security notes"), checked beside codex's server.
//!
//! Order: a deny entry wins; then a local or private destination is refused unless local
//! binding is allowed or the host is listed literally (no wildcard); then a host no allow entry
//! matches is "not allowed" (which the client may override); last, a name allowed by a pattern
//! that resolves to a local or private address is refused, and the addresses checked are the
//! ones connected to, so a second lookup cannot rebind the name.

use exec_server_protocol::network::{DomainPermission, NetworkProxyConfig};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Why the host policy refuses a host: codex's reason names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A deny entry matches.
    Denied,
    /// No allow entry matches; the client may still allow it.
    NotAllowed,
    /// A local or private destination, not allowed for this process.
    NotAllowedLocal,
}

impl Refusal {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::Denied => "denied",
            Self::NotAllowed => "not_allowed",
            Self::NotAllowedLocal => "not_allowed_local",
        }
    }

    /// The `x-proxy-error` header of the refusal.
    pub(crate) fn header(self) -> &'static str {
        match self {
            Self::Denied => "blocked-by-denylist",
            Self::NotAllowed | Self::NotAllowedLocal => "blocked-by-allowlist",
        }
    }

    pub(crate) fn message(self) -> &'static str {
        match self {
            Self::Denied => "Domain denied by the sandbox policy.",
            Self::NotAllowed => "Domain not in allowlist.",
            Self::NotAllowedLocal => "Sandbox policy blocks local/private network addresses.",
        }
    }
}

/// One host pattern, lower-cased.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    /// `*`.
    Any,
    /// `*.suffix`: strict subdomains.
    Subdomains(String),
    /// `**.suffix`: the apex and its subdomains.
    ApexAndSubdomains(String),
    Exact(String),
}

impl Pattern {
    fn parse(text: &str) -> Self {
        let text = normalize(text);
        if text == "*" {
            Self::Any
        } else if let Some(suffix) = text.strip_prefix("**.") {
            Self::ApexAndSubdomains(suffix.to_owned())
        } else if let Some(suffix) = text.strip_prefix("*.") {
            Self::Subdomains(suffix.to_owned())
        } else {
            Self::Exact(text)
        }
    }

    fn matches(&self, host: &str) -> bool {
        let below = |suffix: &str| {
            host.strip_suffix(suffix)
                .is_some_and(|head| head.ends_with('.') && head.len() > 1)
        };
        match self {
            Self::Any => true,
            Self::Subdomains(suffix) => below(suffix),
            Self::ApexAndSubdomains(suffix) => host == suffix || below(suffix),
            Self::Exact(exact) => host == exact,
        }
    }
}

/// A host as compared: lower case, no trailing dot, no brackets, an IP in its canonical form.
pub(crate) fn normalize(host: &str) -> String {
    let host = host.trim().trim_end_matches('.').to_ascii_lowercase();
    let bare = host
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(&host);
    match bare.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => bare.to_owned(),
    }
}

#[derive(Debug)]
pub(crate) struct HostPolicy {
    allow: Vec<Pattern>,
    deny: Vec<Pattern>,
    allow_local: bool,
}

impl HostPolicy {
    pub(crate) fn new(config: &NetworkProxyConfig) -> Self {
        let entries = config.domains.iter().flatten();
        let with = |wanted: DomainPermission| {
            entries
                .clone()
                .filter(move |(_, permission)| **permission == wanted)
                .map(|(pattern, _)| Pattern::parse(pattern))
                .collect()
        };
        Self {
            allow: with(DomainPermission::Allow),
            deny: with(DomainPermission::Deny),
            allow_local: config.allow_local_binding,
        }
    }

    /// The policy's answer for `host` (normalized) before any lookup.
    pub(crate) fn check(&self, host: &str) -> Result<(), Refusal> {
        if self.deny.iter().any(|pattern| pattern.matches(host)) {
            return Err(Refusal::Denied);
        }
        if !self.allow_local && is_local_host(host) {
            let literal = Pattern::Exact(host.to_owned());
            return match self.allow.contains(&literal) {
                true => Ok(()),
                false => Err(Refusal::NotAllowedLocal),
            };
        }
        match self.allow.iter().any(|pattern| pattern.matches(host)) {
            true => Ok(()),
            false => Err(Refusal::NotAllowed),
        }
    }

    /// The addresses a name allowed by [`HostPolicy::check`] may be connected at: refused when
    /// any is local or private and local destinations are not allowed.
    pub(crate) fn check_resolved(&self, addresses: &[SocketAddr]) -> Result<(), Refusal> {
        match !self.allow_local && addresses.iter().any(|a| is_local_ip(a.ip())) {
            true => Err(Refusal::NotAllowedLocal),
            false => Ok(()),
        }
    }
}

/// A local or private IP, or `localhost` and its subdomains.
pub(crate) fn is_local_host(host: &str) -> bool {
    match host.parse::<IpAddr>() {
        Ok(ip) => is_local_ip(ip),
        Err(_) => host == "localhost" || host.ends_with(".localhost"),
    }
}

/// Loopback, private, link-local, shared (CGNAT), unspecified, multicast and reserved
/// addresses, the IETF protocol assignments, and the documentation and benchmarking ranges (as
/// codex 0.171.0 classifies them: 192.0.2.1 is "not_allowed_local" there).
pub(crate) fn is_local_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => is_local_v4(ip),
        IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(v4) => is_local_v4(v4),
            None => is_local_v6(ip),
        },
    }
}

fn is_local_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b == 18 || b == 19))
}

fn is_local_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn policy(entries: &[(&str, DomainPermission)], allow_local: bool) -> HostPolicy {
        let domains: BTreeMap<String, DomainPermission> = entries
            .iter()
            .map(|(pattern, permission)| (pattern.to_string(), *permission))
            .collect();
        HostPolicy::new(&NetworkProxyConfig {
            enabled: true,
            domains: Some(domains),
            allow_local_binding: allow_local,
            ..Default::default()
        })
    }

    #[test]
    fn patterns_match_as_codex_documents_them() {
        use DomainPermission::Allow;
        let policy = policy(&[("*.sub.test", Allow), ("**.apex.test", Allow)], false);
        assert_eq!(policy.check("a.sub.test"), Ok(()));
        assert_eq!(policy.check("sub.test"), Err(Refusal::NotAllowed));
        assert_eq!(policy.check("apex.test"), Ok(()));
        assert_eq!(policy.check("x.y.apex.test"), Ok(()));
        assert_eq!(policy.check("evilapex.test"), Err(Refusal::NotAllowed));
    }

    #[test]
    fn reserved_and_documentation_ranges_are_local() {
        for local in [
            "192.0.2.2",
            "198.51.100.1",
            "203.0.113.1",
            "192.0.0.1",
            "198.18.0.1",
        ] {
            assert!(is_local_host(local), "{local}");
        }
        for local in ["240.0.0.1", "255.255.255.255", "::ffff:192.0.2.1"] {
            assert!(is_local_host(local), "{local}");
        }
        for public in ["192.88.99.1", "8.8.8.8", "2001:db8::5", "198.20.0.1"] {
            assert!(!is_local_host(public), "{public}");
        }
    }

    #[test]
    fn deny_wins_and_local_needs_a_literal() {
        use DomainPermission::{Allow, Deny, None};
        let policy = policy(
            &[
                ("*", Allow),
                ("bad.test", Deny),
                ("127.0.0.1", Allow),
                ("::1", None),
            ],
            false,
        );
        assert_eq!(policy.check("bad.test"), Err(Refusal::Denied));
        assert_eq!(policy.check("127.0.0.1"), Ok(()));
        assert_eq!(policy.check("localhost"), Err(Refusal::NotAllowedLocal));
        assert_eq!(policy.check("10.1.2.3"), Err(Refusal::NotAllowedLocal));
        assert_eq!(
            policy.check(&normalize("[::1]")),
            Err(Refusal::NotAllowedLocal)
        );
        assert_eq!(policy.check(&normalize("Example.COM.")), Ok(()));
        let resolved: SocketAddr = "192.168.1.1:80".parse().unwrap();
        assert_eq!(
            policy.check_resolved(&[resolved]),
            Err(Refusal::NotAllowedLocal)
        );
    }

    #[test]
    fn no_allow_entry_allows_nothing() {
        assert_eq!(
            policy(&[], true).check("example.com"),
            Err(Refusal::NotAllowed)
        );
        assert_eq!(
            policy(&[], true).check("127.0.0.1"),
            Err(Refusal::NotAllowed)
        );
    }
}
