use clap::{CommandFactory as _, FromArgMatches as _};
use exec_server::{Args, Cli, ListenUrl, LogFormat};

fn main() -> std::process::ExitCode {
    // First, before flags and before any runtime or thread: the fork server of supervisors and
    // sandbox helpers must start as a fresh single-threaded process.
    exec_server::main_if_supervisor();
    // Record the daemon's own binary before anything could replace it.
    exec_server::record_own_binary();
    exec_server::map_large_buffers();
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit());
    match cli.command {
        None => {
            let token_on_argv = matches.value_source("connection_token")
                == Some(clap::parser::ValueSource::CommandLine);
            // In remote mode the daemon listens only where it is told to.
            let listen_given =
                matches.value_source("listen") != Some(clap::parser::ValueSource::DefaultValue);
            serve(&cli.serve, token_on_argv, listen_given)
        }
        Some(command) => exec_server::run_command(command),
    }
}

fn serve(args: &Args, token_on_argv: bool, listen_given: bool) -> std::process::ExitCode {
    // Before any thread: it edits the environment.
    let handover = exec_server::Handover::capture(args.upgrade_from_start_binary);
    init_logging(args);
    exec_server::record_own_binary().warn();
    if token_on_argv {
        tracing::warn!(
            "--connection-token is readable by every local user in /proc/PID/cmdline; \
             use --connection-token-file instead"
        );
    }
    args.codex.log_ignored();
    raise_fd_limit();
    shield_from_oom_killer();
    let result = args.config().and_then(|config| {
        let remote = args.remote_mode.config()?;
        let listen = match remote {
            Some(_) if !listen_given => None,
            _ => Some(ListenUrl::parse(&args.listen)?),
        };
        if args.codex.exit_on_stdin_close {
            anyhow::ensure!(
                !matches!(listen, Some(ListenUrl::Stdio)),
                "--exit-on-stdin-close: a stdio:// daemon already ends with its input"
            );
            exit_on_stdin_close();
        }
        let runtime = tokio::runtime::Runtime::new()?;
        runtime.block_on(exec_server::serve(listen, remote, config, handover))
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            eprintln!("exec-server: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// --exit-on-stdin-close: once standard input ends (the parent holding its pipe is gone), the
/// daemon shuts down as on SIGTERM, its processes killed, rather than outliving its owner.
fn exit_on_stdin_close() {
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        tracing::info!("standard input closed: shutting down (--exit-on-stdin-close)");
        if let Err(err) = nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM) {
            tracing::error!("cannot signal the daemon's own shutdown: {err}");
            std::process::exit(1);
        }
    });
}

fn init_logging(args: &Args) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&args.log));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Under memory pressure the kernel should kill a workload, not the daemon that supervises
/// them all (workloads are biased the other way, `sandbox::pool`). Lowering takes
/// CAP_SYS_RESOURCE; without it the daemon keeps its score.
fn shield_from_oom_killer() {
    if let Err(err) = std::fs::write("/proc/self/oom_score_adj", "-900") {
        tracing::debug!("cannot lower the daemon's oom_score_adj: {err}");
    }
}

/// Every connection and every child's pipes take descriptors, and the usual soft limit (1024)
/// is only a default kept for select()-based programs: the daemon takes all the hard limit allows.
fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => {
            if let Err(err) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::warn!("cannot raise the open file limit from {soft} to {hard}: {err}");
            }
        }
        Ok(_) => {}
        Err(err) => tracing::warn!("cannot read the open file limit: {err}"),
    }
}
