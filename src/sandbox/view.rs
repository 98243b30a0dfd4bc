//! The daemon's side of the file-system view: the mount operations ([`MountOp`]) that carve
//! an intent's canonical rules out of the read-only view, in the order the helper applies them
//! (`super::mounts` says what each does). A write root is bound writable, a read rule under a
//! writable or masked area bound read-only, a deny rule under a readable or writable area
//! masked (keeping mount points for the binds below it), and each directory between a writable
//! area and a mask pinned ([`pins`]).

use super::landlock::{DEV, DEVICES};
use super::plan::MountOp;
use super::policy::{effective, Rule};
use exec_server_protocol::sandbox::FsAccess;
use std::path::{Path, PathBuf};

/// What a root write adds to the view (`super::root_write`), beyond its rules.
#[derive(Debug, Default)]
pub(super) struct Extra {
    /// Paths the helper has already mounted over (the state directory's mask), pinned in place
    /// like a mask.
    pub held: Vec<PathBuf>,
    /// `/dev` is the private one (`MountOp::Devices`), under the rules inside it.
    pub private_dev: bool,
}

/// The mount operations that carve the rules out of a read-only view, in application order.
pub(super) fn plan(rules: &[Rule], extra: &Extra) -> Vec<MountOp> {
    carve(rules, false, extra)
}

/// The same for the mount view alone, without Landlock (`super::facilities`): where the root
/// is not readable, the view has nothing but what the rules grant (a mask of `/` becomes the
/// new root, with bare mount points for the grants), and the devices every Unix process uses.
/// A `cwd` outside every rule is a bare directory of the new root (search only, as Landlock
/// lets a process sit in a directory it cannot read).
pub(super) fn plan_alone(rules: &[Rule], cwd: &Path, extra: &Extra) -> Vec<MountOp> {
    let root = Path::new("/");
    if matches!(
        effective(rules, root),
        Some(FsAccess::Read | FsAccess::Write)
    ) {
        return plan(rules, extra);
    }
    let mut alone: Vec<Rule> = rules.iter().filter(|r| r.path != root).cloned().collect();
    for (device, write) in DEVICES {
        let device = Path::new(device);
        if effective(rules, device).is_none() && device.exists() {
            alone.push(Rule {
                path: device.to_path_buf(),
                access: if *write {
                    FsAccess::Write
                } else {
                    FsAccess::Read
                },
            });
        }
    }
    alone.push(Rule {
        path: root.to_path_buf(),
        access: FsAccess::Deny,
    });
    let mut ops = carve(&alone, true, extra);
    if effective(rules, cwd).is_none() {
        if let Some(MountOp::Mask { keep, .. }) = ops.first_mut() {
            keep.push(cwd.to_path_buf());
        }
    }
    ops
}

/// `root_masked`: a deny rule on `/` masks it (the mount view alone).
fn carve(rules: &[Rule], root_masked: bool, extra: &Extra) -> Vec<MountOp> {
    let mut sorted: Vec<&Rule> = rules.iter().collect();
    sorted.sort_by_key(|rule| (rule.path.components().count(), rule.path.clone()));
    let mut ops = Vec::new();
    for rule in sorted {
        let parent = rule.path.parent().and_then(|parent| {
            let ancestors: Vec<Rule> = rules
                .iter()
                .filter(|other| other.path != rule.path)
                .cloned()
                .collect();
            effective(&ancestors, parent)
        });
        let op = match (rule.access, parent) {
            (FsAccess::Write, Some(FsAccess::Write)) => None,
            (FsAccess::Write, _) => Some(MountOp::Bind {
                path: rule.path.clone(),
                writable: true,
            }),
            (FsAccess::Read, Some(FsAccess::Write | FsAccess::Deny)) => Some(MountOp::Bind {
                path: rule.path.clone(),
                writable: false,
            }),
            (FsAccess::Deny, Some(FsAccess::Read | FsAccess::Write)) => Some(MountOp::Mask {
                path: rule.path.clone(),
                keep: Vec::new(),
            }),
            (FsAccess::Deny, None) if root_masked && rule.path.parent().is_none() => {
                Some(MountOp::Mask {
                    path: rule.path.clone(),
                    keep: Vec::new(),
                })
            }
            _ => None,
        };
        ops.extend(op);
    }
    if extra.private_dev {
        ops.push(MountOp::Devices { path: DEV.into() });
    }
    ops.extend(pins(rules, &ops, &extra.held));
    ops.sort_by(|a, b| {
        (a.path().components().count(), a.path()).cmp(&(b.path().components().count(), b.path()))
    });
    // A bind (or a private `/dev`) under a mask needs a mount point in it: the nearest mask
    // above, with no other mount operation in between, provides one.
    let targets: Vec<(usize, PathBuf)> = ops
        .iter()
        .enumerate()
        .filter_map(|(index, op)| match op {
            MountOp::Bind { path, .. } | MountOp::Devices { path } => Some((index, path.clone())),
            MountOp::Mask { .. } => None,
        })
        .collect();
    for (bind_index, bind_path) in targets {
        let nearest = ops[..bind_index]
            .iter()
            .enumerate()
            .rev()
            .find(|(_, op)| bind_path.starts_with(op.path()));
        if let Some((index, _)) = nearest {
            if let MountOp::Mask { keep, .. } = &mut ops[index] {
                keep.push(bind_path);
            }
        }
    }
    ops
}

