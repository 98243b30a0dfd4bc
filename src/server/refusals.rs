//! The log of refused and failed requests: "why did my agent's command fail" must be answered
//! from the log at the default level, without one busy client's repeated failure burying the
//! rest. The first request of each distinct cause (method, code, and the message with its
//! quoted names and numbers taken out) is logged at `info` (the default level) with its whole message; later ones of
//! the same cause at `debug`.

use crate::rpc::RpcError;
use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::sync::Mutex;

/// Causes remembered before the set starts over: a cause is logged again at worst once per this
/// many new ones, and the set stays a few KiB whatever clients send.
const CAUSES_KEPT: usize = 1024;

#[derive(Default)]
pub(crate) struct Refusals {
    seen: Mutex<HashSet<u64>>,
}

impl Refusals {
    /// Logs `error`, the answer to `method` in the session whose log digest is `session`.
    pub(crate) fn record(&self, method: &str, error: &RpcError, session: &str) {
        if self.first_of_its_cause(method, error) {
            tracing::info!(
                method,
                code = error.code,
                session,
                "request refused: {}",
                error.message
            );
        } else {
            tracing::debug!(
                method,
                code = error.code,
                session,
                "request refused: {}",
                error.message
            );
        }
    }

    fn first_of_its_cause(&self, method: &str, error: &RpcError) -> bool {
        let mut hasher = DefaultHasher::new();
        method.hash(&mut hasher);
        error.code.hash(&mut hasher);
        cause_of(&error.message).hash(&mut hasher);
        let cause = hasher.finish();
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if seen.len() >= CAUSES_KEPT {
            seen.clear();
        }
        seen.insert(cause)
    }
}

/// The message with what varies between requests of one cause taken out: spans quoted in
/// backticks or double quotes (paths, ids, names) and runs of digits.
fn cause_of(message: &str) -> String {
    let mut cause = String::with_capacity(message.len());
    let mut quote = None;
    for c in message.chars() {
        match quote {
            Some(open) if c == open => {
                cause.push(c);
                quote = None;
            }
            Some(_) => {}
            None if c == '`' || c == '"' => {
                cause.push(c);
                quote = Some(c);
            }
            None if c.is_ascii_digit() => {
                if !cause.ends_with('#') {
                    cause.push('#');
                }
            }
            None => cause.push(c),
        }
    }
    cause
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cause_whatever_the_path_or_number() {
        assert_eq!(
            cause_of("sandbox path `/a/b` does not exist (os error 2)"),
            cause_of("sandbox path `/c` does not exist (os error 2)")
        );
        assert_eq!(cause_of("limit 12 of 34"), "limit # of #");
        assert_ne!(
            cause_of("`x` is a directory"),
            cause_of("`x` is not a directory")
        );
    }

    #[test]
    fn logged_once_per_cause() {
        let refusals = Refusals::default();
        let error = RpcError::invalid_params("sandbox path `/a` does not exist");
        assert!(refusals.first_of_its_cause("process/start", &error));
        let same = RpcError::invalid_params("sandbox path `/b` does not exist");
        assert!(!refusals.first_of_its_cause("process/start", &same));
        assert!(refusals.first_of_its_cause("fs/writeFile", &same));
    }
}
