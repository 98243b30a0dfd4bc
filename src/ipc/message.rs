//! Every message between the daemon and the processes it forks, typed, each encoded and decoded
//! here alone (youki's `libcontainer/src/process/message.rs` is the model): [`Order`] runs from
//! the daemon to a child, [`Answer`] and [`Report`] from a child to the daemon. The bytes are
//! fixed: a successor daemon adopts supervisors its predecessor started, and talks to them.

use super::channel::{self, FrameError};
use crate::sandbox::plan::{Failure, NetworkMode, Stage, MAX_PLAN_BYTES};
use exec_server_protocol::process::ProcessUsage;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;

const FORK: u8 = b'F';
const FORK_HELPER: u8 = b'H';
const LAUNCH: u8 = b'L';
const ADMITTED: u8 = b'A';
const KILL: u8 = b'K';
const SIGNAL: u8 = b'S';
const SIGNAL_TREE: u8 = b'T';
const HOLD: u8 = b'h';
const CLOSE_STDIN: u8 = b'c';
const HELLO: u8 = b'P';
const READY: u8 = b'R';
const ADOPTED: u8 = b'a';
const LISTENERS: u8 = b'L';
const PASSED_FILE: u8 = b'f';
const FS_REPLY: u8 = b'r';

/// Daemon → child, on a control socket (a fork server's, a supervisor's, a sandbox helper's) or
/// on a program process's launch socket.
#[derive(Debug)]
pub(crate) enum Order {
    /// To the fork server, [`FORK_ORDER_BYTES`] long: fork a plain supervisor (its control
    /// socket travels with it) or a sandbox helper (its control socket and its program's
    /// socket travel with it).
    Fork(Fork),
    /// To a sandbox helper: it is in the cgroup it must be in (`crate::sandbox::peers`), so it
    /// may fork.
    Admitted,
    /// The first byte of a launch: the program's stdio (and the `cgroup.procs` of each group
    /// it joins) travel with it, then two frames: the [`ChildSetup`] and the payload (a
    /// [`PlainLaunch`] or a sandbox plan). See [`launch`].
    Launch,
    /// Kill the whole tree, then report `exited` (if not yet) and `gone`.
    Kill,
    /// This signal to the program's process group, while it runs.
    Signal(u8),
    /// This signal to every process of the tree.
    SignalTree(u8),
    /// Hold the daemon's ends of the program's stdio, so that they outlive the daemon; the
    /// descriptors travel with it. None: a frame that does not parse, which is ignored.
    Hold(Option<Hold>),
    /// Close the held stdin (the daemon closed its own), so that the program reads EOF.
    CloseStdin,
}

/// What the fork server forks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fork {
    Supervisor,
    /// `background`: at idle priority until the daemon takes it.
    Helper {
        network: NetworkMode,
        background: bool,
    },
}

/// The size of an [`Order::Fork`].
pub(crate) const FORK_ORDER_BYTES: usize = 3;

/// An order that could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OrderError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("not an order")]
    Unknown,
}

impl Order {
    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Self::Fork(Fork::Supervisor) => vec![FORK, 0, 0],
            Self::Fork(Fork::Helper {
                network,
                background,
            }) => vec![FORK_HELPER, network.index() as u8, u8::from(*background)],
            Self::Admitted => vec![ADMITTED],
            Self::Launch => vec![LAUNCH],
            Self::Kill => vec![KILL],
            Self::Signal(signal) => vec![SIGNAL, *signal],
            Self::SignalTree(signal) => vec![SIGNAL_TREE, *signal],
            Self::Hold(hold) => {
                let frame = serde_json::to_vec(hold).expect("a hold serializes");
                channel::message(Some(HOLD), &[&frame])
            }
            Self::CloseStdin => vec![CLOSE_STDIN],
        }
    }

    /// The order that starts with `marker`, its remaining bytes read from `input`. A fork
    /// order is read as such only where `forks` (the fork server's socket), since its marker
    /// would be a launch's elsewhere.
    pub(crate) fn read(marker: u8, input: &mut impl Read, forks: bool) -> Result<Self, OrderError> {
        let byte = |input: &mut dyn Read| {
            let mut byte = [0u8];
            input.read_exact(&mut byte).map(|()| byte[0])
        };
        Ok(match marker {
            FORK | FORK_HELPER if forks => {
                let (first, second) = (byte(input).map_err(FrameError::Io)?, byte(input));
                let background = second.map_err(FrameError::Io)? == 1;
                Self::Fork(if marker == FORK {
                    Fork::Supervisor
                } else {
                    let network = NetworkMode::ALL
                        .into_iter()
                        .find(|n| n.index() == usize::from(first))
                        .ok_or(OrderError::Unknown)?;
                    Fork::Helper {
                        network,
                        background,
                    }
                })
            }
            ADMITTED if !forks => Self::Admitted,
            LAUNCH => Self::Launch,
            KILL => Self::Kill,
            SIGNAL => Self::Signal(byte(input).map_err(FrameError::Io)?),
            SIGNAL_TREE => Self::SignalTree(byte(input).map_err(FrameError::Io)?),
            HOLD => {
                let frame = channel::read_frame(input, MAX_PLAN_BYTES)?;
                Self::Hold(serde_json::from_slice(&frame).ok())
            }
            CLOSE_STDIN => Self::CloseStdin,
            _ => return Err(OrderError::Unknown),
        })
    }
}

