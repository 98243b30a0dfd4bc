use clap::Parser;
use exec_server::config::{Args, Cli, LogFormat};
use exec_server::transport;

fn main() -> std::process::ExitCode {
    // First, before flags and before any runtime or thread: the sandbox helper must start as a
    // fresh single-threaded process.
    exec_server::sandbox::helper::main_if_helper();
    // The sandboxed fs helper, likewise: it runs one blocking operation and exits.
    exec_server::fs::helper::main_if_fs_op();
    // Record the daemon's own binary before anything could replace it.
    exec_server::sandbox::guard::init();
    let cli = Cli::parse();
    match cli.command {
        None => serve(&cli.serve),
        Some(command) => exec_server::cli::main(command),
    }
}

fn serve(args: &Args) -> std::process::ExitCode {
    init_logging(args);
    let result = args.config().and_then(|config| {
        let listen = transport::ListenUrl::parse(&args.listen)?;
        let runtime = tokio::runtime::Runtime::new()?;
        runtime.block_on(transport::serve(listen, config))
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
