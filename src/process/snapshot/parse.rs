//! A capture's output made a snapshot: the state text, and the exported environment filtered
//! by the start's `envPolicy` as the daemon's own environment is.

use super::script::STATE_MARKER;
use crate::netproxy;
use crate::process::env;
use exec_server_protocol::process::{EnvInherit, EnvPolicy};
use std::collections::BTreeMap;

/// The capture's output at most (the exports are printed quoted by some shells, with the
/// profile's own output before the state).
pub(crate) const MAX_CAPTURE_BYTES: usize = 8 * MAX_SNAPSHOT_BYTES;
/// The state and the environment together at most; the environment alone too.
const MAX_SNAPSHOT_BYTES: usize = 512 * 1024;

/// Codex's launch context, which no command may inherit (compared without case).
const NEVER_INHERITED: &[&str] = &[
    "CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN",
    "NODE_REPL_AUTH_TOKEN",
    "OPENAI_FEDERATION_RULE_ID",
    "OPENAI_IDENTITY_TOKEN_FILE",
    "OPENAI_WORKLOAD_IDENTITY_CONTEXT",
];

/// A withheld value shorter than this is not looked for in the state: it would be found in
/// any text.
const MIN_CREDENTIAL_BYTES: usize = 8;

#[derive(Debug, PartialEq)]
pub(crate) struct Snapshot {
    pub(crate) state: String,
    pub(crate) environment: BTreeMap<String, String>,
}

/// Whether a command may inherit `name` from a snapshot or a start.
pub(crate) fn inheritable(name: &str) -> bool {
    !NEVER_INHERITED
        .iter()
        .any(|never| never.eq_ignore_ascii_case(name))
        && !env::is_daemon_setting(name)
}

/// The snapshot in `output`, or why there is none (logged; the command runs without one).
pub(crate) fn parse(output: &[u8], policy: Option<&EnvPolicy>) -> Result<Snapshot, String> {
    let separator = output
        .iter()
        .position(|byte| *byte == 0)
        .ok_or("shell snapshot is missing its environment")?;
    let (state, exports) = (&output[..separator], &output[separator + 1..]);
    let start = state
        .windows(STATE_MARKER.len())
        .position(|window| window == STATE_MARKER.as_bytes())
        .ok_or("shell snapshot is missing its state marker")?;
    let state = std::str::from_utf8(&state[start..])
        .map_err(|err| format!("shell snapshot state is not UTF-8: {err}"))?;
    if exports.len() > MAX_SNAPSHOT_BYTES {
        return Err(format!(
            "shell snapshot environment exceeds {MAX_SNAPSHOT_BYTES} bytes"
        ));
    }
    let state_limit = MAX_SNAPSHOT_BYTES - exports.len();
    if state.len() > state_limit {
        return Err(format!("shell snapshot state exceeds {state_limit} bytes"));
    }
    let mut exported: BTreeMap<String, String> = exports
        .split(|byte| *byte == 0)
        .filter_map(|entry| {
            let (name, value) = std::str::from_utf8(entry).ok()?.split_once('=')?;
            Some((name.to_owned(), value.to_owned()))
        })
        .collect();
    // Set while codex's managed network proxy runs: the proxy's variables then belong to this
    // start, not to the shell.
    if exported.contains_key(netproxy::PROXY_ACTIVE) {
        exported.retain(|name, _| !netproxy::is_proxy_variable(name));
    }
    let mut environment = match policy {
        // The profile's exports are the shell's own: the policy filters them as if the
        // daemon had them, whatever it inherits.
        Some(policy) => {
            let policy = EnvPolicy {
                inherit: EnvInherit::All,
                ..policy.clone()
            };
            env::child_env(
                Some(&policy),
                &BTreeMap::new(),
                exported.clone().into_iter(),
            )
        }
        None => exported.clone(),
    };
    environment.retain(|name, _| name != "PWD" && name != "OLDPWD" && inheritable(name));
    refuse_withheld_credentials(state, &exported, &environment)?;
    Ok(Snapshot {
        state: state.to_owned(),
        environment,
    })
}

