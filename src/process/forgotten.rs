//! Idempotent starts remembered after their process was forgotten (its id freed once
//! `--exited-retention` passed), so that a retry arriving even later still runs nothing.
//!
//! Only digests are kept (a process id may be long), and only the latest [`KEPT`] per session.

use exec_server_protocol::process::{SandboxType, StartParams};
use std::collections::{HashMap, VecDeque};

/// Forgotten starts remembered per session; the oldest go first.
const KEPT: usize = 1024;

type Digest = [u8; 32];

#[derive(Default)]
pub(super) struct Forgotten {
    by_id: HashMap<Digest, Tombstone>,
    /// Ids in the order they were remembered.
    order: VecDeque<Digest>,
}

struct Tombstone {
    /// Of the start's identity ([`super::Origin::identity`]).
    params: Digest,
    sandbox_type: SandboxType,
}

/// What a repeated start finds of a forgotten one.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Found {
    Same(SandboxType),
    /// The id was started with other params.
    Different,
}

impl Forgotten {
    /// The idempotent start of `id`, with `identity`, was forgotten.
    pub(super) fn remember(&mut self, id: &str, identity: &StartParams, sandbox_type: SandboxType) {
        let key = digest(id.as_bytes());
        let tombstone = Tombstone {
            params: params_digest(identity),
            sandbox_type,
        };
        if self.by_id.insert(key, tombstone).is_none() {
            self.order.push_back(key);
        }
        while self.order.len() > KEPT {
            if let Some(oldest) = self.order.pop_front() {
                self.by_id.remove(&oldest);
            }
        }
    }

    /// A new start took `id`: what it does is what a later repeat must find.
    pub(super) fn forget(&mut self, id: &str) {
        let key = digest(id.as_bytes());
        if self.by_id.remove(&key).is_some() {
            self.order.retain(|kept| *kept != key);
        }
    }

    pub(super) fn find(&self, id: &str, identity: &StartParams) -> Option<Found> {
        let tombstone = self.by_id.get(&digest(id.as_bytes()))?;
        Some(if tombstone.params == params_digest(identity) {
            Found::Same(tombstone.sandbox_type)
        } else {
            Found::Different
        })
    }
}

fn params_digest(identity: &StartParams) -> Digest {
    // Maps serialize in key order (BTreeMap), so equal params give equal bytes.
    digest(&serde_json::to_vec(identity).unwrap_or_default())
}

fn digest(bytes: &[u8]) -> Digest {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(argv: &[&str]) -> StartParams {
        serde_json::from_value(serde_json::json!({
            "processId": "p",
            "argv": argv,
            "cwd": "file:///",
            "env": {"B": "2", "A": "1"},
            "tty": false,
            "arg0": null,
        }))
        .unwrap()
    }

    #[test]
    fn finds_the_same_params_and_tells_other_ones() {
        let mut forgotten = Forgotten::default();
        forgotten.remember("p", &params(&["true"]), SandboxType::None);
        assert_eq!(
            forgotten.find("p", &params(&["true"])),
            Some(Found::Same(SandboxType::None))
        );
        assert_eq!(
            forgotten.find("p", &params(&["false"])),
            Some(Found::Different)
        );
        assert_eq!(forgotten.find("q", &params(&["true"])), None);
        forgotten.forget("p");
        assert_eq!(forgotten.find("p", &params(&["true"])), None);
    }

    #[test]
    fn keeps_only_the_latest() {
        let mut forgotten = Forgotten::default();
        for n in 0..KEPT + 10 {
            forgotten.remember(&n.to_string(), &params(&["true"]), SandboxType::None);
        }
        assert_eq!(forgotten.by_id.len(), KEPT);
        assert_eq!(forgotten.order.len(), KEPT);
        assert_eq!(forgotten.find("0", &params(&["true"])), None);
        assert!(forgotten
            .find(&(KEPT + 9).to_string(), &params(&["true"]))
            .is_some());
    }
}