/// A launch as the daemon sends it (after its descriptors' first byte): [`Order::Launch`],
/// then the setup and the payload, each a frame.
pub(crate) fn launch(setup: &ChildSetup, payload: &[u8]) -> Vec<u8> {
    let setup = serde_json::to_vec(setup).expect("the setup serializes");
    channel::message(Some(LAUNCH), &[&setup, payload])
}

/// One frame of a launch, as the child reads it.
pub(crate) fn read_launch_frame(input: &mut impl Read) -> Result<Vec<u8>, Failure> {
    channel::read_frame(input, MAX_PLAN_BYTES).map_err(|err| match err {
        FrameError::Io(err) => Stage::Policy.os(err),
        too_large => Stage::Policy.fail(too_large),
    })
}

/// Child → daemon, outside the supervisor's [`Report`]s.
#[derive(Debug, PartialEq)]
pub(crate) enum Answer {
    /// From a forked sandbox helper, first: its pid, with its own pidfd, so that the daemon
    /// never signals a pid reused since.
    Hello { pid: i32 },
    /// From the fork server (no pid) or a sandbox helper (the pid of the program process it
    /// forked ahead), once, when it is ready.
    Ready { program: Option<i32> },
    /// From a managed-network helper: its listeners travel with it.
    Listeners,
    /// From an orphaned supervisor to a successor daemon: the held stdio travels with it,
    /// then reports.
    Adopted(Adopted),
    /// From a sandboxed fs operation: a file it opened travels with it.
    PassedFile,
    /// From a sandboxed fs operation: its reply.
    FsReply(FsReply),
}

impl Answer {
    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Self::Hello { pid } => [&[HELLO][..], &pid.to_le_bytes()].concat(),
            Self::Ready { program: None } => vec![READY],
            Self::Ready { program: Some(pid) } => [&[READY][..], &pid.to_le_bytes()].concat(),
            Self::Listeners => vec![LISTENERS],
            Self::Adopted(adopted) => {
                let frame = serde_json::to_vec(adopted).expect("serializes");
                channel::message(Some(ADOPTED), &[&frame])
            }
            Self::PassedFile => vec![PASSED_FILE],
            Self::FsReply(reply) => {
                let frame = serde_json::to_vec(reply).expect("a reply always serializes");
                channel::message(Some(FS_REPLY), &[&frame])
            }
        }
    }

    /// A sandbox helper's hello, as received.
    pub(crate) fn hello(message: &[u8]) -> Option<i32> {
        match message.split_first()? {
            (&HELLO, pid) => Some(i32::from_le_bytes(pid.try_into().ok()?)),
            _ => None,
        }
    }

    /// Whether `byte` is the first of a ready answer (anything else a starting child writes is
    /// the start of its [`Failure`]).
    pub(crate) fn is_ready(byte: u8) -> bool {
        byte == READY
    }

    /// What a managed helper sent first: with the listeners' marker, the bytes after it; a
    /// failure report's first bytes otherwise.
    pub(crate) fn after_listeners(message: &[u8]) -> Result<&[u8], &[u8]> {
        match message.split_first() {
            Some((&LISTENERS, rest)) => Ok(rest),
            _ => Err(message),
        }
    }

    /// Whether `marker` (read with its descriptors) starts an orphaned supervisor's
    /// [`Answer::Adopted`].
    pub(crate) fn is_adopted(marker: u8) -> bool {
        marker == ADOPTED
    }

    /// What an orphaned supervisor sends after its marker byte `marker`: the frame after it.
    pub(crate) fn adopted(marker: u8, frame: &[u8]) -> Option<Adopted> {
        (marker == ADOPTED)
            .then(|| serde_json::from_slice(frame).ok())
            .flatten()
    }

    /// Whether a sandboxed fs operation's `marker` says a file came with it
    /// ([`Answer::PassedFile`]).
    pub(crate) fn passes_file(marker: u8) -> bool {
        marker == PASSED_FILE
    }

    /// A sandboxed fs operation's reply: its marker, then its frame. None: not a reply.
    pub(crate) fn fs_reply(marker: u8, frame: &[u8]) -> Option<FsReply> {
        (marker == FS_REPLY)
            .then(|| serde_json::from_slice(frame).ok())
            .flatten()
    }
}

