//! The client subcommands: `exec-server run`, `attach`, `ps`, `kill` and `fs ...`, a human's
//! way to use a running daemon, built on the `exec-server-client` crate (docs/cli.md);
//! `exec-server ready`, a health check; `exec-server upgrade`, a daemon's upgrade in place;
//! `exec-server completions SHELL`, generated from this command line.

mod attach;
mod follow;
mod fs;
mod kill;
mod ps;
mod ready;
mod run;
mod sandbox;
mod terminal;
mod upgrade;

use crate::config::{read_token_file, Args};
use exec_server_client::{Client, ClientOptions};
use std::process::ExitCode;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run a command on a daemon: output streams here, stdin is forwarded, Ctrl-C interrupts
    /// it (a second one ends its tree), and the exit code is a shell's (127 not found, 126 not
    /// executable, 128+N killed by signal N, 124 timed out; 255 when the connection is lost).
    Run(run::RunArgs),
    /// Follow a process left running by `run --detach`: its retained output first, then what
    /// follows, with stdin and terminal size forwarded; `~.` at the start of a line detaches.
    Attach(attach::AttachArgs),
    /// List a session's processes as a table.
    Ps(ps::PsArgs),
    /// End a process of a detached session (its whole tree), or send it one signal.
    Kill(kill::KillArgs),
    /// Copy files from and to a daemon's host, and manage its files.
    #[command(subcommand)]
    Fs(fs::FsCommand),
    /// Print a completion script for this shell (e.g. `exec-server completions bash >
    /// /etc/bash_completion.d/exec-server`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Exit 0 if the daemon answers `/readyz` (a health check for containers), 1 if not.
    Ready(ready::ReadyArgs),
    /// Upgrade a running daemon in place: it starts the binary now at its path and hands it the
    /// listener (no connection is refused). Exit 0 once done (the new pid on stdout), 1 if not
    /// (the daemon goes on serving when its successor failed).
    Upgrade(upgrade::UpgradeArgs),
}

/// The whole command line: without a subcommand the daemon serves with [`Args`]; the
/// subcommands are clients of a running daemon.
#[derive(Debug, clap::Parser)]
#[command(
    name = "exec-server",
    version,
    about = "Runs and controls processes and files for a remote orchestrator over JSON-RPC on a WebSocket",
    after_help = "After binding, the WebSocket URL (ws://IP:PORT) is printed as one line on stdout; logs go to stderr.",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: Args,
}

/// Where the daemon is.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectArgs {
    /// The daemon's URL, as it printed it (e.g. ws://127.0.0.1:8080, wss://…, unix:///…).
    #[arg(long, env = "EXEC_SERVER_URL")]
    pub url: String,
    /// Bearer token, if the daemon requires one. Prefer --token-file: a command line is
    /// readable by every local user.
    #[arg(long, env = "EXEC_SERVER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// For wss://: CA certificates (PEM) to trust besides the usual roots.
    #[arg(long, env = "EXEC_SERVER_CA_FILE")]
    pub ca_file: Option<std::path::PathBuf>,
    /// Read the bearer token from this file (trailing line breaks ignored; chmod 600).
    #[arg(long, env = "EXEC_SERVER_TOKEN_FILE", conflicts_with = "token")]
    pub token_file: Option<std::path::PathBuf>,
}

impl ConnectArgs {
    async fn connect(&self) -> anyhow::Result<Client> {
        Ok(Client::connect(self.options()?).await?)
    }

    /// Takes over a detached session (`attach`, `ps`, `kill`); closing the client detaches it
    /// again and its TTL starts over.
    async fn resume(&self, session: &str) -> anyhow::Result<Client> {
        let mut options = self.options()?;
        options.resume_session_id = Some(session.to_owned());
        // A session whose client just dropped is taken over once the daemon noticed; one
        // attached elsewhere is reported soon rather than waited for.
        options.reconnect_deadline = Some(std::time::Duration::from_secs(2));
        Ok(Client::connect(options).await?)
    }

    fn options(&self) -> anyhow::Result<ClientOptions> {
        let token = match &self.token_file {
            Some(path) => Some(read_token_file(path, "--token-file")?),
            None => self.token.clone(),
        };
        let mut options = ClientOptions::new(self.url.clone())
            .token(token)
            .ca_file(self.ca_file.clone());
        options.client_name = "exec-server-cli".into();
        Ok(options)
    }
}

/// Exit code for failures of the CLI itself (as ssh does).
const FAILURE: u8 = 255;

pub fn main(command: Command) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("exec-server: {err}");
            return ExitCode::from(FAILURE);
        }
    };
    let outcome = runtime.block_on(async {
        match command {
            Command::Run(args) => run::run(args).await,
            Command::Attach(args) => attach::run(args).await,
            Command::Ps(args) => ps::run(args).await.map(|()| 0),
            Command::Kill(args) => kill::run(args).await.map(|()| 0),
            Command::Fs(command) => fs::run(command).await,
            Command::Completions { shell } => {
                let mut command = <Cli as clap::CommandFactory>::command();
                clap_complete::generate(shell, &mut command, "exec-server", &mut std::io::stdout());
                Ok(0)
            }
            Command::Ready(args) => Ok(ready::run(args).await),
            Command::Upgrade(args) => upgrade::run(args).await,
        }
    });
    // A blocking read of stdin may still be pending; it must not keep the process alive.
    runtime.shutdown_background();
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("exec-server: {err:#}");
            ExitCode::from(FAILURE)
        }
    }
}
