//! Input waits: a managed process whose tree sits blocked reading the stdin the daemon gave it
//! (`process/inputWait`, `waitingForInput`).
//!
//! Decided from /proc (Linux): among the live descendants of the process's supervisor, the
//! processes holding the stdin object (the pipe, or the PTY's terminal, also as `/dev/tty`)
//! must all be blocked reading it (a `read` of it, or a `poll`/`select`/`epoll` wait that
//! includes it) — or be waiting for a child, as a shell running a command does — and at least
//! one must be reading. A process sleeping, running, or blocked on a socket, a lock or anything
//! else keeps the tree from counting as waiting. The facts are gathered by [`sample`]; the
//! decision is the pure [`decide`].

use std::collections::HashSet;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};

/// What the child's stdin is, as `stat` tells objects apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StdinObject {
    /// A pipe: its filesystem's device and its inode (both ends share them).
    Pipe { dev: u64, ino: u64 },
    /// A terminal: the device number of the PTY's terminal side.
    Terminal { rdev: u64 },
}

/// `/dev/tty` (makedev(5, 0)): whichever terminal controls the process that opens it.
const CONTROLLING_TTY: u64 = 5 << 8;

impl StdinObject {
    /// The object `fd` refers to, when it is a pipe or a terminal.
    pub(crate) fn of(fd: &impl AsFd) -> Option<Self> {
        let stat = nix::sys::stat::fstat(fd.as_fd()).ok()?;
        match stat.st_mode & libc::S_IFMT {
            libc::S_IFIFO => Some(Self::Pipe {
                dev: stat.st_dev,
                ino: stat.st_ino,
            }),
            libc::S_IFCHR => Some(Self::Terminal { rdev: stat.st_rdev }),
            _ => None,
        }
    }

    /// Whether an fd with `meta` held by a process with controlling terminal `tty_nr` is it.
    fn held_by(&self, meta: &std::fs::Metadata, tty_nr: u64) -> bool {
        use std::os::unix::fs::FileTypeExt as _;
        match *self {
            Self::Pipe { dev, ino } => {
                meta.file_type().is_fifo() && meta.dev() == dev && meta.ino() == ino
            }
            Self::Terminal { rdev } => {
                meta.file_type().is_char_device()
                    && (meta.rdev() == rdev || (meta.rdev() == CONTROLLING_TTY && tty_nr == rdev))
            }
        }
    }
}

/// Where a thread is blocked, as far as input waits care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// Running, or in uninterruptible sleep: busy, whatever it does.
    Busy,
    /// In `read`-like calls of `fd`.
    Reading(i32),
    /// In a `poll`-like wait for these fds to become readable.
    Polling(Vec<i32>),
    /// Waiting for a child to change state.
    Children,
    /// Blocked on anything else (a sleep, a socket, a lock, a futex, a stopped process).
    Elsewhere,
}

/// One process of the tree: the fds it holds the stdin on, and each of its threads.
#[derive(Clone, Debug)]
pub(crate) struct ProcessFacts {
    pub stdin_fds: Vec<i32>,
    pub threads: Vec<Blocked>,
}

/// Whether the tree waits for input: every process holding the stdin is reading it (or
/// waiting for a child), and at least one is reading it.
pub(crate) fn decide(tree: &[ProcessFacts]) -> bool {
    let mut reading = false;
    for process in tree.iter().filter(|process| !process.stdin_fds.is_empty()) {
        let reads = |blocked: &Blocked| match blocked {
            Blocked::Reading(fd) => process.stdin_fds.contains(fd),
            Blocked::Polling(fds) => fds.iter().any(|fd| process.stdin_fds.contains(fd)),
            _ => false,
        };
        if process.threads.iter().any(reads) {
            // A thread reads the stdin; the others may wait on anything but must not run.
            if process.threads.contains(&Blocked::Busy) {
                return false;
            }
            reading = true;
        } else if !process.threads.iter().all(|t| *t == Blocked::Children) {
            return false;
        }
    }
    reading
}

