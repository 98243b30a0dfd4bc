//! A thread's scheduling policy: sandbox helpers started ahead of need wait at idle priority.

use std::io;
use std::sync::OnceLock;

/// A thread's scheduling policy and its parameters (the nice value is separate, and is kept).
#[derive(Clone, Copy)]
pub(crate) struct Scheduling {
    policy: libc::c_int,
    priority: libc::c_int,
}

impl Scheduling {
    pub(crate) const IDLE: Self = Self {
        policy: libc::SCHED_IDLE,
        priority: 0,
    };

    /// Whether a thread may leave SCHED_IDLE for its old policy again: that takes CAP_SYS_NICE
    /// (or a permissive RLIMIT_NICE), which an unprivileged daemon lacks, and without it a
    /// helper started idle would stay idle once handed out. Probed once, on a thread of its
    /// own.
    pub(crate) fn idle_is_reversible() -> bool {
        static REVERSIBLE: OnceLock<bool> = OnceLock::new();
        *REVERSIBLE.get_or_init(|| {
            std::thread::spawn(|| {
                Self::current().is_ok_and(|own| Self::IDLE.apply(0).is_ok() && own.apply(0).is_ok())
            })
            .join()
            .unwrap_or(false)
        })
    }

    pub(crate) fn current() -> io::Result<Self> {
        let mut param = libc::sched_param { sched_priority: 0 };
        // SAFETY: sched_getscheduler takes only a tid (0: the calling thread).
        let policy = unsafe { libc::sched_getscheduler(0) };
        // SAFETY: the out-pointer is to a live sched_param.
        if policy < 0 || unsafe { libc::sched_getparam(0, &mut param) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            policy,
            priority: param.sched_priority,
        })
    }

    /// Applies to thread `tid` (0: the calling one).
    pub(crate) fn apply(self, tid: libc::pid_t) -> io::Result<()> {
        let param = libc::sched_param {
            sched_priority: self.priority,
        };
        // SAFETY: the parameter pointer is to a live sched_param.
        if unsafe { libc::sched_setscheduler(tid, self.policy, &param) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Gives a waiting helper, and the program's process it forked ahead, back the scheduling
    /// they were started without.
    pub(crate) fn restore(self, helper: i32, program: i32) -> io::Result<()> {
        self.apply(helper)?;
        self.apply(program)
    }
}
