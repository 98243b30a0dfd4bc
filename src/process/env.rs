//! The child's environment: exactly `env`, or built from the daemon's own by an `envPolicy`.

use exec_server_protocol::process::{EnvInherit, EnvPolicy};
use std::collections::BTreeMap;

/// Variables `inherit: "core"` keeps (as the reference does on Unix).
const CORE_VARS: &[&str] = &[
    "HOME", "LOGNAME", "PATH", "SHELL", "USER", "USERNAME", "TMPDIR", "TEMP", "TMP",
];

/// Names dropped unless `ignoreDefaultExcludes`: likely credentials.
const DEFAULT_EXCLUDES: &[&str] = &["*KEY*", "*SECRET*", "*TOKEN*"];

/// The daemon's own configuration must not leak into children.
const NEVER_INHERITED: &[&str] = &["EXEC_SERVER_*", "CODEX_EXEC_SERVER_*"];

pub(crate) fn child_env(
    policy: Option<&EnvPolicy>,
    overlay: &BTreeMap<String, String>,
    own: impl Iterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    let Some(policy) = policy else {
        return overlay.clone();
    };
    let mut env: BTreeMap<String, String> = match policy.inherit {
        EnvInherit::All => own.collect(),
        EnvInherit::Core => own
            .filter(|(name, _)| CORE_VARS.contains(&name.as_str()))
            .collect(),
        EnvInherit::None => BTreeMap::new(),
    };
    env.retain(|name, _| !is_daemon_setting(name));
    if !policy.ignore_default_excludes {
        env.retain(|name, _| !matches_any(name, DEFAULT_EXCLUDES));
    }
    env.retain(|name, _| !matches_any(name, &policy.exclude));
    env.extend(policy.set.iter().map(|(k, v)| (k.clone(), v.clone())));
    if !policy.include_only.is_empty() {
        env.retain(|name, _| matches_any(name, &policy.include_only));
    }
    env.extend(overlay.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// Whether `name` is one of the daemon's own settings (its connection token among them), which
/// neither children nor `http/request` headers may read.
pub(crate) fn is_daemon_setting(name: &str) -> bool {
    matches_any(name, NEVER_INHERITED)
}

fn matches_any<S: AsRef<str>>(name: &str, patterns: &[S]) -> bool {
    patterns
        .iter()
        .any(|pattern| glob_match(pattern.as_ref(), name))
}

/// Case-insensitive wildcard match with `*` and `?`.
fn glob_match(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.to_ascii_uppercase().chars().collect();
    let name: Vec<char> = name.to_ascii_uppercase().chars().collect();
    let (mut p, mut n) = (0, 0);
    let (mut star, mut resume) = (None, 0);
    while n < name.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == name[n]) {
            p += 1;
            n += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some(p);
            resume = n;
            p += 1;
        } else if let Some(star_at) = star {
            p = star_at + 1;
            resume += 1;
            n = resume;
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own() -> impl Iterator<Item = (String, String)> {
        [
            ("PATH", "/bin"),
            ("HOME", "/root"),
            ("API_KEY", "s"),
            ("GH_TOKEN", "t"),
            ("LANG", "C"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
    }

    #[test]
    fn globs_are_case_insensitive() {
        assert!(glob_match("*key*", "API_KEY"));
        assert!(glob_match("L?NG", "lang"));
        assert!(!glob_match("*TOKEN", "TOKENS"));
    }

    #[test]
    fn policy_steps_apply_in_order() {
        let overlay = BTreeMap::from([("X".to_owned(), "1".to_owned())]);
        assert_eq!(child_env(None, &overlay, own()), overlay);
        let policy = EnvPolicy {
            inherit: EnvInherit::All,
            ignore_default_excludes: false,
            exclude: vec!["lang".into()],
            set: BTreeMap::from([("SET".into(), "v".into())]),
            include_only: vec![],
        };
        let env = child_env(Some(&policy), &overlay, own());
        assert_eq!(env.keys().collect::<Vec<_>>(), ["HOME", "PATH", "SET", "X"]);
        let core = EnvPolicy {
            inherit: EnvInherit::Core,
            include_only: vec!["P*".into()],
            ..policy
        };
        assert_eq!(
            child_env(Some(&core), &BTreeMap::new(), own())
                .keys()
                .collect::<Vec<_>>(),
            ["PATH"]
        );
    }
}