/// A value the policy withholds from the command (a credential the profile exported, say)
/// must not reach it through the state either: a function or alias that spells it out is
/// replayed as it is, so such a snapshot is not used.
fn refuse_withheld_credentials(
    state: &str,
    exported: &BTreeMap<String, String>,
    kept: &BTreeMap<String, String>,
) -> Result<(), String> {
    let withheld = exported.iter().filter(|(name, value)| {
        value.len() >= MIN_CREDENTIAL_BYTES && kept.get(*name) != Some(value)
    });
    for (_, value) in withheld {
        if state.contains(value.as_str()) {
            return Err("shell snapshot cannot safely replay credentials".to_owned());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(inherit: EnvInherit, exclude: &[&str], include_only: &[&str]) -> EnvPolicy {
        EnvPolicy {
            inherit,
            ignore_default_excludes: false,
            exclude: exclude.iter().map(|s| s.to_string()).collect(),
            set: BTreeMap::from([("PROFILE_ALLOWED".into(), "override".into())]),
            include_only: include_only.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn names(snapshot: &Snapshot) -> Vec<&str> {
        snapshot.environment.keys().map(String::as_str).collect()
    }

    #[test]
    fn the_policy_filters_the_profile_exports_whatever_it_inherits() {
        let output = b"noise\n# Snapshot file\nf() { :; }\n\0PROFILE_ALLOWED=p\0PROFILE_DENIED=d\0\
            PROFILE_SECRET=s\0PWD=/tmp\0SDKROOT=/sdk\0NODE_REPL_AUTH_TOKEN=t\0";
        let only = policy(EnvInherit::All, &["PROFILE_DENIED"], &["PROFILE_*"]);
        let snapshot = parse(output, Some(&only)).unwrap();
        assert_eq!(snapshot.state, "# Snapshot file\nf() { :; }\n");
        assert_eq!(snapshot.environment["PROFILE_ALLOWED"], "override");
        assert_eq!(names(&snapshot), ["PROFILE_ALLOWED"]);
        let none = policy(EnvInherit::None, &["PROFILE_DENIED"], &[]);
        let snapshot = parse(output, Some(&none)).unwrap();
        assert_eq!(names(&snapshot), ["PROFILE_ALLOWED", "SDKROOT"]);
        let unfiltered = parse(output, None).unwrap();
        assert_eq!(unfiltered.environment.len(), 4, "{unfiltered:?}");
    }

    #[test]
    fn the_managed_proxy_is_not_cached_but_a_users_proxy_is() {
        let managed = b"# Snapshot file\n\0A=1\0HTTP_PROXY=http://127.0.0.1:4321\0\
            CODEX_NETWORK_PROXY_ACTIVE=1\0";
        assert_eq!(names(&parse(managed, None).unwrap()), ["A"]);
        let own = b"# Snapshot file\n\0A=1\0HTTP_PROXY=http://proxy.example\0";
        assert_eq!(names(&parse(own, None).unwrap()), ["A", "HTTP_PROXY"]);
    }

    #[test]
    fn a_withheld_credential_spelled_out_in_the_state_refuses_the_snapshot() {
        let output = b"# Snapshot file\ngh() { GH_TOKEN=ghp_0123456789 command gh; }\n\0\
            GH_TOKEN=ghp_0123456789\0";
        let default = policy(EnvInherit::All, &[], &[]);
        assert_eq!(
            parse(output, Some(&default)).unwrap_err(),
            "shell snapshot cannot safely replay credentials"
        );
        // Kept by the policy, the same value is the command's anyway.
        let kept = EnvPolicy {
            ignore_default_excludes: true,
            ..default
        };
        assert!(parse(output, Some(&kept)).is_ok());
    }

    #[test]
    fn malformed_or_oversized_output_is_no_snapshot() {
        assert!(parse(b"# Snapshot file\n", None).is_err());
        assert!(parse(b"state\n\0A=1\0", None).is_err());
        let mut big = b"# Snapshot file\n".to_vec();
        big.extend(std::iter::repeat_n(b'x', MAX_SNAPSHOT_BYTES));
        big.push(0);
        let err = parse(&big, None).unwrap_err();
        assert!(err.starts_with("shell snapshot state exceeds"), "{err}");
    }
}
