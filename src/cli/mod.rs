//! The client subcommands: `exec-server run` and `exec-server fs ...`, a human's way to use a
//! running daemon, built on the `exec-server-client` crate; `exec-server ready`, a health check.

mod fs;
mod ready;
mod run;
mod terminal;

use exec_server_client::{Client, ClientOptions};
use std::process::ExitCode;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run a command on a daemon: output streams here, stdin is forwarded, and the exit code
    /// is the remote one (255 when the connection or session is lost).
    Run(run::RunArgs),
    /// Copy files from and to a daemon's host, and list its directories.
    #[command(subcommand)]
    Fs(fs::FsCommand),
    /// Exit 0 if the daemon answers `/readyz` (a health check for containers), 1 if not.
    Ready(ready::ReadyArgs),
}

/// Where the daemon is.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectArgs {
    /// The daemon's URL, as it printed it (e.g. ws://127.0.0.1:8080, wss://…, unix:///…).
    #[arg(long, env = "EXEC_SERVER_URL")]
    pub url: String,
    /// Bearer token, if the daemon requires one.
    #[arg(long, env = "EXEC_SERVER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// For wss://: CA certificates (PEM) to trust besides the usual roots.
    #[arg(long, env = "EXEC_SERVER_CA_FILE")]
    pub ca_file: Option<std::path::PathBuf>,
}

impl ConnectArgs {
    async fn connect(&self) -> anyhow::Result<Client> {
        let mut options = ClientOptions::new(self.url.clone())
            .token(self.token.clone())
            .ca_file(self.ca_file.clone());
        options.client_name = "exec-server-cli".into();
        Ok(Client::connect(options).await?)
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
            Command::Fs(command) => fs::run(command).await.map(|()| 0),
            Command::Ready(args) => Ok(ready::run(args).await),
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
