//! Command-line flags (each also settable from the environment) and the resolved settings.

mod envd;
mod remote;
mod runtime;

use clap::Parser;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) use envd::{EnvdListen, EnvdSettings};
pub(crate) use remote::{require_secure, RemoteAuth};
pub use remote::{RemoteArgs, RemoteConfig, RemoteTransport};
pub(crate) use runtime::{RuntimeArgs, RuntimeSettings};

#[derive(Debug, Clone, Parser)]
#[command(
    name = "exec-server",
    version,
    about = "Runs and controls processes and files for a remote orchestrator over JSON-RPC on a WebSocket",
    after_help = "After binding, the WebSocket URL (ws://IP:PORT) is printed as one line on stdout; logs go to stderr."
)]
pub struct Args {
    /// Where to serve: `ws://IP:PORT` (port 0 picks a free port), `wss://IP:PORT` (TLS, with
    /// --tls-cert and --tls-key), `unix:///PATH` (the same
    /// WebSocket protocol on a Unix socket, for the daemon's own uid and --allow-uid) or
    /// `stdio://` (one connection on stdin/stdout, newline-delimited JSON).
    #[arg(long, env = "EXEC_SERVER_LISTEN", default_value = "ws://127.0.0.1:0")]
    pub listen: String,

    /// Require `Authorization: Bearer <TOKEN>` on WebSocket upgrades, the token read once from
    /// this file (trailing line breaks ignored). The file must not be accessible to group or
    /// others (chmod 600). `/readyz` stays open.
    #[arg(
        long,
        env = "EXEC_SERVER_CONNECTION_TOKEN_FILE",
        conflicts_with = "connection_token"
    )]
    pub connection_token_file: Option<PathBuf>,

    /// The token itself. Prefer --connection-token-file: a command line is readable by every
    /// local user in /proc/PID/cmdline. CODEX_EXEC_SERVER_CONNECTION_TOKEN is read too, for
    /// compatibility.
    #[arg(long, env = "EXEC_SERVER_CONNECTION_TOKEN", hide_env_values = true)]
    pub connection_token: Option<String>,

    /// How long a session survives without a connection before its processes are killed.
    #[arg(long, env = "EXEC_SERVER_SESSION_TTL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub session_ttl: Duration,

    /// The longest `sessionTtlMs` a client may ask for in `initialize` (longer is refused).
    #[arg(long, env = "EXEC_SERVER_MAX_SESSION_TTL", default_value = "24h", value_parser = humantime::parse_duration)]
    pub max_session_ttl: Duration,

    /// How long an exited process stays readable after its output closed; then its id is free.
    #[arg(long, env = "EXEC_SERVER_EXITED_RETENTION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub exited_retention: Duration,

    /// Output bytes retained per process for replay by `process/read`, in its file in the
    /// state directory (or a memory file), never in the daemon's heap.
    #[arg(long, env = "EXEC_SERVER_OUTPUT_RETENTION_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub output_retention_bytes: usize,

    /// Output chunks retained per process (each replayed chunk costs a few JSON values).
    #[arg(
        long,
        env = "EXEC_SERVER_OUTPUT_RETENTION_CHUNKS",
        default_value_t = 50_000
    )]
    pub output_retention_chunks: usize,

    /// Largest JSON-RPC message accepted; larger ones get a JSON-RPC error.
    #[arg(long, env = "EXEC_SERVER_MAX_MESSAGE_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_message_bytes: usize,

    /// Requests of one connection handled at once, and as many control requests (status checks,
    /// terminate, close); past twice it the connection is not read (backpressure, not errors).
    /// (`--concurrent-requests`, codex's name, is the same limit; codex's default is 1.)
    #[arg(
        long,
        alias = "concurrent-requests",
        env = "EXEC_SERVER_MAX_REQUESTS_IN_FLIGHT",
        default_value_t = 256
    )]
    pub max_requests_in_flight: usize,

    /// Bytes of replies and notifications queued per connection; beyond it producers wait, and a
    /// connection that does not read its replies stops being read.
    #[arg(long, env = "EXEC_SERVER_OUTBOUND_BUFFER_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub outbound_buffer_bytes: usize,

    /// Largest file `fs/readFile` returns whole; larger ones are read with `fs/open` and
    /// `fs/readBlock`.
    #[arg(long, env = "EXEC_SERVER_MAX_READ_FILE_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub max_read_file_bytes: u64,

    /// Largest response body a buffered `http/request` returns; larger ones are streamed with
    /// `streamResponse: true`.
    #[arg(long, env = "EXEC_SERVER_MAX_HTTP_BODY_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub max_http_body_bytes: usize,

    /// Directories all `fs/watch`es of the daemon may watch together (inotify watches).
    /// Default: half of /proc/sys/fs/inotify/max_user_watches.
    #[arg(long, env = "EXEC_SERVER_MAX_WATCHED_DIRECTORIES")]
    pub max_watched_directories: Option<usize>,

    /// Directories the `fs/watch`es of one connection may watch together.
    /// Default: an eighth of /proc/sys/fs/inotify/max_user_watches.
    #[arg(long, env = "EXEC_SERVER_MAX_WATCHED_DIRECTORIES_PER_CONNECTION")]
    pub max_watched_directories_per_connection: Option<usize>,

    /// Interval of WebSocket pings; a peer that sends nothing (not even a pong) for two
    /// intervals is disconnected and its session detached. Pings that ask for proof of receipt
    /// of output are also sent as retention fills.
    #[arg(long, env = "EXEC_SERVER_PING_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub ping_interval: Duration,

    /// How long a connection may stay in its HTTP phase (request headers, `/readyz`, the
    /// upgrade) before it is closed.
    #[arg(long, env = "EXEC_SERVER_UPGRADE_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub upgrade_timeout: Duration,

    /// Connections allowed in their HTTP phase at once (not yet upgraded to a WebSocket), per
    /// listener; past it, the listener closes the oldest of them for the new one. Once more
    /// than half are taken, new ones get a quarter of --upgrade-timeout. Default: 1024, or an
    /// eighth of the open-files limit if lower.
    #[arg(long, env = "EXEC_SERVER_MAX_PENDING_CONNECTIONS")]
    pub max_pending_connections: Option<usize>,

    /// Connections in their HTTP phase at once from one peer (one IPv4 address, one IPv6 /64,
    /// one uid on a Unix socket), per listener; past it, as above, the peer's oldest. Default: 256,
    /// or a quarter of --max-pending-connections if lower (a hundred local clients connecting at
    /// once is an ordinary fan-out).
    #[arg(long, env = "EXEC_SERVER_MAX_PENDING_CONNECTIONS_PER_PEER")]
    pub max_pending_connections_per_peer: Option<usize>,

    /// Live processes (started, their tree not yet gone) of all sessions together; further
    /// starts are refused. Default: as many as half the open-files limit holds (eight
    /// descriptors each), at most 4096.
    #[arg(long, env = "EXEC_SERVER_MAX_PROCESSES")]
    pub max_processes: Option<usize>,

    /// Live processes of one session; further starts are refused. Default: a quarter of
    /// --max-processes.
    #[arg(long, env = "EXEC_SERVER_MAX_PROCESSES_PER_SESSION")]
    pub max_processes_per_session: Option<usize>,

    /// The certificate chain (PEM) of a `wss://` listener, read again on SIGHUP.
    #[arg(long, env = "EXEC_SERVER_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key (PEM) of a `wss://` listener, read again on SIGHUP.
    #[arg(long, env = "EXEC_SERVER_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// On a `unix://` listener, a further uid allowed to connect (the daemon's own always is);
    /// repeat for several. Checked with the peer's credentials.
    #[arg(
        long = "allow-uid",
        env = "EXEC_SERVER_ALLOW_UIDS",
        value_delimiter = ','
    )]
    pub allow_uids: Vec<u32>,

    /// Also serve `GET /metrics` (Prometheus text) on this `IP:PORT`, plain HTTP without the
    /// token: bind it to loopback or a private network. The listener's own port serves
    /// `/metrics` too, behind the token when one is set.
    #[arg(long, env = "EXEC_SERVER_METRICS_LISTEN")]
    pub metrics_listen: Option<std::net::SocketAddr>,

    /// Append one JSON line per action (process start, signal, terminate and exit; fs changes;
    /// http requests; session create, resume and expiry) to this file, created mode 0600.
    #[arg(long, env = "EXEC_SERVER_AUDIT_LOG")]
    pub audit_log: Option<PathBuf>,

    /// An action whose audit record cannot be written fails (JSON-RPC error -32012) and is not
    /// performed; without it, the failure is logged and the action goes ahead.
    #[arg(long, env = "EXEC_SERVER_AUDIT_REQUIRED", requires = "audit_log")]
    pub audit_required: bool,

    /// Where the daemon keeps what it needs to find its processes again after a restart:
    /// an absolute path, created mode 0700, the daemon user's own and closed to group and others,
    /// one daemon at a time; an explicit one that cannot be used stops the daemon. `none` keeps
    /// no state (throwaway daemons). Default: /run/exec-server for root,
    /// $XDG_RUNTIME_DIR/exec-server for others (none without XDG_RUNTIME_DIR); when it cannot be
    /// used (e.g. another daemon holds it) state is not kept, with a warning.
    #[arg(long, env = "EXEC_SERVER_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Upgrades (SIGUSR2, `exec-server upgrade`) execute again the binary this daemon was
    /// started from, through a descriptor opened at start, instead of the binary at its path:
    /// for a path other users may write, or to restart in place. Without it, an upgrade refuses
    /// a binary that a user other than root and the daemon's could have put at its path.
    #[arg(long, env = "EXEC_SERVER_UPGRADE_FROM_START_BINARY")]
    pub upgrade_from_start_binary: bool,

    /// Also speak E2B's envd protocol (Connect RPC `process.Process` and
    /// `filesystem.Filesystem`, `/files`, `/health`) on `IP:PORT` or `unix:///PATH`, so the
    /// unmodified E2B SDKs drive this daemon; repeat for several. See docs/envd.md.
    #[arg(
        long = "envd-listen",
        env = "EXEC_SERVER_ENVD_LISTEN",
        value_delimiter = ','
    )]
    pub envd_listen: Vec<String>,

    /// Require `X-Access-Token: <TOKEN>` on every envd request (as envd does), the token read
    /// once from this file (mode 600).
    #[arg(long, env = "EXEC_SERVER_ENVD_ACCESS_TOKEN_FILE")]
    pub envd_access_token_file: Option<PathBuf>,

    /// This sandbox's name (on Kubernetes, the pod's, from the downward API): a request whose
    /// `X-Sandbox-ID` names another is refused (421), so a stale route cannot reach this pod.
    #[arg(long, env = "EXEC_SERVER_SANDBOX_ID")]
    pub sandbox_id: Option<String>,

    /// Serve envd on a non-loopback TCP address without --envd-access-token-file: whoever
    /// reaches the port runs commands as any user of this host.
    #[arg(long, env = "EXEC_SERVER_ENVD_ALLOW_UNAUTHENTICATED")]
    pub envd_allow_unauthenticated: bool,

    /// A permission profile (a `process/start` `sandbox` as JSON, or just its `permissions`)
    /// applied to every command the envd listeners start; shown in `environment/info`.
    #[arg(long, env = "EXEC_SERVER_ENVD_SANDBOX", value_name = "PROFILE.json")]
    pub envd_sandbox: Option<PathBuf>,

    /// The directory the sandboxd REST API (`/v1/files/{path}` on the listener) resolves its
    /// sandbox-relative paths under: nothing outside it is reachable there, by `..` or by a
    /// symbolic link. See docs/operations.md, "On kubernetes-sigs/agent-sandbox".
    #[arg(long, env = "EXEC_SERVER_SANDBOXD_ROOT", default_value = "/")]
    pub sandboxd_root: PathBuf,

    /// A permission profile (as `--envd-sandbox` takes) applied to every command the sandboxd
    /// gRPC ProcessService starts, anchored at its cwd.
    #[arg(
        long,
        env = "EXEC_SERVER_SANDBOXD_SANDBOX",
        value_name = "PROFILE.json"
    )]
    pub sandboxd_sandbox: Option<PathBuf>,

    /// Serve agent-sandbox's gRPC `process.v1.ProcessService` (h2c) on this address, behind
    /// the listener's token.
    #[arg(long, env = "EXEC_SERVER_SANDBOXD_GRPC_LISTEN", value_name = "IP:PORT")]
    pub sandboxd_grpc_listen: Option<std::net::SocketAddr>,

    /// The largest file `PUT /v1/files/{path}` writes; a longer body is refused (413).
    #[arg(long, env = "EXEC_SERVER_SANDBOXD_MAX_FILE_BYTES", default_value_t = 1 << 30)]
    pub sandboxd_max_file_bytes: u64,

    /// Which layer confines a sandbox's file system: `auto` (Landlock where the kernel has ABI
    /// 2 or newer, else the mount view alone), `landlock` (refuse restricting intent without
    /// it), or `mount-view` (the mount view alone, as bubblewrap does; Landlock still scopes
    /// signals and abstract sockets where it can). See docs/sandbox.md, "Backends".
    #[arg(
        long,
        env = "EXEC_SERVER_SANDBOX_BACKEND",
        value_enum,
        default_value = "auto"
    )]
    pub(crate) sandbox_backend: crate::sandbox::facilities::BackendChoice,

    /// Use no Landlock ABI above this one (0: no Landlock): for tests of older kernels.
    #[arg(long, env = "EXEC_SERVER_LANDLOCK_ABI_MAX", hide = true)]
    pub landlock_abi_max: Option<i32>,

    /// Log format on stderr.
    #[arg(
        long,
        env = "EXEC_SERVER_LOG_FORMAT",
        value_enum,
        default_value = "human"
    )]
    pub log_format: LogFormat,

    /// Log filter, in `tracing` env-filter syntax (RUST_LOG is honoured too).
    #[arg(long, env = "EXEC_SERVER_LOG", default_value = "info")]
    pub log: String,

    #[command(flatten)]
    pub remote_mode: RemoteArgs,

    #[command(flatten)]
    pub runtime: RuntimeArgs,

    #[command(flatten)]
    pub codex: crate::codex_args::CodexArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Human,
    Json,
}

