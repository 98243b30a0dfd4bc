//! A start's limits and timings, checked against the ranges they may take: by `process/start`
//! before a launch, and again for a process adopted after a restart (its params were accepted
//! then, so nothing fails there).

use super::ProcessError;
use crate::launcher::spec::Limits;
use exec_server_protocol::process::{ProcessLimits, StartParams};
use std::time::Duration;

/// A start's durations: its `timeoutMs` and its input waits' quiet period (None: neither).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Timing {
    pub timeout: Option<Duration>,
    pub input_quiet: Option<Duration>,
}

/// Accepted ranges: beyond them a limit is a mistake, not a limit.
const MAX_TIMEOUT_MS: i64 = 30 * 24 * 3600 * 1000;
const MAX_OPEN_FILES: i64 = 1 << 20;
const MAX_CPU_SECONDS: i64 = 365 * 24 * 3600;
const MIN_MEMORY_BYTES: i64 = 1 << 20;
const MAX_MEMORY_BYTES: i64 = 1 << 50;
/// The kernel's own ceiling on pids.
const MAX_PROCESSES: i64 = 1 << 22;

/// Validates `process/start.limits`: per process and per tree, and the timeout.
pub(crate) fn limits(
    limits: Option<&ProcessLimits>,
) -> Result<(Limits, Option<Duration>), ProcessError> {
    let Some(limits) = limits else {
        return Ok((Limits::default(), None));
    };
    let check = |name, value: Option<i64>, (min, max): (i64, i64)| match value {
        Some(value) if !(min..=max).contains(&value) => Err(ProcessError::LimitOutOfRange {
            name,
            min,
            max,
            value,
        }),
        value => Ok(value.map(|value| value as u64)),
    };
    let (memory, pids) = crate::launcher::cgroup::supported();
    for (name, value, supported) in [
        ("maxMemoryBytes", limits.max_memory_bytes, memory),
        ("maxProcesses", limits.max_processes, pids),
    ] {
        if value.is_some() && !supported {
            return Err(ProcessError::LimitUnsupported(name));
        }
    }
    let timeout =
        check("timeoutMs", limits.timeout_ms, (1, MAX_TIMEOUT_MS))?.map(Duration::from_millis);
    let limits = Limits {
        max_open_files: check("maxOpenFiles", limits.max_open_files, (1, MAX_OPEN_FILES))?,
        max_cpu_seconds: check(
            "maxCpuSeconds",
            limits.max_cpu_seconds,
            (1, MAX_CPU_SECONDS),
        )?,
        max_memory_bytes: check(
            "maxMemoryBytes",
            limits.max_memory_bytes,
            (MIN_MEMORY_BYTES, MAX_MEMORY_BYTES),
        )?,
        max_processes: check("maxProcesses", limits.max_processes, (1, MAX_PROCESSES))?,
    };
    Ok((limits, timeout))
}

impl Timing {
    /// The durations of a start whose params were checked when it was made (a predecessor's
    /// process, adopted).
    pub(crate) fn of(params: &StartParams) -> Self {
        Self {
            timeout: limits(params.limits.as_ref())
                .ok()
                .and_then(|(_, timeout)| timeout),
            input_quiet: input_quiet(params.input_wait_ms).ok().flatten(),
        }
    }
}

/// The quiet period before an input wait is reported, unless `inputWaitMs` is 0.
const DEFAULT_INPUT_WAIT_MS: i64 = 2000;
const MAX_INPUT_WAIT_MS: i64 = 24 * 3600 * 1000;

pub(crate) fn input_quiet(input_wait_ms: Option<i64>) -> Result<Option<Duration>, ProcessError> {
    match input_wait_ms.unwrap_or(DEFAULT_INPUT_WAIT_MS) {
        0 => Ok(None),
        ms if (1..=MAX_INPUT_WAIT_MS).contains(&ms) => Ok(Some(Duration::from_millis(ms as u64))),
        value => Err(ProcessError::InputWaitOutOfRange {
            max: MAX_INPUT_WAIT_MS,
            value,
        }),
    }
}
