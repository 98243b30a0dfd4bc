//! The seccomp filter, installed last (after everything that needs the denied calls).
//!
//! Every sandboxed mode denies with EPERM: `ptrace`, `process_vm_readv/writev`, the io_uring
//! calls (io_uring can open sockets without `socket(2)`), `socket`/`socketpair` for AF_VSOCK
//! (host services; a network namespace does not isolate vsock), the mount API, `unshare`,
//! `setns`, `bpf` and the kernel keyring calls. With network restricted, `socket` and
//! `socketpair` are denied for every family but AF_UNIX; `connect`, `sendto` and friends stay
//! allowed so local IPC (socketpairs, asyncio's self-pipe) works, and the empty network
//! namespace leaves nothing else to reach. A call for another architecture (i386 `int 0x80`)
//! or an x32 call (a bit in the syscall number that a number-keyed filter would not see) kills
//! the process.
//!
//! The program is one classic BPF filter: the architecture and x32 checks, then a binary search
//! over the sorted numbers of the calls with a rule. The kernel runs a new filter against every
//! syscall number when it is attached (to cache the calls it always allows), so a search a few
//! jumps deep instead of a chain through every rule makes attaching it several times cheaper,
//! and every call the program makes afterwards too.

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

/// The calls that create sockets; their first argument is the address family.
const SOCKET_CALLS: &[libc::c_long] = &[libc::SYS_socket, libc::SYS_socketpair];

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;
#[cfg(target_arch = "riscv64")]
const AUDIT_ARCH: u32 = 0xc000_00f3;

/// x32 calls are x86_64 calls with this bit set in the number.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: Option<u32> = Some(0x4000_0000);
#[cfg(not(target_arch = "x86_64"))]
const X32_SYSCALL_BIT: Option<u32> = None;

// Offsets into `struct seccomp_data`; the first argument's low word (the family is an int).
const NR: u32 = 0;
const ARCH: u32 = 4;
#[cfg(target_endian = "little")]
const ARG0_LOW: u32 = 16;
#[cfg(target_endian = "big")]
const ARG0_LOW: u32 = 20;

const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const DENY: u32 = libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32 & libc::SECCOMP_RET_DATA);
const KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;

pub type Program = Vec<libc::sock_filter>;

#[derive(Clone, Copy)]
enum Rule {
    Deny,
    /// Socket creation: allowed for AF_UNIX only (network restricted).
    UnixOnly,
    /// Socket creation: denied for AF_VSOCK only (network enabled).
    NoVsock,
}

fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

pub fn filter(network_restricted: bool) -> Result<Program, String> {
    let socket_rule = if network_restricted {
        Rule::UnixOnly
    } else {
        Rule::NoVsock
    };
    let rules: BTreeMap<u32, Rule> = ALWAYS_DENIED
        .iter()
        .map(|&nr| (nr, Rule::Deny))
        .chain(SOCKET_CALLS.iter().map(|&nr| (nr, socket_rule)))
        .map(|(nr, rule)| u32::try_from(nr).map(|nr| (nr, rule)))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let rules: Vec<(u32, Rule)> = rules.into_iter().collect();
    let mut program = vec![
        op(LD_W_ABS, 0, 0, ARCH),
        op(JEQ_K, 1, 0, AUDIT_ARCH),
        op(RET_K, 0, 0, KILL),
        op(LD_W_ABS, 0, 0, NR),
    ];
    if let Some(bit) = X32_SYSCALL_BIT {
        program.extend([op(JSET_K, 0, 1, bit), op(RET_K, 0, 0, KILL)]);
    }
    program.extend(search(&rules)?);
    if program.len() > usize::from(u16::MAX) {
        return Err("seccomp program too long".into());
    }
    Ok(program)
}