/// Settings the running daemon consults.
#[derive(Debug, Clone)]
pub struct Config {
    /// What a WebSocket upgrade must present, if anything.
    pub(crate) upgrade_auth: Option<crate::ws_auth::UpgradeAuth>,
    pub session_ttl: Duration,
    pub max_session_ttl: Duration,
    pub exited_retention: Duration,
    pub output_retention_bytes: usize,
    pub output_retention_chunks: usize,
    pub max_message_bytes: usize,
    pub max_requests_in_flight: usize,
    pub outbound_buffer_bytes: usize,
    pub max_read_file_bytes: u64,
    pub max_http_body_bytes: usize,
    pub max_watched_directories: usize,
    pub max_watched_directories_per_connection: usize,
    /// Watchers (inotify instances) of the whole daemon: half the user's
    /// /proc/sys/fs/inotify/max_user_instances, the rest left to the user's other processes.
    pub max_watchers: usize,
    pub ping_interval: Duration,
    pub upgrade_timeout: Duration,
    pub max_pending_connections: usize,
    pub max_pending_connections_per_peer: usize,
    pub max_processes: usize,
    pub max_processes_per_session: usize,
    pub allow_uids: Vec<u32>,
    /// A `wss://` listener's certificate chain and key files.
    pub tls: Option<(PathBuf, PathBuf)>,
    pub metrics_listen: Option<std::net::SocketAddr>,
    pub audit_log: Option<PathBuf>,
    pub audit_required: bool,
    pub(crate) state_dir: crate::state_dir::StateDirSetting,
    pub envd: EnvdSettings,
    pub runtime: RuntimeSettings,
    /// `--sandbox-id`: the `X-Sandbox-ID` requests routed here must name, if they name one.
    pub(crate) sandbox_id: Option<String>,
    /// `--sandboxd-root`, `--sandboxd-max-file-bytes`, `--sandboxd-grpc-listen`.
    pub(crate) sandboxd_root: PathBuf,
    pub(crate) sandboxd_max_file_bytes: u64,
    pub(crate) sandboxd_grpc_listen: Option<std::net::SocketAddr>,
    /// `--sandboxd-sandbox`: the profile, checked at start.
    pub(crate) sandboxd_sandbox: Option<serde_json::Value>,
    /// How sandboxes are enforced on this host (`--sandbox-backend`, the kernel's Landlock).
    pub(crate) sandbox: crate::sandbox::facilities::Enforcement,
}

