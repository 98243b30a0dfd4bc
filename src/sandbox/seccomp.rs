//! The seccomp filters: most attached when the helper starts, the rest last, after the
//! setup that needs the calls they deny ([`Filters`]).
//!
//! Every sandboxed mode denies with EPERM: `ptrace`, `process_vm_readv/writev`, the io_uring
//! calls (io_uring can open sockets without `socket(2)`), `socket`/`socketpair` for AF_VSOCK
//! (host services; a network namespace does not isolate vsock), the mount API, `unshare`,
//! `setns`, `bpf` and the kernel keyring calls. Calls that can act on another process by pid
//! (resource limits, scheduling, priority, I/O priority, NUMA pages) are denied unless they name
//! the caller (pid 0): as uid 0 the sandbox would otherwise pass their same-owner checks for
//! every root process, the daemon included. Calls that create or chmod a file with the setuid
//! or setgid bit are denied: the file would carry root's privilege to whoever runs it on the
//! host. `openat2` takes its mode in a struct seccomp cannot read, so it answers ENOSYS, which
//! makes libc and language runtimes fall back to `openat`. With network restricted, `socket`
//! and `socketpair` are denied for every family but AF_UNIX; `connect`, `sendto` and friends
//! stay allowed so local IPC (socketpairs, asyncio's self-pipe) works, and the empty network
//! namespace leaves nothing else to reach. With a managed network, `socket` also allows
//! AF_INET/AF_INET6 TCP stream sockets, and nothing else of those families (no UDP, no raw).
//! `ioctl` TIOCSTI and TIOCLINUX are denied in every mode.
//! On the host's network where Landlock has no abstract-socket scope (below ABI 6), `socket`
//! is also denied for AF_UNIX (`socketpair` is not).
//! seccompiler's architecture check kills any non-native call (i386 `int 0x80`); a second,
//! hand-written filter kills x32 calls, which carry a bit in the syscall number that a
//! number-keyed filter would not see.

use super::error::SetupError;
use super::facilities::Enforcement;
use super::plan::NetworkMode;
pub(crate) use seccompiler::BpfProgram;
use seccompiler::{
    sock_filter, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};
use std::collections::BTreeMap;

const ALWAYS_DENIED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_bpf,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
];

/// Denied only once the helper has built the view, which needs them.
const DENIED_AFTER_SETUP: &[libc::c_long] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
];

const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541c;

/// Calls whose first argument is a pid (0: the caller).
const OWN_PROCESS_ONLY: &[libc::c_long] = &[
    libc::SYS_prlimit64,
    libc::SYS_sched_setaffinity,
    libc::SYS_sched_setparam,
    libc::SYS_sched_setscheduler,
    libc::SYS_sched_setattr,
    libc::SYS_migrate_pages,
    libc::SYS_move_pages,
];

/// Calls taking `(which, who, ...)`, with the `which` that names one process by `who`
/// (who 0: the caller); any other `which` (a process group, a user) reaches other processes.
const ONE_PROCESS_BY_WHICH: &[(libc::c_long, u64)] = &[
    (libc::SYS_setpriority, libc::PRIO_PROCESS as u64),
    (libc::SYS_ioprio_set, 1), // IOPRIO_WHO_PROCESS
];

/// Calls that set a file's mode, and which argument holds it.
const MODE_SETTERS: &[(libc::c_long, u8)] = &[
    (libc::SYS_chmod, 1),
    (libc::SYS_fchmod, 1),
    (libc::SYS_fchmodat, 2),
    (libc::SYS_fchmodat2, 2),
    (libc::SYS_creat, 1),
    (libc::SYS_mknod, 1),
    (libc::SYS_mknodat, 2),
];

/// Calls that set a file's mode only when their flags create one: (call, flags arg, mode arg).
const CREATING_OPENS: &[(libc::c_long, u8, u8)] =
    &[(libc::SYS_open, 1, 2), (libc::SYS_openat, 2, 3)];

/// The open flags that create a file (`O_TMPFILE` without the `O_DIRECTORY` it includes).
const CREATE_FLAGS: &[libc::c_int] = &[libc::O_CREAT, libc::O_TMPFILE & !libc::O_DIRECTORY];

