//! What the daemon hands the helper over the policy pipe: everything already resolved, so the
//! helper only applies it. The leaf of the sandbox: the daemon's side (`super::prepare`)
//! builds these, the apply parts (`super::mounts`, `super::landlock`) and the helper read
//! them, and this file imports none of them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Plan {
    /// Looked up on the child's PATH, as an unsandboxed spawn would.
    pub program: String,
    /// Instead of executing `program`, the helper runs the one `fs/*` operation on its stdin
    /// itself (`crate::child::fs_op`): it is the daemon's binary already, so nothing is executed
    /// or looked up, and the sandbox need not grant anything to load it. `program` and `argv`
    /// then only name it in messages, and `env` is empty.
    pub fs_op: bool,
    /// The full argv, `argv[0]` being the `arg0` override when there is one.
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// The program's environment. The helper itself starts with an empty one, so nothing the
    /// client sets (LD_PRELOAD, LD_LIBRARY_PATH into a workspace a sandboxed process could have
    /// written) can act on it before the sandbox is in place.
    pub env: BTreeMap<String, String>,
    pub network_restricted: bool,
    /// Managed network: the loopback ports bridged to the host's (the network is restricted
    /// otherwise). None: the network is as `network_restricted` says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_network: Option<ManagedPlan>,
    /// None: the file system is not restricted.
    pub fs: Option<FsPlan>,
}

impl Plan {
    /// The helper mode this plan needs.
    pub(crate) fn network_mode(&self) -> NetworkMode {
        match (&self.managed_network, self.network_restricted) {
            (Some(_), _) => NetworkMode::Managed,
            (None, true) => NetworkMode::Restricted,
            (None, false) => NetworkMode::Enabled,
        }
    }
}

/// What a helper prepares before any plan, and so the pool it waits in: the host's network
/// (`Enabled`), an empty network namespace (`Restricted`), or an empty one whose programs may
/// also make TCP sockets, to reach the bridged ports (`Managed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NetworkMode {
    Enabled,
    Restricted,
    Managed,
}

impl NetworkMode {
    pub(crate) const ALL: [Self; 3] = [Self::Enabled, Self::Restricted, Self::Managed];

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// The managed network of a launch: TCP listeners on 127.0.0.1 at `ports` in the sandbox's
/// namespace, which the daemon bridges to the host's same ports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ManagedPlan {
    pub ports: Vec<u16>,
    /// False: binding TCP sockets is refused (Landlock).
    pub allow_local_binding: bool,
    /// Every other TCP connection goes to the process's proxy too: the helper adds a TUN
    /// device, routed by default, whose packets the daemon's proxy serves (`netproxy`'s
    /// transparent TCP).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub transparent_tcp: bool,
}

/// Where a transparent-TCP launch's helper makes its TUN device.
pub(crate) const TUN_DEVICE: &str = "/dev/net/tun";

/// The MTU of a transparent-TCP launch's TUN device, whose packets the daemon reads whole.
pub(crate) const TUN_MTU: u16 = 1500;

/// A Landlock grant: `path` and what is beneath it, read or written (`super::landlock`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Grant {
    pub path: PathBuf,
    pub write: bool,
}

/// A step of the file-system view (`super::mounts` applies it, `super::view` plans it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub(crate) enum MountOp {
    Bind {
        path: PathBuf,
        writable: bool,
    },
    /// `keep`: paths below `path` that later binds mount onto.
    Mask {
        path: PathBuf,
        keep: Vec<PathBuf>,
    },
    /// A writable `/dev`: a private tmpfs with the standard devices bound from the host, its
    /// own `pts` and `shm`, and the usual links (`super::mounts::devices`).
    Devices {
        path: PathBuf,
    },
}

impl MountOp {
    pub(crate) fn path(&self) -> &Path {
        match self {
            Self::Bind { path, .. } | Self::Mask { path, .. } | Self::Devices { path } => path,
        }
    }
}

/// The identity the daemon resolved for every path of a plan.
pub(crate) type Identities = BTreeMap<PathBuf, Identity>;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FsPlan {
    pub mounts: Vec<MountOp>,
    pub grants: Vec<Grant>,
    /// The identity of every path above (mount paths, grants, masks) and of `Plan::cwd`, as
    /// the daemon resolved them.
    pub identities: Identities,
    /// With network restricted: the host's Unix sockets outside the write roots, covered in
    /// the view (`super::sockets`). They get no identity: covering takes nothing away but them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden_sockets: Vec<PathBuf>,
}

/// A file's identity (device, inode) as the daemon resolved it. The helper opens every path
/// again without following symbolic links and compares: a directory swapped in between the
/// daemon's check and the helper's open fails the launch instead of receiving the grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Identity {
    pub dev: u64,
    pub ino: u64,
}

impl Identity {
    pub(crate) fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }

    pub(crate) fn of_stat(stat: &nix::sys::stat::FileStat) -> Self {
        Self {
            dev: stat.st_dev,
            ino: stat.st_ino,
        }
    }

    /// The identity of what `path` names now (following symbolic links: the helper's own open
    /// refuses them, so a link seen here only makes the launch fail).
    pub(crate) fn stat(path: &Path) -> std::io::Result<Self> {
        std::fs::metadata(path).map(|meta| Self::of(&meta))
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "device {} inode {}", self.dev, self.ino)
    }
}

/// A helper's command name (`/proc/PID/comm`, which only the process itself can change): how
/// `super::peers` knows a sandboxed process by its ancestors, and how `ps` shows helpers.
pub(crate) const HELPER_NAME: &str = "exec-sandbox";

/// The largest plan the daemon sends a helper.
pub(crate) const MAX_PLAN_BYTES: usize = 1 << 20;

/// Most loopback ports one managed-network launch may ask for (a client's proxy has one or two).
pub(crate) const MAX_PORTS: usize = 16;

/// A setup failure, as the helper reports it on the control socket (one JSON object, then EOF).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Failure {
    pub stage: Stage,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    /// The failure was the sandbox refusing something (exec of a program it cannot read).
    #[serde(default)]
    pub denied: bool,
}

/// The step of a launch that failed: named in the error a client sees (`data.stage`, and the
/// message), and `Exec` (the program itself could not be executed) reported as a start error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Stage {
    /// The helper's or supervisor's own socket to the daemon.
    Control,
    /// Receiving or reading the launch, the plan.
    Policy,
    Launch,
    Supervisor,
    Session,
    Stdio,
    Terminal,
    Cgroup,
    Namespaces,
    Mounts,
    Network,
    Cwd,
    Landlock,
    Capabilities,
    NoNewPrivs,
    Fds,
    Seccomp,
    Limits,
    /// Taking another user's credentials (envd's users).
    Credentials,
    Exec,
}

impl Stage {
    /// A failure at this stage without an OS error behind it.
    pub(crate) fn fail(self, message: impl std::fmt::Display) -> Failure {
        Failure {
            stage: self,
            message: message.to_string(),
            errno: None,
            denied: false,
        }
    }

    /// A failure at this stage that the kernel reported (an `std::io::Error` or an errno).
    pub(crate) fn os(self, err: impl Into<std::io::Error>) -> Failure {
        let err = err.into();
        Failure {
            errno: err.raw_os_error(),
            ..self.fail(err)
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The serialized name: the one clients see in `data.stage`.
        match serde_json::to_value(self) {
            Ok(serde_json::Value::String(name)) => f.write_str(&name),
            _ => write!(f, "{self:?}"),
        }
    }
}