impl Args {
    pub fn config(&self) -> anyhow::Result<Config> {
        let upgrade_auth = self.upgrade_auth()?;
        anyhow::ensure!(
            self.output_retention_bytes > 0,
            "--output-retention-bytes must be positive"
        );
        anyhow::ensure!(
            self.output_retention_chunks > 0,
            "--output-retention-chunks must be positive"
        );
        // A zero period would spin (and tokio refuses it).
        anyhow::ensure!(
            !self.ping_interval.is_zero(),
            "--ping-interval must be positive"
        );
        let limits = self.limits()?;
        let user_watches = inotify_limit("max_user_watches", 8192);
        Ok(Config {
            upgrade_auth,
            session_ttl: self.session_ttl,
            max_session_ttl: self.max_session_ttl,
            exited_retention: self.exited_retention,
            output_retention_bytes: self.output_retention_bytes,
            output_retention_chunks: self.output_retention_chunks,
            max_message_bytes: self.max_message_bytes,
            max_requests_in_flight: self.max_requests_in_flight,
            outbound_buffer_bytes: self.outbound_buffer_bytes,
            max_read_file_bytes: self.max_read_file_bytes,
            max_http_body_bytes: self.max_http_body_bytes,
            max_watched_directories: self.max_watched_directories.unwrap_or(user_watches / 2),
            max_watched_directories_per_connection: self
                .max_watched_directories_per_connection
                .unwrap_or(user_watches / 8),
            max_watchers: inotify_limit("max_user_instances", 128) / 2,
            ping_interval: self.ping_interval,
            upgrade_timeout: self.upgrade_timeout,
            max_pending_connections: limits.pending_connections,
            max_pending_connections_per_peer: limits.pending_connections_per_peer,
            max_processes: limits.processes,
            max_processes_per_session: limits.processes_per_session,
            allow_uids: self.allow_uids.clone(),
            tls: self.tls_cert.clone().zip(self.tls_key.clone()),
            metrics_listen: self.metrics_listen,
            sandbox_id: self.sandbox_id.clone(),
            runtime: self.runtime.settings()?,
            audit_log: self.audit_log.clone(),
            audit_required: self.audit_required,
            state_dir: crate::state_dir::StateDirSetting::resolve(
                self.state_dir.as_deref(),
                nix::unistd::geteuid().as_raw(),
                std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
            )?,
            envd: self.envd()?,
            // Absolute, so that commands' working directories under it are too.
            sandboxd_root: std::path::absolute(&self.sandboxd_root)?,
            sandboxd_max_file_bytes: self.sandboxd_max_file_bytes,
            sandboxd_grpc_listen: self.sandboxd_grpc_listen,
            sandboxd_sandbox: runtime::read_checked_profile(
                self.sandboxd_sandbox.as_ref(),
                "--sandboxd-sandbox",
            )?
            .map(|(_, profile)| profile),
            sandbox: crate::sandbox::facilities::Enforcement::decide(
                crate::sandbox::facilities::kernel_abi(),
                self.landlock_abi_max,
                self.sandbox_backend,
            ),
        })
    }