/// Binds of each directory between a writable area and a mask or a read-only bind onto itself
/// (keeping its access): a mount point cannot be renamed or removed (EBUSY), so a sandboxed
/// process cannot move a denied path away from where the next launch of the same intent looks
/// for it (which would then skip the missing rule, or mask an empty name), nor a read-only
/// directory away to put a writable one in its place. The masked or bound path itself is
/// already a mount point.
fn pins(rules: &[Rule], ops: &[MountOp], held: &[PathBuf]) -> Vec<MountOp> {
    let mut pins: Vec<MountOp> = Vec::new();
    // What a writable area must not lose: a mask, a read-only bind in it, a held path.
    let kept = ops.iter().filter_map(|op| match op {
        MountOp::Mask { path, .. }
        | MountOp::Bind {
            path,
            writable: false,
        } => Some(path),
        _ => None,
    });
    for path in kept.chain(held) {
        for dir in path.ancestors().skip(1) {
            let movable = dir
                .parent()
                .is_some_and(|parent| effective(rules, parent) == Some(FsAccess::Write));
            let mounted = |op: &MountOp| op.path() == dir;
            if movable && !ops.iter().any(mounted) && !pins.iter().any(mounted) {
                pins.push(MountOp::Bind {
                    path: dir.to_path_buf(),
                    writable: effective(rules, dir) == Some(FsAccess::Write),
                });
            }
        }
    }
    pins
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(path: &str, access: FsAccess) -> Rule {
        Rule {
            path: path.into(),
            access,
        }
    }

    #[test]
    fn directories_between_a_write_root_and_a_mask_are_pinned() {
        let rules = vec![
            rule("/", FsAccess::Read),
            rule("/w", FsAccess::Write),
            rule("/w/a/.git", FsAccess::Read),
            rule("/w/a/b/secret", FsAccess::Deny),
            rule("/w/a/.git/hooks/x", FsAccess::Deny),
        ];
        let bind = |path: &str, writable| MountOp::Bind {
            path: path.into(),
            writable,
        };
        let mask = |path: &str| MountOp::Mask {
            path: path.into(),
            keep: vec![],
        };
        assert_eq!(
            plan(&rules, &Extra::default()),
            [
                bind("/w", true),
                bind("/w/a", true),
                bind("/w/a/.git", false),
                bind("/w/a/b", true),
                mask("/w/a/b/secret"),
                mask("/w/a/.git/hooks/x"),
            ]
        );
    }

    #[test]
    fn a_private_dev_comes_before_the_rules_inside_it_and_held_paths_are_pinned() {
        let rules = vec![
            rule("/", FsAccess::Read),
            rule("/run", FsAccess::Write),
            rule("/dev/zero", FsAccess::Deny),
        ];
        let extra = Extra {
            held: vec!["/run/a/state".into()],
            private_dev: true,
        };
        assert_eq!(
            plan(&rules, &extra),
            [
                MountOp::Devices {
                    path: "/dev".into()
                },
                MountOp::Bind {
                    path: "/run".into(),
                    writable: true
                },
                MountOp::Mask {
                    path: "/dev/zero".into(),
                    keep: vec![]
                },
                MountOp::Bind {
                    path: "/run/a".into(),
                    writable: true
                },
            ]
        );
    }

    #[test]
    fn alone_a_root_that_is_not_readable_becomes_a_new_root_of_the_grants() {
        let rules = vec![
            rule("/usr", FsAccess::Read),
            rule("/w", FsAccess::Write),
            rule("/w/.git", FsAccess::Read),
        ];
        let ops = plan_alone(&rules, Path::new("/w"), &Extra::default());
        let MountOp::Mask { path, keep } = &ops[0] else {
            panic!("{ops:?}")
        };
        assert_eq!(path, Path::new("/"));
        for kept in ["/usr", "/w", "/dev/null"] {
            assert!(keep.contains(&PathBuf::from(kept)), "{keep:?}");
        }
        assert!(!keep.contains(&PathBuf::from("/w/.git")), "{keep:?}");
        let readable = vec![rule("/", FsAccess::Read), rule("/w", FsAccess::Write)];
        assert_eq!(
            plan_alone(&readable, Path::new("/w"), &Extra::default()),
            plan(&readable, &Extra::default())
        );
    }

    #[test]
    fn plans_binds_and_masks_from_shallow_to_deep() {
        let rules = vec![
            rule("/", FsAccess::Read),
            rule("/w", FsAccess::Write),
            rule("/w/.git", FsAccess::Read),
            rule("/w/sub", FsAccess::Write),
            rule("/home", FsAccess::Deny),
            rule("/home/u/p", FsAccess::Read),
            rule("/other", FsAccess::Deny),
        ];
        let bind = |path: &str, writable| MountOp::Bind {
            path: path.into(),
            writable,
        };
        assert_eq!(
            plan(&rules, &Extra::default()),
            [
                MountOp::Mask {
                    path: "/home".into(),
                    keep: vec!["/home/u/p".into()]
                },
                MountOp::Mask {
                    path: "/other".into(),
                    keep: vec![]
                },
                bind("/w", true),
                bind("/w/.git", false),
                bind("/home/u/p", false),
            ]
        );
    }
}
