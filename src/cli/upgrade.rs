//! `exec-server upgrade --pid PID`: asks a running daemon to hand over to the binary now at its
//! path (SIGUSR2, `transport::handover`) and waits until it has: PID exited and another process
//! holds its listening socket (with `--url`, also answers `/readyz` there). Exit 0 when done,
//! with the successor's pid on stdout; 1 when not (why on stderr: a successor that failed to
//! start leaves PID serving); 255 when PID cannot be asked.

use crate::pidfd::Pidfd;
use anyhow::Context as _;
use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, clap::Args)]
pub struct UpgradeArgs {
    /// The daemon's pid (`$MAINPID` in a systemd unit).
    #[arg(long)]
    pid: i32,
    /// Also wait until the successor answers `/readyz` at this URL (the daemon's URL).
    #[arg(long, env = "EXEC_SERVER_URL")]
    url: Option<String>,
    /// For wss://: CA certificates (PEM) to trust besides the usual roots.
    #[arg(long, env = "EXEC_SERVER_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// Give up (exit 1) if the hand-over is not done within this long.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

/// How often the daemon and its children are looked at.
const POLL: Duration = Duration::from_millis(20);

pub(super) async fn run(args: UpgradeArgs) -> anyhow::Result<u8> {
    let pid = args.pid;
    let deadline = Instant::now() + args.timeout;
    let daemon = Pidfd::open(pid).with_context(|| format!("no process {pid} to upgrade"))?;
    // SIGUSR2 ends most other programs (and upgrades nginx): make sure of the target first.
    let name = |pid: &str| std::fs::read_to_string(format!("/proc/{pid}/comm")).ok();
    let (theirs, ours) = (name(&pid.to_string()), name("self"));
    anyhow::ensure!(
        theirs.is_some() && theirs == ours,
        "pid {pid} is {}, not {}",
        theirs.as_deref().unwrap_or("unknown").trim(),
        ours.as_deref().unwrap_or("exec-server").trim()
    );
    let listener = listening_sockets(pid)?;
    anyhow::ensure!(
        !listener.is_empty(),
        "pid {pid} listens on no socket: not a daemon on ws://, wss:// or unix://"
    );
    daemon
        .signal(libc::SIGUSR2)
        .with_context(|| format!("cannot signal pid {pid}"))?;
    // A successor is the daemon's child holding its listener until the daemon exits.
    let mut successor = None;
    while daemon.is_running() {
        match holder(children(pid), &listener) {
            Some(child) => successor = Some(child),
            // Gone while the daemon still runs (not just re-parented at its exit).
            None if daemon.is_running() => {
                if let Some(child) = successor {
                    return Ok(not_done(&format!(
                        "the successor (pid {child}) exited before it took over; pid {pid} goes \
                         on serving (its log says why)"
                    )));
                }
            }
            None => break,
        }
        if Instant::now() >= deadline {
            return Ok(not_done(&format!(
                "pid {pid} did not hand over within {:?}; it goes on serving unless its log says \
                 otherwise",
                args.timeout
            )));
        }
        tokio::time::sleep(POLL).await;
    }
    let Some(successor) =
        holder(successor.into_iter(), &listener).or_else(|| holder(all_processes(), &listener))
    else {
        return Ok(not_done(&format!(
            "pid {pid} exited, but no process holds its listener: nothing serves (its log says why)"
        )));
    };
    if let Some(url) = &args.url {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let ready = super::ready::readyz(url, args.ca_file.as_deref());
        match tokio::time::timeout(remaining, ready).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                return Ok(not_done(&format!(
                    "pid {successor} took over, but {url} is not ready: {err:#}"
                )))
            }
            Err(_) => {
                return Ok(not_done(&format!(
                    "pid {successor} took over, but {url} did not answer within {:?}",
                    args.timeout
                )))
            }
        }
    }
    eprintln!("exec-server: pid {pid} handed over to pid {successor}");
    println!("{successor}");
    Ok(0)
}

fn not_done(why: &str) -> u8 {
    eprintln!("exec-server: upgrade not done: {why}");
    1
}

/// The inodes of the listening sockets `pid` holds, from its descriptors and its network
/// namespace's socket tables.
fn listening_sockets(pid: i32) -> anyhow::Result<HashSet<u64>> {
    let held = socket_inodes(pid).with_context(|| {
        format!("cannot read the descriptors of pid {pid} (run as its user, or root)")
    })?;
    // TCP fields: sl, local, remote, state (0A: LISTEN), queues, timer, retransmits, uid,
    // timeout, inode. Unix: num, refcount, protocol, flags (0x10000: listening), type, state,
    // inode, path.
    let tcp_listening = |state: &str| state == "0A";
    let unix_listening =
        |flags: &str| u32::from_str_radix(flags, 16).is_ok_and(|flags| flags & 0x10000 != 0);
    let listening: HashSet<u64> = [
        listening_inodes(pid, "tcp", 3, 9, tcp_listening),
        listening_inodes(pid, "tcp6", 3, 9, tcp_listening),
        listening_inodes(pid, "unix", 3, 6, unix_listening),
    ]
    .into_iter()
    .flatten()
    .collect();
    Ok(held.intersection(&listening).copied().collect())
}

/// The inodes in the rows of `/proc/PID/net/TABLE` whose field `flag` passes `listening`.
fn listening_inodes(
    pid: i32,
    table: &str,
    flag: usize,
    inode: usize,
    listening: impl Fn(&str) -> bool,
) -> Vec<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if !listening(fields.get(flag)?) {
                return None;
            }
            fields.get(inode)?.parse().ok()
        })
        .collect()
}

/// The inodes of the sockets `pid` holds.
fn socket_inodes(pid: i32) -> std::io::Result<HashSet<u64>> {
    let mut inodes = HashSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))?.flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let inode = target
            .to_str()
            .and_then(|t| t.strip_prefix("socket:["))
            .and_then(|t| t.strip_suffix(']'))
            .and_then(|t| t.parse::<u64>().ok());
        inodes.extend(inode);
    }
    Ok(inodes)
}

/// The first of `pids` holding one of `sockets`.
fn holder(pids: impl Iterator<Item = i32>, sockets: &HashSet<u64>) -> Option<i32> {
    pids.into_iter()
        .find(|pid| socket_inodes(*pid).is_ok_and(|held| !held.is_disjoint(sockets)))
}

fn children(pid: i32) -> impl Iterator<Item = i32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten();
    tasks
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|child| child.parse().ok())
                .collect::<Vec<i32>>()
        })
}

fn all_processes() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
}