    /// The envd listeners; one reachable beyond this host needs a token or the explicit flag.
    fn envd(&self) -> anyhow::Result<EnvdSettings> {
        let listen = (self.envd_listen.iter())
            .map(|text| EnvdListen::parse(text))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let access_token = match &self.envd_access_token_file {
            Some(path) => Some(read_token_file(path, "--envd-access-token-file")?),
            None => None,
        };
        if access_token.is_none() && !self.envd_allow_unauthenticated {
            if let Some(open) = listen.iter().find(|listen| match listen {
                EnvdListen::Tcp(addr) => !addr.ip().is_loopback(),
                EnvdListen::Unix(_) => false,
            }) {
                anyhow::bail!(
                    "--envd-listen {open} is not loopback: set --envd-access-token-file, or \
                     --envd-allow-unauthenticated to serve it to anyone who reaches it"
                );
            }
        }
        let sandbox = runtime::read_profile(self.envd_sandbox.as_ref(), "--envd-sandbox")?;
        Ok(EnvdSettings {
            listen,
            access_token,
            sandbox,
        })
    }

    /// What an upgrade must present: our token, or codex's `--ws-auth`, not both.
    fn upgrade_auth(&self) -> anyhow::Result<Option<crate::ws_auth::UpgradeAuth>> {
        let codex = self.codex.upgrade_auth()?;
        let ours = self.connection_token()?;
        match (ours, codex) {
            (Some(_), Some(_)) => anyhow::bail!(
                "--connection-token[-file] (or CODEX_EXEC_SERVER_CONNECTION_TOKEN) and --ws-auth \
                 are two ways to require a token: give one"
            ),
            (Some(token), None) => Ok(Some(crate::ws_auth::UpgradeAuth::token(&token))),
            (None, codex) => Ok(codex),
        }
    }

