//! Prometheus metrics, served as text by `GET /metrics`. Every counter and gauge is an atomic
//! updated where the thing happens (no lock on the hot path; labelled children are taken once,
//! up front, where the label set is fixed); what a walk of the sessions can tell (sessions and
//! processes by state) is counted when scraped instead.

use exec_server_protocol::process::{ProcessState, SandboxBackend};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use std::sync::LazyLock;
use std::time::Duration;

pub(crate) use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

type Labels = [(&'static str, &'static str); 1];
/// A launch metric, labelled by whether the process was sandboxed.
type LaunchFamily<M> = Family<[(&'static str, bool); 1], M>;

pub(crate) struct Metrics {
    registry: prometheus_client::registry::Registry,
    connections_open: Gauge,
    connections: Counter,
    sessions: Family<Labels, Gauge>,
    processes: Family<Labels, Gauge>,
    /// Launches and their latency, unsandboxed (index 0) and sandboxed (index 1).
    launches: [Counter; 2],
    launch_seconds: [Histogram; 2],
    pub(crate) output_bytes: Counter,
    pub(crate) retained_output_bytes: Gauge,
    pub(crate) output_evictions: Counter,
    errors: Family<[(&'static str, String); 1], Counter>,
    pub(crate) sandbox_denials: Counter,
    /// Sandboxed launches by the backend that enforced them.
    sandboxed_launches: Family<Labels, Counter>,
    fs_calls: Family<Labels, Counter>,
    pub(crate) http_calls: Counter,
    remote_dials: Family<Labels, Counter>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The daemon's metrics.
pub(crate) fn get() -> &'static Metrics {
    &METRICS
}

impl Metrics {
    fn new() -> Self {
        let launches: LaunchFamily<Counter> = Family::default();
        let launch_seconds: LaunchFamily<Histogram> =
            Family::new_with_constructor(|| Histogram::new(LAUNCH_BUCKETS));
        let mut metrics = Self {
            connections_open: Gauge::default(),
            connections: Counter::default(),
            sessions: Family::default(),
            processes: Family::default(),
            launches: [false, true].map(|s| launches.get_or_create_owned(&[("sandboxed", s)])),
            launch_seconds: [false, true]
                .map(|s| launch_seconds.get_or_create_owned(&[("sandboxed", s)])),
            output_bytes: Counter::default(),
            retained_output_bytes: Gauge::default(),
            output_evictions: Counter::default(),
            errors: Family::default(),
            sandbox_denials: Counter::default(),
            sandboxed_launches: Family::default(),
            fs_calls: Family::default(),
            http_calls: Counter::default(),
            remote_dials: Family::default(),
            registry: prometheus_client::registry::Registry::with_prefix("exec_server"),
        };
        metrics.register(launches, launch_seconds);
        metrics
    }

    /// Registers every metric, the launches' by their families (`self` keeps their children),
    /// in the order of the exposition.
    fn register(
        &mut self,
        launches: LaunchFamily<Counter>,
        launch_seconds: LaunchFamily<Histogram>,
    ) {
        let r = &mut self.registry;
        r.register(
            "connections_open",
            "Client connections open now",
            self.connections_open.clone(),
        );
        r.register(
            "connections",
            "Client connections accepted",
            self.connections.clone(),
        );
        r.register(
            "sessions",
            "Sessions by state (attached to a connection, or detached and waiting for a resume)",
            self.sessions.clone(),
        );
        r.register(
            "processes",
            "Processes by state (running, exited, closed)",
            self.processes.clone(),
        );
        r.register("process_launches", "Processes launched", launches);
        r.register(
            "process_launch_seconds",
            "Time from a process/start request to the process's pid",
            launch_seconds,
        );
        r.register(
            "output_bytes",
            "Bytes of process output read from processes",
            self.output_bytes.clone(),
        );
        r.register(
            "retained_output_bytes",
            "Bytes of process output retained for replay",
            self.retained_output_bytes.clone(),
        );
        r.register(
            "output_evictions",
            "Output chunks evicted from retention before a client read them",
            self.output_evictions.clone(),
        );
        r.register(
            "rpc_errors",
            "JSON-RPC error replies by code",
            self.errors.clone(),
        );
        r.register(
            "sandbox_denials",
            "Processes and fs calls the sandbox denied",
            self.sandbox_denials.clone(),
        );
        r.register(
            "sandboxed_launches",
            "Sandboxed processes launched, by the backend that enforced them (landlock, mountView)",
            self.sandboxed_launches.clone(),
        );
        r.register("fs_calls", "fs/* calls by method", self.fs_calls.clone());
        r.register("http_calls", "http/request calls", self.http_calls.clone());
        r.register(
            "remote_dials",
            "Remote mode's dials of the rendezvous by outcome (connected, failed, refused)",
            self.remote_dials.clone(),
        );
    }

    /// Counts a connection, open until the guard is dropped.
    pub(crate) fn connection(&'static self) -> impl Drop {
        struct Open(&'static Gauge);
        impl Drop for Open {
            fn drop(&mut self) {
                self.0.dec();
            }
        }
        self.connections.inc();
        self.connections_open.inc();
        Open(&self.connections_open)
    }

    /// A process was launched, `elapsed` after its request arrived; sandboxed by `backend`.
    pub(crate) fn launched(&self, backend: Option<SandboxBackend>, elapsed: Duration) {
        let sandboxed = backend.is_some();
        if let Some(backend) = backend {
            let name = match backend {
                SandboxBackend::Landlock => "landlock",
                SandboxBackend::MountView => "mountView",
            };
            self.sandboxed_launches
                .get_or_create(&[("backend", name)])
                .inc();
        }
        self.launches[usize::from(sandboxed)].inc();
        self.launch_seconds[usize::from(sandboxed)].observe(elapsed.as_secs_f64());
    }

    /// A JSON-RPC error reply with `code` (not a hot path: a lookup under a read lock).
    pub(crate) fn error(&self, code: i64) {
        self.errors
            .get_or_create(&[("code", code.to_string())])
            .inc();
    }

    /// A dial of remote mode's rendezvous, `outcome` being `connected`, `failed` or `refused`.
    pub(crate) fn remote_dial(&self, outcome: &'static str) {
        self.remote_dials
            .get_or_create(&[("outcome", outcome)])
            .inc();
    }

    /// An `fs/*` call of `method`.
    pub(crate) fn fs_call(&self, method: &'static str) {
        self.fs_calls.get_or_create(&[("method", method)]).inc();
    }

    /// The text exposition, with the session and process gauges set from `counts`, counted
    /// by the caller for this scrape.
    pub(crate) fn render(&self, counts: &Census) -> String {
        for (state, count) in [("attached", counts.attached), ("detached", counts.detached)] {
            self.sessions.get_or_create(&[("state", state)]).set(count);
        }
        for (state, count) in [
            ("running", counts.running),
            ("exited", counts.exited),
            ("closed", counts.closed),
        ] {
            self.processes.get_or_create(&[("state", state)]).set(count);
        }
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry);
        text
    }
}

/// Sessions and processes by state, counted for a scrape.
#[derive(Default)]
pub(crate) struct Census {
    pub(crate) attached: i64,
    pub(crate) detached: i64,
    pub(crate) running: i64,
    pub(crate) exited: i64,
    pub(crate) closed: i64,
}

impl Census {
    pub(crate) fn count_process(&mut self, state: ProcessState) {
        match state {
            ProcessState::Running => self.running += 1,
            ProcessState::Exited => self.exited += 1,
            ProcessState::Closed => self.closed += 1,
        }
    }
}

/// Upper bounds of the launch latency buckets, in seconds: a plain fork is under a
/// millisecond, a sandboxed one a few.
const LAUNCH_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];