/// The search over `rules` (sorted by number), with the number loaded; every path returns.
fn search(rules: &[(u32, Rule)]) -> Result<Program, String> {
    // Up to this many rules are checked one after the other.
    const LINEAR: usize = 3;
    if rules.len() <= LINEAR {
        let mut code = Program::new();
        for (nr, rule) in rules {
            let action = action(*rule);
            let skip = u8::try_from(action.len()).map_err(|e| e.to_string())?;
            code.push(op(JEQ_K, 0, skip, *nr));
            code.extend(action);
        }
        code.push(op(RET_K, 0, 0, ALLOW));
        return Ok(code);
    }
    let (low, high) = rules.split_at(rules.len() / 2);
    let low = search(low)?;
    let jump = u8::try_from(low.len()).map_err(|_| "seccomp search branch too long")?;
    let mut code = vec![op(JGE_K, jump, 0, high[0].0)];
    code.extend(low);
    code.extend(search(high)?);
    Ok(code)
}

/// What a call with a rule gets (it may load the first argument: every path returns).
fn action(rule: Rule) -> Program {
    match rule {
        Rule::Deny => vec![op(RET_K, 0, 0, DENY)],
        Rule::UnixOnly => vec![
            op(LD_W_ABS, 0, 0, ARG0_LOW),
            op(JEQ_K, 0, 1, libc::AF_UNIX as u32),
            op(RET_K, 0, 0, ALLOW),
            op(RET_K, 0, 0, DENY),
        ],
        Rule::NoVsock => vec![
            op(LD_W_ABS, 0, 0, ARG0_LOW),
            op(JEQ_K, 0, 1, libc::AF_VSOCK as u32),
            op(RET_K, 0, 0, DENY),
            op(RET_K, 0, 0, ALLOW),
        ],
    }
}

/// Installs `program` on the calling (single) thread; no_new_privs must be set.
pub fn apply(program: &Program) -> Result<(), String> {
    let prog = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: a valid program that outlives the call; the kernel copies it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `program` on a call, as the kernel does (only the instructions it emits).
    fn run(program: &Program, arch: u32, nr: u32, arg0: u64) -> u32 {
        let load = |offset: u32| match offset {
            NR => nr,
            ARCH => arch,
            ARG0_LOW => arg0 as u32,
            other => panic!("unexpected load at {other}"),
        };
        let (mut pc, mut a) = (0usize, 0u32);
        loop {
            let insn = program[pc];
            pc += 1;
            let jump = |taken: bool| usize::from(if taken { insn.jt } else { insn.jf });
            match insn.code {
                LD_W_ABS => a = load(insn.k),
                JEQ_K => pc += jump(a == insn.k),
                JGE_K => pc += jump(a >= insn.k),
                JSET_K => pc += jump(a & insn.k != 0),
                RET_K => return insn.k,
                other => panic!("unexpected instruction {other:#x}"),
            }
        }
    }

    #[test]
    fn every_call_gets_its_rule() {
        for restricted in [false, true] {
            let program = filter(restricted).unwrap();
            for nr in 0..1024u32 {
                let denied = ALWAYS_DENIED.iter().any(|&d| d as u32 == nr);
                let socket = SOCKET_CALLS.iter().any(|&s| s as u32 == nr);
                for family in [
                    libc::AF_UNIX,
                    libc::AF_INET,
                    libc::AF_INET6,
                    libc::AF_NETLINK,
                    libc::AF_PACKET,
                    libc::AF_VSOCK,
                ] {
                    let family = family as u64;
                    let expected = match (denied, socket) {
                        (true, _) => DENY,
                        (_, true) if restricted && family != libc::AF_UNIX as u64 => DENY,
                        (_, true) if !restricted && family == libc::AF_VSOCK as u64 => DENY,
                        _ => ALLOW,
                    };
                    assert_eq!(run(&program, AUDIT_ARCH, nr, family), expected, "{nr}");
                    // The family is an int: the upper half of the register does not count.
                    let high = family | 1 << 32;
                    assert_eq!(run(&program, AUDIT_ARCH, nr, high), expected, "{nr}");
                }
                assert_eq!(run(&program, 0x4000_0003, nr, 0), KILL, "i386 {nr}");
                if let Some(bit) = X32_SYSCALL_BIT {
                    assert_eq!(run(&program, AUDIT_ARCH, nr | bit, 0), KILL, "x32 {nr}");
                }
            }
        }
    }
}