/// What a thread's syscall means, from `/proc/PID/task/TID/syscall`'s line ("running", or the
/// number and six hex arguments); `state` is its `stat` state letter. `memory` reads the
/// process's memory (poll and select arguments) and `epoll` lists an epoll fd's watched fds.
fn classify(
    state: char,
    syscall: &str,
    memory: impl Fn(u64, usize) -> Option<Vec<u8>>,
    epoll: impl Fn(i32) -> Vec<i32>,
) -> Blocked {
    if state != 'S' {
        return if matches!(state, 'R' | 'D') {
            Blocked::Busy
        } else {
            Blocked::Elsewhere
        };
    }
    let mut fields = syscall.split_whitespace();
    let Some(Ok(nr)) = fields.next().map(str::parse::<i64>) else {
        return Blocked::Busy;
    };
    let args: Vec<u64> = fields
        .take(6)
        .filter_map(|arg| u64::from_str_radix(arg.trim_start_matches("0x"), 16).ok())
        .collect();
    if args.len() < 6 {
        return Blocked::Elsewhere;
    }
    let fd = args[0] as i32;
    match nr {
        libc::SYS_read | libc::SYS_readv | libc::SYS_pread64 | libc::SYS_preadv => {
            Blocked::Reading(fd)
        }
        libc::SYS_ppoll => Blocked::Polling(pollfds(&memory, args[0], args[1])),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_poll => Blocked::Polling(pollfds(&memory, args[0], args[1])),
        libc::SYS_pselect6 => Blocked::Polling(selected(&memory, args[0], args[1])),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_select => Blocked::Polling(selected(&memory, args[0], args[1])),
        libc::SYS_epoll_pwait | libc::SYS_epoll_pwait2 => Blocked::Polling(epoll(fd)),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_epoll_wait => Blocked::Polling(epoll(fd)),
        libc::SYS_wait4 | libc::SYS_waitid => Blocked::Children,
        _ => Blocked::Elsewhere,
    }
}

/// Polled fds are looked at up to this many (an interactive program polls few).
const MAX_POLLED: u64 = 1024;

/// The fds a `poll` waits to read: `struct pollfd { int fd; short events; short revents; }`.
fn pollfds(memory: impl Fn(u64, usize) -> Option<Vec<u8>>, address: u64, count: u64) -> Vec<i32> {
    let Some(bytes) = memory(address, 8 * count.min(MAX_POLLED) as usize) else {
        return Vec::new();
    };
    bytes
        .chunks_exact(8)
        .filter(|pollfd| i16::from_ne_bytes([pollfd[4], pollfd[5]]) & libc::POLLIN != 0)
        .map(|pollfd| i32::from_ne_bytes([pollfd[0], pollfd[1], pollfd[2], pollfd[3]]))
        .collect()
}

/// The fds a `select` waits to read: the set bits of its `readfds` bitmap.
fn selected(memory: impl Fn(u64, usize) -> Option<Vec<u8>>, nfds: u64, readfds: u64) -> Vec<i32> {
    let nfds = nfds.min(MAX_POLLED);
    if readfds == 0 {
        return Vec::new();
    }
    let Some(bytes) = memory(readfds, nfds.div_ceil(8) as usize) else {
        return Vec::new();
    };
    (0..nfds as i32)
        .filter(|fd| bytes[*fd as usize / 8] & (1 << (fd % 8)) != 0)
        .collect()
}

/// The fds an epoll instance watches for reading, from its fdinfo's `tfd:` lines.
fn epoll_targets(fdinfo: &str) -> Vec<i32> {
    fdinfo
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            (fields.next()? == "tfd:").then_some(())?;
            let fd = fields.next()?.parse().ok()?;
            (fields.next()? == "events:").then_some(())?;
            let events = u32::from_str_radix(fields.next()?, 16).ok()?;
            (events & libc::EPOLLIN as u32 != 0).then_some(fd)
        })
        .collect()
}

