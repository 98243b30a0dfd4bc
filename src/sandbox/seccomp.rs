//! The seccomp filter, installed last (after everything that needs the denied calls).
//!
//! Every sandboxed mode denies with EPERM: `ptrace`, `process_vm_readv/writev`, the io_uring
//! calls (io_uring can open sockets without `socket(2)`), `socket`/`socketpair` for AF_VSOCK
//! (host services; a network namespace does not isolate vsock), the mount API, `unshare`,
//! `setns`, `bpf` and the kernel keyring calls. With network restricted, `socket` and
//! `socketpair` are denied for every family but AF_UNIX; `connect`, `sendto` and friends stay
//! allowed so local IPC (socketpairs, asyncio's self-pipe) works, and the empty network
//! namespace leaves nothing else to reach. seccompiler's architecture check kills any
//! non-native call (i386 `int 0x80`); a second filter kills x32 calls, which carry a bit in
//! the syscall number that a number-keyed filter would not see.

pub use seccompiler::BpfProgram;
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
    libc::SYS_bpf,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
];

fn family_rule(op: SeccompCmpOp, family: libc::c_int) -> Result<SeccompRule, String> {
    let condition = SeccompCondition::new(0, SeccompCmpArgLen::Dword, op, family as u64)
        .map_err(|e| e.to_string())?;
    SeccompRule::new(vec![condition]).map_err(|e| e.to_string())
}

pub fn filters(network_restricted: bool) -> Result<Vec<BpfProgram>, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        ALWAYS_DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
    let socket_rule = if network_restricted {
        (SeccompCmpOp::Ne, libc::AF_UNIX)
    } else {
        (SeccompCmpOp::Eq, libc::AF_VSOCK)
    };
    for nr in [libc::SYS_socket, libc::SYS_socketpair] {
        rules.insert(nr, vec![family_rule(socket_rule.0.clone(), socket_rule.1)?]);
    }
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    let mut programs = vec![program];
    programs.extend(x32_filter());
    Ok(programs)
}

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

pub fn apply(programs: &[BpfProgram]) -> Result<(), String> {
    for program in programs {
        seccompiler::apply_filter(program).map_err(|e| e.to_string())?;
    }
    Ok(())
}