/// What the child applies to itself whatever the launch: its session and terminal, its own
/// resource limits, its cgroup.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChildSetup {
    /// The program runs on a PTY (its stdio), which becomes its controlling terminal.
    pub(crate) tty: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_open_files: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_cpu_seconds: Option<u64>,
    /// The credentials the program runs with, when not the daemon's (envd's users).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run_as: Option<RunAs>,
}

/// A user's credentials: set by the child (groups, group, then user) before its exec.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunAs {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) groups: Vec<u32>,
}

/// An unsandboxed launch.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct PlainLaunch {
    /// Already resolved on the child's PATH by the daemon.
    pub(crate) program: String,
    pub(crate) argv: Vec<String>,
    pub(crate) cwd: PathBuf,
    pub(crate) env: BTreeMap<String, String>,
}

/// Supervisor → daemon on the control socket, one JSON object a line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "report", rename_all = "camelCase")]
pub(crate) enum Report {
    /// The program was executed, as `pid`, by the supervisor `supervisor`.
    Started { pid: i32, supervisor: i32 },
    /// It could not be; the child `pid` exits in its place (126 or 127 for an exec failure).
    Failed {
        pid: i32,
        supervisor: i32,
        failure: Failure,
    },
    /// The program itself exited; `usage` covers the tree as reaped so far.
    Exited {
        code: i32,
        signal: Option<i32>,
        usage: ProcessUsage,
    },
    /// The whole tree is gone (`confirmed`), or a kill order could not confirm it within its
    /// bound (the supervisor keeps killing).
    Gone {
        confirmed: bool,
        usage: ProcessUsage,
    },
}

impl Report {
    /// Reports as the control socket carries them: one JSON line each.
    pub(crate) fn lines<'a>(reports: impl Iterator<Item = &'a Report>) -> Vec<u8> {
        let mut lines = Vec::new();
        for report in reports {
            serde_json::to_writer(&mut lines, report).expect("reports serialize");
            lines.push(b'\n');
        }
        lines
    }

    /// One line of them; None when it is not a report.
    pub(crate) fn parse(line: &str) -> Option<Self> {
        serde_json::from_str(line).ok()
    }
}

/// The argument that makes the daemon's binary the fork server (`crate::child`).
pub(crate) const FORK_SERVER_ARG: &str = "__supervise";

/// The socket in a process's directory on which the supervisor of an older daemon, orphaned,
/// waits for a successor daemon (now on [`supervisor_socket`]).
pub(crate) const SUPERVISOR_SOCKET: &str = "sock";

/// The abstract socket on which the supervisor of the process in directory `name` waits for
/// a successor: no file to create and remove per launch. Who may connect is checked by
/// credentials on both ends (the supervisor admits only its user's processes outside any
/// sandbox; the successor takes only the supervisor its meta names), and a sandbox cannot
/// reach it (its own network namespace, Landlock's abstract-socket scope, or seccomp refusing
/// Unix sockets: docs/sandbox.md).
pub(crate) fn supervisor_socket(name: &str) -> String {
    format!("exec-server/supervisor/{name}")
}

/// Where an orphaned supervisor whose tree ended records its last reports (as lines), in the
/// process's directory, for a successor to find.
pub(crate) const EXIT_RECORD: &str = "exit.reports";

/// What a supervisor holds for the daemon ([`Order::Hold`]), so that a daemon that dies, even
/// by SIGKILL, leaves the program running with nothing lost: its output goes on into the
/// stream files, and a successor daemon adopts the tree on the socket. Travelling with it, in
/// order: the listening socket, the process's directory in the state directory (by
/// descriptor: a path could lead elsewhere by the time the tree ends), the stream files, the
/// output ends, and the stdin end if any.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Hold {
    /// One stream (a terminal's master, which is also its stdin), or stdout and stderr.
    pub(crate) tty: bool,
    pub(crate) stdin: bool,
    /// Bytes an orphaned supervisor moves into a stream's file beyond what the daemon had
    /// taken, at most, before the program waits (while its tree runs).
    pub(crate) max_tail: u64,
}

impl Hold {
    /// The program's output streams: its terminal, or stdout and stderr.
    pub(crate) fn streams(&self) -> usize {
        if self.tty {
            1
        } else {
            2
        }
    }

    /// How many descriptors travel with it.
    pub(crate) fn fds(&self) -> usize {
        2 + 2 * self.streams() + usize::from(self.stdin && !self.tty)
    }
}

/// What comes with [`Answer::Adopted`]: which held ends travel with it (the open outputs, in
/// order, then the stdin).
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Adopted {
    pub(crate) outputs: Vec<bool>,
    pub(crate) stdin: bool,
}