/// The state letter and controlling terminal from `/proc/PID/stat`.
fn stat_fields(stat: &str) -> Option<(char, u64)> {
    // The command name may hold anything, parentheses included: fields follow the last one.
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let tty_nr = fields.nth(3)?.parse::<i64>().ok()? as u64;
    Some((state, tty_nr))
}

/// A tree larger than this is not sampled (never reported waiting): a check reads a few files
/// per process, every few hundred ms while the process is quiet.
const MAX_SAMPLED: usize = 256;

/// Reads the facts of `pids` holding `stdin` from /proc and decides. Blocking (file reads):
/// call it off the async workers.
pub(crate) fn sample(stdin: StdinObject, pids: &HashSet<i32>) -> bool {
    if pids.len() > MAX_SAMPLED {
        return false;
    }
    let tree: Vec<ProcessFacts> = pids
        .iter()
        .filter_map(|pid| process_facts(stdin, *pid))
        .collect();
    decide(&tree)
}

fn process_facts(stdin: StdinObject, pid: i32) -> Option<ProcessFacts> {
    let proc = format!("/proc/{pid}");
    let (_, tty_nr) = stat_fields(&std::fs::read_to_string(format!("{proc}/stat")).ok()?)?;
    let stdin_fds: Vec<i32> = std::fs::read_dir(format!("{proc}/fd"))
        .ok()?
        .flatten()
        .filter(|entry| {
            std::fs::metadata(entry.path()).is_ok_and(|meta| stdin.held_by(&meta, tty_nr))
        })
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect();
    if stdin_fds.is_empty() {
        return Some(ProcessFacts {
            stdin_fds,
            threads: Vec::new(),
        });
    }
    let mem = std::fs::File::open(format!("{proc}/mem")).ok();
    let memory = |address: u64, len: usize| {
        let mut buffer = vec![0; len];
        mem.as_ref()?.read_exact_at(&mut buffer, address).ok()?;
        Some(buffer)
    };
    let epoll = |fd: i32| {
        epoll_targets(&std::fs::read_to_string(format!("{proc}/fdinfo/{fd}")).unwrap_or_default())
    };
    let threads = std::fs::read_dir(format!("{proc}/task"))
        .ok()?
        .flatten()
        .map(|task| {
            let path = task.path();
            let state = std::fs::read_to_string(path.join("stat"))
                .ok()
                .and_then(|stat| stat_fields(&stat))
                .map_or('?', |(state, _)| state);
            let syscall = std::fs::read_to_string(path.join("syscall")).unwrap_or_default();
            classify(state, &syscall, memory, epoll)
        })
        .collect();
    Some(ProcessFacts { stdin_fds, threads })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(threads: Vec<Blocked>) -> ProcessFacts {
        ProcessFacts {
            stdin_fds: vec![0],
            threads,
        }
    }

    fn other(threads: Vec<Blocked>) -> ProcessFacts {
        ProcessFacts {
            stdin_fds: Vec::new(),
            threads,
        }
    }

    #[test]
    fn a_tree_waits_when_every_holder_reads_the_stdin_or_waits_for_a_child() {
        // `sh -c 'read line'`.
        assert!(decide(&[holder(vec![Blocked::Reading(0)])]));
        // A shell waiting for `python3 -c 'input()'`, which polls its stdin.
        assert!(decide(&[
            holder(vec![Blocked::Children]),
            holder(vec![Blocked::Polling(vec![5, 0])]),
            other(vec![Blocked::Busy]),
        ]));
        // A thread reads while another waits on a futex.
        assert!(decide(&[holder(vec![
            Blocked::Reading(0),
            Blocked::Elsewhere
        ])]));
    }

    #[test]
    fn a_tree_does_not_wait_when_a_holder_is_busy_or_blocked_elsewhere() {
        // `sleep 5`, a blocked `curl`, a process blocked on a lock.
        assert!(!decide(&[holder(vec![Blocked::Elsewhere])]));
        assert!(!decide(&[holder(vec![Blocked::Polling(vec![3])])]));
        assert!(!decide(&[
            holder(vec![Blocked::Children]),
            holder(vec![Blocked::Reading(0)]),
            holder(vec![Blocked::Elsewhere]),
        ]));
        // Reading another fd than the stdin.
        assert!(!decide(&[holder(vec![Blocked::Reading(3)])]));
        // Busy while a thread reads.
        assert!(!decide(&[holder(vec![Blocked::Reading(0), Blocked::Busy])]));
        // Nobody reads: a shell waiting for a child that closed its stdin, or no holder at all.
        assert!(!decide(&[holder(vec![Blocked::Children])]));
        assert!(!decide(&[other(vec![Blocked::Reading(0)])]));
        assert!(!decide(&[]));
    }

    #[test]
    fn syscalls_are_classified_from_their_proc_line() {
        let no_memory = |_, _| None;
        let no_epoll = |_| Vec::new();
        let line = |nr: i64, args: [u64; 6]| {
            let args: Vec<String> = args.iter().map(|a| format!("{a:#x}")).collect();
            format!("{nr} {} 0x7ffc 0x7f00", args.join(" "))
        };
        let read = line(libc::SYS_read, [0, 0x55, 1, 0, 0, 0]);
        assert_eq!(
            classify('S', &read, no_memory, no_epoll),
            Blocked::Reading(0)
        );
        assert_eq!(classify('R', &read, no_memory, no_epoll), Blocked::Busy);
        assert_eq!(
            classify('T', &read, no_memory, no_epoll),
            Blocked::Elsewhere
        );
        assert_eq!(classify('S', "running", no_memory, no_epoll), Blocked::Busy);
        let sleep = line(libc::SYS_clock_nanosleep, [0; 6]);
        assert_eq!(
            classify('S', &sleep, no_memory, no_epoll),
            Blocked::Elsewhere
        );
        let wait = line(libc::SYS_wait4, [u64::MAX, 0, 0, 0, 0, 0]);
        assert_eq!(classify('S', &wait, no_memory, no_epoll), Blocked::Children);
        // ppoll on {fd 0, POLLIN} and {fd 7, POLLOUT}.
        let pollfds: Vec<u8> = [(0i32, libc::POLLIN), (7, libc::POLLOUT)]
            .iter()
            .flat_map(|(fd, events)| {
                [&fd.to_ne_bytes()[..], &events.to_ne_bytes(), &[0, 0]].concat()
            })
            .collect();
        let memory = |address, len| (address == 0x1000 && len == 16).then(|| pollfds.clone());
        let ppoll = line(libc::SYS_ppoll, [0x1000, 2, 0, 0, 8, 0]);
        assert_eq!(
            classify('S', &ppoll, memory, no_epoll),
            Blocked::Polling(vec![0])
        );
        // pselect6 with fds 0 and 9 in readfds.
        let memory = |address, len| (address == 0x2000 && len == 2).then(|| vec![0b1, 0b10]);
        let pselect = line(libc::SYS_pselect6, [10, 0x2000, 0, 0, 0, 0]);
        assert_eq!(
            classify('S', &pselect, memory, no_epoll),
            Blocked::Polling(vec![0, 9])
        );
        let epoll = line(libc::SYS_epoll_pwait, [4, 0, 0, 0, 0, 0]);
        assert_eq!(
            classify('S', &epoll, no_memory, |fd| vec![fd + 10]),
            Blocked::Polling(vec![14])
        );
    }

    #[test]
    fn epoll_fdinfo_and_stat_are_parsed() {
        let fdinfo = "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1057\n\
            tfd:        0 events:       19 data:                0  pos:0 ino:5 sdev:d\n\
            tfd:        6 events:        4 data:                6  pos:0 ino:7 sdev:d\n";
        assert_eq!(epoll_targets(fdinfo), vec![0]);
        let stat = "42 (a (weird) name) S 1 42 42 34817 42 4194560 0 0";
        assert_eq!(stat_fields(stat), Some(('S', 34817)));
    }
}