    /// The bearer token: from its file, its flag or codex's variable, in that order.
    fn connection_token(&self) -> anyhow::Result<Option<String>> {
        let token = match &self.connection_token_file {
            Some(path) => Some(read_token_file(path, "--connection-token-file")?),
            None => self
                .connection_token
                .clone()
                .or_else(|| std::env::var("CODEX_EXEC_SERVER_CONNECTION_TOKEN").ok()),
        };
        if let Some(token) = &token {
            anyhow::ensure!(!token.is_empty(), "the connection token must not be empty");
            anyhow::ensure!(
                axum::http::HeaderValue::from_str(&format!("Bearer {token}")).is_ok(),
                "the connection token must be a valid HTTP header value"
            );
        }
        Ok(token)
    }

    /// The limits on connections and processes, given or shared out of the open-files limit,
    /// checked with the other limits on requests and replies.
    fn limits(&self) -> anyhow::Result<Limits> {
        // Descriptors: half for processes, an eighth per listener for the HTTP phase, and the
        // rest kept for established connections (a resume) and the daemon's own files.
        let open_files = open_files_limit();
        let pending_connections = self
            .max_pending_connections
            .unwrap_or((open_files / 8).clamp(1, 1024));
        let pending_connections_per_peer = self
            .max_pending_connections_per_peer
            .unwrap_or((pending_connections / 4).clamp(1, 256));
        let processes = self
            .max_processes
            .unwrap_or((open_files / 2 / DESCRIPTORS_PER_PROCESS).clamp(1, 4096));
        let processes_per_session = self
            .max_processes_per_session
            .unwrap_or((processes / 4).max(1));
        for (flag, value) in [
            ("--max-requests-in-flight", self.max_requests_in_flight),
            ("--outbound-buffer-bytes", self.outbound_buffer_bytes),
            ("--max-pending-connections", pending_connections),
            (
                "--max-pending-connections-per-peer",
                pending_connections_per_peer,
            ),
            ("--max-processes", processes),
            ("--max-processes-per-session", processes_per_session),
        ] {
            anyhow::ensure!(value > 0, "{flag} must be positive");
        }
        // The budget is counted in semaphore permits.
        anyhow::ensure!(
            u32::try_from(self.outbound_buffer_bytes).is_ok(),
            "--outbound-buffer-bytes must be below 4 GiB"
        );
        Ok(Limits {
            pending_connections,
            pending_connections_per_peer,
            processes,
            processes_per_session,
        })
    }
}