const PRIVILEGE_BITS: &[libc::mode_t] = &[libc::S_ISUID, libc::S_ISGID];

fn rule(conditions: &[(u8, SeccompCmpOp, u64)]) -> Result<SeccompRule, SetupError> {
    let conditions = conditions
        .iter()
        .map(|(arg, op, value)| {
            SeccompCondition::new(*arg, SeccompCmpArgLen::Dword, op.clone(), *value)
        })
        .collect::<Result<_, _>>()?;
    Ok(SeccompRule::new(conditions)?)
}

/// `(arg & bit) == bit`.
fn has(arg: u8, bit: u64) -> (u8, SeccompCmpOp, u64) {
    (arg, SeccompCmpOp::MaskedEq(bit), bit)
}

/// `socket` rules for a managed network: AF_UNIX, or AF_INET/AF_INET6 stream sockets of TCP
/// (protocol 0 or IPPROTO_TCP; not MPTCP or SCTP, which Landlock's TCP rules do not cover).
/// Denied: any other family, and any other type (UDP, raw), whatever the flags.
fn tcp_only() -> Result<Vec<SeccompRule>, SetupError> {
    use SeccompCmpOp::{Eq, Ne};
    let stream = libc::SOCK_STREAM as u64;
    let (nonblock, cloexec) = (libc::SOCK_NONBLOCK as u64, libc::SOCK_CLOEXEC as u64);
    let mut rules = vec![rule(&[
        (0, Ne, libc::AF_UNIX as u64),
        (0, Ne, libc::AF_INET as u64),
        (0, Ne, libc::AF_INET6 as u64),
    ])?];
    for family in [libc::AF_INET as u64, libc::AF_INET6 as u64] {
        rules.push(rule(&[
            (0, Eq, family),
            (1, Ne, stream),
            (1, Ne, stream | nonblock),
            (1, Ne, stream | cloexec),
            (1, Ne, stream | nonblock | cloexec),
        ])?);
        rules.push(rule(&[
            (0, Eq, family),
            (2, Ne, 0),
            (2, Ne, libc::IPPROTO_TCP as u64),
        ])?);
    }
    Ok(rules)
}

/// The filters, in two parts. `early`: attached when the helper starts, before any plan,
/// since nothing the helper does until the exec needs what they deny; this is most of the
/// rules, and attaching a filter costs time in proportion to its length. `late`: attached
/// last, after the view is built: the mount API, `unshare`, `setns`, and `openat2`.
pub(crate) struct Filters {
    pub early: Vec<BpfProgram>,
    pub late: Late,
}

/// The filter attached last, in two forms: the second also denies `bind` (EPERM), for a
/// managed network without local binding where Landlock cannot refuse TCP binds (below ABI 4):
/// seccomp cannot tell a TCP bind from a Unix one, so every bind is refused, narrower than the
/// intent and never wider.
pub(crate) struct Late {
    plain: BpfProgram,
    no_bind: BpfProgram,
}

impl Late {
    /// The form for a plan; `no_tcp_bind`: it refuses TCP binds.
    pub(crate) fn for_plan(&self, no_tcp_bind: bool) -> &BpfProgram {
        match no_tcp_bind && !Enforcement::current().tcp_bind() {
            true => &self.no_bind,
            false => &self.plain,
        }
    }
}

