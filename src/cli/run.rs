//! `exec-server run`: one remote command, attached to this terminal like `ssh host cmd`, in a
//! session of its own that ends with it; or, with `--detach`, left running for `attach`.

use super::follow::{follow, Ended, Follow, Signals};
use super::sandbox::{self, Network, Sandbox};
use super::{terminal, ConnectArgs, FAILURE};
use exec_server_client::protocol::process::{EnvInherit, EnvPolicy, ProcessLimits, TerminalSize};
use exec_server_client::protocol::session::DisconnectPolicy;
use exec_server_client::{Client, Command, Error};
use std::time::Duration;

/// A shell's code for a command that was not found.
const NOT_FOUND: u8 = 127;
/// A shell's code for a command found but not executable.
const NOT_EXECUTABLE: u8 = 126;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    /// Run on a remote terminal; the local one is put in raw mode and its size followed.
    #[arg(long, short = 't')]
    tty: bool,
    /// Working directory on the daemon's host (absolute path or file: URI); default: the
    /// daemon's own.
    #[arg(long)]
    cwd: Option<String>,
    /// Set a variable in the remote environment (which otherwise is the daemon's, minus
    /// names matching *KEY*, *SECRET* and *TOKEN*).
    #[arg(long = "env", short = 'e', value_name = "KEY=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Confine the command: `read-only` (read everything, write nothing), `workspace-write`
    /// (also write the working directory and /tmp), or a JSON file holding a protocol
    /// sandbox context or permission profile. The network is off unless --network on.
    #[arg(long, value_name = "read-only|workspace-write|PROFILE.json", value_parser = sandbox::parse_sandbox)]
    sandbox: Option<Sandbox>,
    /// A directory the sandboxed command may write as well (repeatable).
    #[arg(long, value_name = "DIR")]
    writable: Vec<String>,
    /// The network of the command; `off` without --sandbox confines the network only.
    #[arg(long, value_enum)]
    network: Option<Network>,
    /// End the whole process tree after this long (e.g. 90s, 5m) and exit 124.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    timeout: Option<Duration>,
    /// Memory of the whole tree (e.g. 512M, 2G; bytes without a suffix).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_memory: Option<i64>,
    /// Processes and threads alive at once in the whole tree.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..))]
    max_processes: Option<i64>,
    /// Leave the command running: print its session and process ids (for `attach`, `ps`,
    /// `kill`) and exit. Its stdin is closed unless --tty.
    #[arg(long, short = 'd')]
    detach: bool,
    /// With --detach: how long the session waits for an attach before its processes are
    /// killed (at most the daemon's --max-session-ttl).
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = humantime::parse_duration, requires = "detach")]
    keep: Duration,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

fn parse_env(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}

/// `512M`, `2G`, `1024`: binary multiples, as `ulimit` and cgroups count.
pub(super) fn parse_size(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let shift = match unit.to_ascii_uppercase().trim_end_matches(['B', 'I']) {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("`{text}` is not a size like 512M or 2G")),
    };
    digits
        .parse::<i64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("`{text}` is not a positive size"))
}

/// Runs the command; returns the exit code to exit with.
pub(super) async fn run(args: RunArgs) -> anyhow::Result<u8> {
    let mut options = args.connect.options()?;
    if args.detach {
        options.session_ttl = Some(args.keep);
    } else {
        // The session ends with this connection, however it ends: nothing is left behind.
        options.on_disconnect = Some(DisconnectPolicy::Kill);
        options.reconnect_deadline = None;
    }
    let client = Client::connect(options).await?;
    let command = command(&args, &client).await?;
    let signals = Signals::listen()?;
    let mut process = match client.start(command).await {
        Ok(process) => process,
        Err(err) => {
            eprintln!("exec-server: {err}");
            client.close().await;
            return Ok(start_failure_code(&err));
        }
    };
    if args.detach {
        println!("{} {}", client.session_id(), process.id());
        client.close().await;
        return Ok(0);
    }
    let how = Follow {
        signals,
        tty: args.tty,
        forward_eof: true,
        escape: false,
    };
    let ended = follow(&mut process, how).await;
    client.close().await;
    Ok(match ended? {
        Ended::Exited(code) => code,
        // Not asked for (no escape): the process ended with the session.
        Ended::Detached => FAILURE,
    })
}

/// A shell's code for a program it could not execute: 127 when it is not there, 126 when it
/// may not be executed; 255 for any other failure to start.
fn start_failure_code(err: &Error) -> u8 {
    let Error::Rpc(error) = err else {
        return FAILURE;
    };
    let errno = |n: i32| error.message.ends_with(&format!("(os error {n})"));
    if !error.message.starts_with("failed to start") {
        FAILURE
    } else if errno(libc::ENOENT) || errno(libc::ENOTDIR) {
        NOT_FOUND
    } else if errno(libc::EACCES) || errno(libc::ENOEXEC) || errno(libc::EISDIR) {
        NOT_EXECUTABLE
    } else {
        FAILURE
    }
}

async fn command(args: &RunArgs, client: &Client) -> anyhow::Result<Command> {
    let cwd = match &args.cwd {
        Some(cwd) => cwd.clone(),
        None => remote_cwd(client).await,
    };
    let mut command = Command::new(args.command.iter().cloned())
        .cwd(&cwd)?
        .env_policy(EnvPolicy {
            inherit: EnvInherit::All,
            ignore_default_excludes: false,
            exclude: Vec::new(),
            set: Default::default(),
            include_only: Vec::new(),
        });
    if !args.detach {
        command = command.stdin();
    }
    if args.tty {
        command = command.tty(terminal::size().unwrap_or(TerminalSize { rows: 24, cols: 80 }));
        if let Ok(term) = std::env::var("TERM") {
            command = command.env("TERM", term);
        }
    }
    for (key, value) in &args.env {
        command = command.env(key, value);
    }
    let params = command.params_mut();
    params.sandbox = sandbox::context(
        args.sandbox.as_ref(),
        &args.writable,
        args.network,
        &params.cwd,
    )?;
    let limits = ProcessLimits {
        timeout_ms: args.timeout.map(|timeout| {
            i64::try_from(timeout.as_millis())
                .unwrap_or(i64::MAX)
                .max(1)
        }),
        max_memory_bytes: args.max_memory,
        max_processes: args.max_processes,
        ..ProcessLimits::default()
    };
    params.limits = (limits != ProcessLimits::default()).then_some(limits);
    Ok(command)
}

/// The daemon's working directory, from its environment info; `/` if it reports none.
async fn remote_cwd(client: &Client) -> String {
    let info = client.environment_info().await.ok();
    info.and_then(|info| info.cwd)
        .map_or_else(|| "/".to_owned(), |cwd| cwd.as_str().to_owned())
}
