//! Per-tree limits on memory and process count, by cgroup v1 controllers.
//!
//! `RLIMIT_NPROC` counts per user (and is not enforced for root), and `RLIMIT_AS` per process,
//! so neither bounds a tree. A tree with `maxMemoryBytes` or `maxProcesses` gets its own group
//! in the `memory` and/or `pids` hierarchy, below the daemon's own group there (so whatever
//! limits the daemon's group nest above it): `<mount><own path>/exec-server/<daemon pid>.<n>`
//! (the parent, shared by daemons in the same group, is left in place).
//! The supervisor's child joins it before its exec (it writes to `cgroup.procs`, which the
//! daemon opened and passed along), so nothing of the tree escapes it. The group is removed
//! once the tree is gone. Only v1 hierarchies are used; a v2 (unified) hierarchy is used by
//! nothing here yet, and where no v1 controller is mounted and writable, the limits are refused.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The daemon's parent groups, where the controller is usable.
struct Parents {
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
}

static NEXT: AtomicU64 = AtomicU64::new(1);

fn parents() -> &'static Parents {
    static PARENTS: OnceLock<Parents> = OnceLock::new();
    PARENTS.get_or_init(|| Parents {
        memory: parent("memory", "memory.limit_in_bytes"),
        pids: parent("pids", "pids.max"),
    })
}

/// Whether `maxMemoryBytes` and `maxProcesses` can be enforced.
pub(crate) fn supported() -> (bool, bool) {
    let parents = parents();
    (parents.memory.is_some(), parents.pids.is_some())
}

/// The daemon's own parent group for `controller`, created (and checked to offer `probe`).
fn parent(controller: &str, probe: &str) -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split_whitespace();
        let (fstype, options) = (right.next()?, right.nth(1)?);
        let fields: Vec<&str> = left.split_whitespace().collect();
        (fstype == "cgroup" && options.split(',').any(|o| o == controller) && fields[3] == "/")
            .then(|| PathBuf::from(fields[4]))
    })?;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == controller)
            .then(|| path.trim_start_matches('/').to_owned())
    })?;
    let dir = mount.join(own).join("exec-server");
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => {
            tracing::info!("no {controller} cgroup for process limits: {err}");
            return None;
        }
    }
    remove_stale(&dir);
    dir.join(probe).exists().then_some(dir)
}

/// Removes the groups a daemon that died without cleaning up left behind (its trees died with
/// it, so they are empty; a group still in use cannot be removed).
fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((daemon, _)) = name.to_str().and_then(|name| name.split_once('.')) else {
            continue;
        };
        if !Path::new("/proc").join(daemon).exists() {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// One tree's groups; removed when dropped (after the tree is gone).
#[derive(Debug)]
pub(crate) struct Group {
    dirs: Vec<PathBuf>,
    memory: Option<PathBuf>,
    /// `cgroup.procs` of each group, for the child to join.
    pub procs: Vec<OwnedFd>,
}

impl Group {
    /// Groups for these limits; None when there are none. Err: a limit that cannot be set.
    pub(crate) fn create(
        max_memory_bytes: Option<u64>,
        max_processes: Option<u64>,
    ) -> std::io::Result<Option<Self>> {
        if max_memory_bytes.is_none() && max_processes.is_none() {
            return Ok(None);
        }
        // Daemons may share the parent: a name of this daemon's own.
        let name = format!(
            "{}.{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut group = Self {
            dirs: Vec::new(),
            memory: None,
            procs: Vec::new(),
        };
        let parents = parents();
        let unsupported = || std::io::Error::other("no usable cgroup controller");
        if let Some(bytes) = max_memory_bytes {
            let dir = group.make(parents.memory.as_ref().ok_or_else(unsupported)?, &name)?;
            write(&dir, "memory.limit_in_bytes", bytes)?;
            // With swap accounting, swap counts too: the limit is not escaped by swapping.
            let _ = write(&dir, "memory.memsw.limit_in_bytes", bytes);
            group.memory = Some(dir);
        }
        if let Some(count) = max_processes {
            let dir = group.make(parents.pids.as_ref().ok_or_else(unsupported)?, &name)?;
            write(&dir, "pids.max", count)?;
        }
        Ok(Some(group))
    }

    fn make(&mut self, parent: &Path, name: &str) -> std::io::Result<PathBuf> {
        let dir = parent.join(name);
        std::fs::create_dir(&dir)?;
        self.dirs.push(dir.clone());
        let procs = OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))?;
        self.procs.push(procs.into());
        Ok(dir)
    }

    /// The tree's peak memory together, in KiB, when a memory group measured it.
    pub(crate) fn peak_kib(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.memory.as_ref()?.join("memory.max_usage_in_bytes"));
        text.ok()?
            .trim()
            .parse::<u64>()
            .ok()
            .map(|bytes| bytes / 1024)
    }

    /// Whether the kernel killed something of the tree for its memory limit.
    pub(crate) fn oom_killed(&self) -> bool {
        let Some(dir) = &self.memory else {
            return false;
        };
        std::fs::read_to_string(dir.join("memory.oom_control")).is_ok_and(|text| {
            text.lines()
                .filter_map(|line| line.strip_prefix("oom_kill "))
                .any(|count| count.trim() != "0")
        })
    }
}

fn write(dir: &Path, file: &str, value: u64) -> std::io::Result<()> {
    OpenOptions::new()
        .write(true)
        .open(dir.join(file))?
        .write_all(value.to_string().as_bytes())
}

impl Drop for Group {
    fn drop(&mut self) {
        for dir in &self.dirs {
            if let Err(err) = std::fs::remove_dir(dir) {
                tracing::warn!("cannot remove the cgroup {}: {err}", dir.display());
            }
        }
    }
}
