//! `exec-server run`: one remote command, attached to this terminal like `ssh host cmd`.

use super::{terminal, ConnectArgs, FAILURE};
use exec_server_client::protocol::process::{
    EnvInherit, EnvPolicy, OutputStream, ProcessSignal, TerminalSize,
};
use exec_server_client::{Client, Command, ProcessEvent, ProcessHandle};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::signal::unix::{signal, SignalKind};

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

/// Runs the command; returns the exit code to exit with.
pub(super) async fn run(args: RunArgs) -> anyhow::Result<u8> {
    let client = args.connect.connect().await?;
    let cwd = match &args.cwd {
        Some(cwd) => cwd.clone(),
        None => remote_cwd(&client).await,
    };
    let mut command = Command::new(args.command.iter().cloned())
        .cwd(&cwd)?
        .stdin()
        .env_policy(EnvPolicy {
            inherit: EnvInherit::All,
            ignore_default_excludes: false,
            exclude: Vec::new(),
            set: Default::default(),
            include_only: Vec::new(),
        });
    if args.tty {
        command = command.tty(terminal::size().unwrap_or(TerminalSize { rows: 24, cols: 80 }));
        if let Ok(term) = std::env::var("TERM") {
            command = command.env("TERM", term);
        }
    }
    for (key, value) in &args.env {
        command = command.env(key, value);
    }
    let mut process = client.start(command).await?;
    let raw_mode = if args.tty {
        terminal::RawMode::enable()?
    } else {
        None
    };
    let forwarders = [
        tokio::spawn(forward_stdin(process.handle())).abort_handle(),
        tokio::spawn(forward_signals(process.handle(), args.tty)).abort_handle(),
    ];
    let outcome = print_events(&mut process).await;
    for task in forwarders {
        task.abort();
    }
    drop(raw_mode);
    outcome
}

/// The daemon's working directory, from its environment info; `/` if it reports none.
async fn remote_cwd(client: &Client) -> String {
    let info = client.environment_info().await.ok();
    info.and_then(|info| info.cwd)
        .map_or_else(|| "/".to_owned(), |cwd| cwd.as_str().to_owned())
}

async fn print_events(process: &mut exec_server_client::Process) -> anyhow::Result<u8> {
    let mut stdout = tokio::io::stdout();
    let mut stderr = tokio::io::stderr();
    let mut exit_code = None;
    let mut lost = false;
    while let Some(event) = process.next_event().await {
        match event {
            ProcessEvent::Output { stream, data, .. } => {
                let sink: &mut (dyn tokio::io::AsyncWrite + Unpin + Send) = match stream {
                    OutputStream::Stderr => &mut stderr,
                    OutputStream::Stdout | OutputStream::Pty => &mut stdout,
                };
                // A closed local stdout (e.g. `| head`) ends the command, as a pipe would.
                if sink.write_all(&data).await.is_err() || sink.flush().await.is_err() {
                    process.terminate().await.ok();
                    return Ok(FAILURE);
                }
            }
            ProcessEvent::Exited {
                exit_code: code, ..
            } => exit_code = Some(code),
            ProcessEvent::Closed { .. } => {}
            // A terminal user sees the prompt; stdin fed by a program may never answer it.
            ProcessEvent::InputWait { .. } => {
                if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                    eprintln!("exec-server: the command is waiting for input");
                }
            }
            ProcessEvent::Gap { from_seq, to_seq } => {
                lost = true;
                eprintln!(
                    "exec-server: output events {from_seq}..={to_seq} were lost (evicted on the daemon during a reconnect)"
                );
            }
            ProcessEvent::Failed { message } => {
                eprintln!("exec-server: {message}");
                return Ok(FAILURE);
            }
        }
    }
    if lost {
        eprintln!("exec-server: some output was lost; exiting with {FAILURE}");
        return Ok(FAILURE);
    }
    Ok(match exit_code {
        Some(code @ 0..=255) => code as u8,
        _ => FAILURE,
    })
}

async fn forward_stdin(process: ProcessHandle) {
    let mut stdin = tokio::io::stdin();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match stdin.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if process.write(&buffer[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
    let _ = process.close_stdin().await;
}

/// Local signals go to the remote process; with a terminal, window size changes too.
async fn forward_signals(process: ProcessHandle, tty: bool) -> std::io::Result<()> {
    let mut winch = signal(SignalKind::window_change())?;
    let mut kinds = Vec::new();
    for (kind, remote) in [
        (SignalKind::interrupt(), ProcessSignal::Interrupt),
        (SignalKind::terminate(), ProcessSignal::Terminate),
        (SignalKind::hangup(), ProcessSignal::Hangup),
        (SignalKind::quit(), ProcessSignal::Quit),
    ] {
        kinds.push((signal(kind)?, remote));
    }
    loop {
        let received =
            futures::future::select_all(kinds.iter_mut().map(|(stream, remote)| {
                Box::pin(async move { stream.recv().await.map(|_| *remote) })
            }));
        tokio::select! {
            _ = winch.recv() => {
                if let (true, Some(size)) = (tty, terminal::size()) {
                    let _ = process.resize(size).await;
                }
            }
            (remote, _, _) = received => {
                if let Some(remote) = remote {
                    let _ = process.signal(remote).await;
                }
            }
        }
    }
}