/// The limits of [`Args::limits`].
struct Limits {
    pending_connections: usize,
    pending_connections_per_peer: usize,
    processes: usize,
    processes_per_session: usize,
}

/// The token from `path` (given as `flag`), which only its owner may access (as ssh does with
/// private keys), and which must hold one.
pub(crate) fn read_token_file(path: &Path, flag: &str) -> anyhow::Result<String> {
    use anyhow::Context as _;
    use std::io::Read as _;
    use std::os::unix::fs::PermissionsExt as _;
    let shown = path.display();
    let cannot_read = || format!("cannot read {flag} {shown}");
    let mut file = std::fs::File::open(path).with_context(cannot_read)?;
    let mode = file
        .metadata()
        .with_context(cannot_read)?
        .permissions()
        .mode()
        & 0o777;
    anyhow::ensure!(
        mode & 0o077 == 0,
        "{flag} {shown} has mode {mode:03o}, so group or others may access it; \
         run `chmod 600 {shown}`"
    );
    let mut text = String::new();
    file.read_to_string(&mut text).with_context(cannot_read)?;
    // An empty token would be matched by a request that sends none: refused, not "no token".
    anyhow::ensure!(
        !text.trim().is_empty(),
        "{flag} {shown} holds no token (it is empty or only whitespace)"
    );
    Ok(text.trim_end_matches(['\r', '\n']).to_owned())
}

/// Descriptors a live process holds in the daemon, rounded up: its output pipes and files, its
/// stdin, its supervisor's socket.
const DESCRIPTORS_PER_PROCESS: usize = 8;

/// The daemon's open-files limit (raised to the hard limit at start; 1024 when unreadable).
fn open_files_limit() -> usize {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| {
            usize::try_from(soft).unwrap_or(usize::MAX)
        })
}

/// The user's inotify watch limit, shared by every process of the user (8192, the kernel's
/// old default, when unreadable).
/// `/proc/sys/fs/inotify/<name>`, or `default` where it cannot be read.
fn inotify_limit(name: &str, default: usize) -> usize {
    std::fs::read_to_string(format!("/proc/sys/fs/inotify/{name}"))
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(default)
}