pub(crate) fn filters(network: NetworkMode) -> Result<Filters, SetupError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        ALWAYS_DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
    let (op, family) = match network {
        NetworkMode::Enabled => (SeccompCmpOp::Eq, libc::AF_VSOCK),
        NetworkMode::Restricted | NetworkMode::Managed => (SeccompCmpOp::Ne, libc::AF_UNIX),
    };
    for nr in [libc::SYS_socket, libc::SYS_socketpair] {
        rules.insert(nr, vec![rule(&[(0, op.clone(), family as u64)])?]);
    }
    if network == NetworkMode::Enabled && !Enforcement::current().scopes() {
        // On the host's network without Landlock's scope, nothing else can keep the sandbox
        // from the host's abstract Unix sockets (their names are the network namespace's, and
        // seccomp cannot read a `connect` address): no Unix socket is made but by
        // `socketpair`, which has no address.
        let unix = rule(&[(0, SeccompCmpOp::Eq, libc::AF_UNIX as u64)])?;
        rules.entry(libc::SYS_socket).or_default().push(unix);
    }
    if network == NetworkMode::Managed {
        rules.insert(libc::SYS_socket, tcp_only()?);
    }
    // Typing into a terminal (the daemon's, an administrator's) and the console's own calls,
    // as bubblewrap refuses them: below Landlock ABI 5 nothing else refuses them on a tty the
    // intent lets the sandbox open, and kernels before 6.2 allow TIOCSTI without privilege.
    let typing = [TIOCSTI, TIOCLINUX].map(|request| rule(&[(1, SeccompCmpOp::Eq, request)]));
    rules.insert(
        libc::SYS_ioctl,
        typing.into_iter().collect::<Result<_, _>>()?,
    );
    for &nr in OWN_PROCESS_ONLY {
        rules.insert(nr, vec![rule(&[(0, SeccompCmpOp::Ne, 0)])?]);
    }
    for &(nr, which) in ONE_PROCESS_BY_WHICH {
        let other_which = rule(&[(0, SeccompCmpOp::Ne, which)])?;
        rules.insert(nr, vec![other_which, rule(&[(1, SeccompCmpOp::Ne, 0)])?]);
    }
    for &(nr, mode) in MODE_SETTERS {
        let bits = PRIVILEGE_BITS
            .iter()
            .map(|&bit| rule(&[has(mode, bit.into())]));
        rules.insert(nr, bits.collect::<Result<_, _>>()?);
    }
    for &(nr, flags, mode) in CREATING_OPENS {
        let mut creating = Vec::new();
        for &flag in CREATE_FLAGS {
            for &bit in PRIVILEGE_BITS {
                creating.push(rule(&[has(flags, flag as u64), has(mode, bit.into())])?);
            }
        }
        rules.insert(nr, creating);
    }
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(SetupError::SeccompBackend)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )?;
    let program: BpfProgram = filter.try_into().map_err(SetupError::SeccompBackend)?;
    let mut early = vec![program];
    early.extend(x32_filter());
    Ok(Filters {
        early,
        late: Late {
            plain: late_filter(&[]),
            no_bind: late_filter(&[libc::SYS_bind]),
        },
    })
}

/// EPERM for [`DENIED_AFTER_SETUP`] and `also`, ENOSYS for `openat2` (an action the first
/// filter cannot give besides EPERM). A plain list of comparisons: the early filter already
/// kills every non-native call, so the number needs no architecture check.
fn late_filter(also: &[libc::c_long]) -> BpfProgram {
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    let calls: Vec<(libc::c_long, u8)> = (DENIED_AFTER_SETUP.iter().chain(also))
        .map(|&nr| (nr, 0))
        .chain([(libc::SYS_openat2, 1)])
        .collect();
    // [load, one comparison per call, ALLOW, EPERM, ENOSYS]
    let mut program = vec![op(LD_W_ABS, 0, 0, 0)]; // seccomp_data.nr
    for (index, &(nr, outcome)) in calls.iter().enumerate() {
        let to_eperm = (calls.len() - index) as u8;
        program.push(op(JEQ_K, to_eperm + outcome, 0, nr as u32));
    }
    program.extend([
        op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ]);
    program
}

/// Kills x32 calls, which carry a bit in the syscall number that a number-keyed filter would
/// not see.
#[cfg(target_arch = "x86_64")]
fn x32_filter() -> Option<BpfProgram> {
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const JSET_K: u16 = 0x45;
    const RET_K: u16 = 0x06;
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    Some(vec![
        op(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        op(JEQ_K, 0, 3, AUDIT_ARCH_X86_64),
        op(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        op(JSET_K, 0, 1, X32_SYSCALL_BIT),
        op(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ])
}

#[cfg(not(target_arch = "x86_64"))]
fn x32_filter() -> Option<BpfProgram> {
    None
}

pub(crate) fn apply(programs: &[BpfProgram]) -> Result<(), SetupError> {
    for program in programs {
        seccompiler::apply_filter(program)?;
    }
    Ok(())
}