/// Daemon → sandboxed fs operation, one frame: a one-shot method with its params (without
/// `sandbox`), `fs/open`, [`INSTALL_STAGED`], [`INSPECT`] or [`OPEN_BENEATH`].
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct FsRequest {
    pub(crate) method: String,
    #[serde(default)]
    pub(crate) params: Option<serde_json::Value>,
}

/// The fs operation's own request: commit a staged file (`{temp, target}`).
pub(crate) const INSTALL_STAGED: &str = "installStaged";

/// The fs operation's own request: open a path to read its metadata or list it, and pass the
/// descriptor back ([`Inspect`]).
pub(crate) const INSPECT: &str = "inspect";

/// What [`INSPECT`] opens: `path` (its last component followed or not), for its metadata
/// (`O_PATH`: what `stat` may see) or, with `list`, as a directory to read (what `ls` may).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Inspect {
    pub(crate) path: std::path::PathBuf,
    pub(crate) follow: bool,
    pub(crate) list: bool,
}

/// The fs operation's own request: open a path beneath a directory, no step leaving it, and
/// pass the descriptor back ([`OpenBeneath`]).
pub(crate) const OPEN_BENEATH: &str = "openBeneath";

/// What [`OPEN_BENEATH`] opens: `path` (relative) beneath `base`, for `access`
/// (`crate::fs::beneath`).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct OpenBeneath {
    pub(crate) base: std::path::PathBuf,
    pub(crate) path: std::path::PathBuf,
    pub(crate) access: Access,
}

/// What a path is opened beneath a directory for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Access {
    /// To know it is there (`O_PATH`).
    Find,
    /// To read a file's bytes (or, opened the same way, whatever is there).
    Read,
    /// To list a directory.
    List,
    /// To write a file, created or truncated, its missing parents made.
    Create,
}

/// `{"ok": <result>}` or `{"error": {code, message, data}}`.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum FsReply {
    Ok(serde_json::Value),
    Error(exec_server_protocol::rpc::ErrorObject),
}

impl FsRequest {
    /// As the daemon sends it: one frame.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let request = serde_json::to_vec(self).expect("a request serializes");
        channel::message(None, &[&request])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_read_back_as_sent() {
        let orders = [
            Order::Kill,
            Order::Signal(15),
            Order::SignalTree(9),
            Order::CloseStdin,
            Order::Launch,
            Order::Hold(Some(Hold {
                tty: false,
                stdin: true,
                max_tail: 7,
            })),
        ];
        for order in orders {
            let bytes = order.encode();
            let read = Order::read(bytes[0], &mut &bytes[1..], false).unwrap();
            assert_eq!(format!("{read:?}"), format!("{order:?}"));
        }
        let fork = Order::Fork(Fork::Helper {
            network: NetworkMode::Managed,
            background: true,
        });
        let bytes = fork.encode();
        assert_eq!(bytes.len(), FORK_ORDER_BYTES);
        let read = Order::read(bytes[0], &mut &bytes[1..], true).unwrap();
        assert_eq!(format!("{read:?}"), format!("{fork:?}"));
        assert!(matches!(
            Order::read(b'?', &mut &[][..], false),
            Err(OrderError::Unknown)
        ));
    }

    #[test]
    fn answers_read_back_as_sent() {
        assert_eq!(Answer::hello(&Answer::Hello { pid: 42 }.encode()), Some(42));
        assert!(Answer::is_ready(
            Answer::Ready { program: None }.encode()[0]
        ));
        let listeners = [Answer::Listeners.encode(), b"more".to_vec()].concat();
        assert_eq!(Answer::after_listeners(&listeners), Ok(&b"more"[..]));
        assert_eq!(
            Answer::after_listeners(b"{\"stage\""),
            Err(&b"{\"stage\""[..])
        );
        let adopted = Adopted {
            outputs: vec![true, false],
            stdin: true,
        };
        let bytes = Answer::Adopted(adopted).encode();
        assert_eq!(
            Answer::adopted(bytes[0], &bytes[5..]),
            Some(Adopted {
                outputs: vec![true, false],
                stdin: true
            })
        );
        let reply = FsReply::Ok(serde_json::json!({"a": 1}));
        let bytes = Answer::FsReply(reply).encode();
        assert!(!Answer::passes_file(bytes[0]) && Answer::passes_file(b'f'));
        let frame = channel::read_frame(&mut &bytes[1..], 1 << 10).unwrap();
        assert_eq!(
            Answer::fs_reply(bytes[0], &frame),
            Some(FsReply::Ok(serde_json::json!({"a": 1})))
        );
        assert_eq!(Answer::fs_reply(b'?', &frame), None);
    }
}
