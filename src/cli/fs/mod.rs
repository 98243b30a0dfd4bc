//! `exec-server fs ...`: files on the daemon's host. Remote paths are absolute paths or
//! `file:` URIs; `-` as the local side means stdout (get) or stdin (put).

mod copy;

use super::ConnectArgs;
use exec_server_client::fs::{GetMetadataParams, Metadata};
use exec_server_client::path_uri;
use exec_server_client::protocol::fs::{CopyParams, RemoveParams, RenameParams};
use exec_server_client::protocol::methods;
use exec_server_client::Client;
use std::io::Write as _;
use std::path::PathBuf;

#[derive(Debug, clap::Subcommand)]
pub enum FsCommand {
    /// Copy a remote file (or with -r a directory) here, streamed block by block, with a
    /// progress bar on a terminal.
    Get {
        #[command(flatten)]
        connect: ConnectArgs,
        #[command(flatten)]
        copy: copy::CopyFlags,
        remote: String,
        /// A file, a directory to put it in, or `-` for stdout.
        local: PathBuf,
    },
    /// Copy a local file (or `-` for stdin, or with -r a directory) to the remote path; each
    /// remote file is replaced only once its copy is complete (with --resume, it grows in
    /// place instead).
    Put {
        #[command(flatten)]
        connect: ConnectArgs,
        #[command(flatten)]
        copy: copy::CopyFlags,
        local: PathBuf,
        remote: String,
    },
    /// List a remote directory, sorted; directories end with `/`.
    Ls {
        #[command(flatten)]
        connect: ConnectArgs,
        remote: String,
    },
    /// Remove a remote file (or with -r a directory and everything in it).
    Rm {
        #[command(flatten)]
        connect: ConnectArgs,
        #[arg(long, short = 'r')]
        recursive: bool,
        /// No error when it does not exist.
        #[arg(long, short = 'f')]
        force: bool,
        remote: String,
    },
    /// Rename a remote file or directory.
    Mv {
        #[command(flatten)]
        connect: ConnectArgs,
        /// Replace an existing destination.
        #[arg(long, short = 'f')]
        force: bool,
        source: String,
        destination: String,
    },
    /// Copy on the remote host (or with -r a directory).
    Cp {
        #[command(flatten)]
        connect: ConnectArgs,
        #[arg(long, short = 'r')]
        recursive: bool,
        source: String,
        destination: String,
    },
    /// Print a remote path's type, size and times.
    Stat {
        #[command(flatten)]
        connect: ConnectArgs,
        remote: String,
    },
    /// Print changes under a remote path as they happen (`KIND PATH` lines) until interrupted.
    Watch {
        #[command(flatten)]
        connect: ConnectArgs,
        /// The whole subtree of a directory.
        #[arg(long, short = 'r')]
        recursive: bool,
        remote: String,
    },
}

pub(super) async fn run(command: FsCommand) -> anyhow::Result<u8> {
    match command {
        FsCommand::Get {
            connect,
            copy,
            remote,
            local,
        } => copy::get(&connect.connect().await?, &copy, &remote, &local).await?,
        FsCommand::Put {
            connect,
            copy,
            local,
            remote,
        } => copy::put(&connect.connect().await?, &copy, &local, &remote).await?,
        FsCommand::Ls { connect, remote } => ls(&connect.connect().await?, &remote).await?,
        FsCommand::Rm {
            connect,
            recursive,
            force,
            remote,
        } => {
            let params = RemoveParams {
                path: path_uri(&remote)?,
                recursive: Some(recursive),
                force: Some(force),
                follow_symlinks: None,
                sandbox: None,
            };
            let client = connect.connect().await?;
            client.send::<methods::FsRemove>(&params).await?;
        }
        FsCommand::Mv {
            connect,
            force,
            source,
            destination,
        } => {
            let params = RenameParams {
                source_path: path_uri(&source)?,
                destination_path: path_uri(&destination)?,
                overwrite: force,
                sandbox: None,
            };
            let client = connect.connect().await?;
            client.send::<methods::FsRename>(&params).await?;
        }
        FsCommand::Cp {
            connect,
            recursive,
            source,
            destination,
        } => {
            let params = CopyParams {
                source_path: path_uri(&source)?,
                destination_path: path_uri(&destination)?,
                recursive,
                sandbox: None,
            };
            let client = connect.connect().await?;
            client.send::<methods::FsCopy>(&params).await?;
        }
        FsCommand::Stat { connect, remote } => {
            let client = connect.connect().await?;
            print!("{}", stat(&client, &remote).await?);
        }
        FsCommand::Watch {
            connect,
            recursive,
            remote,
        } => watch(&connect.connect().await?, &remote, recursive).await?,
    }
    Ok(0)
}

async fn ls(client: &Client, remote: &str) -> anyhow::Result<()> {
    let mut entries = client.read_directory(&path_uri(remote)?).await?;
    entries.sort_by(|a, b| a.file_name.cmp(&b.file_name));
    let mut stdout = std::io::stdout().lock();
    for entry in entries {
        let suffix = if entry.is_directory { "/" } else { "" };
        writeln!(stdout, "{}{suffix}", entry.file_name)?;
    }
    Ok(())
}

/// `type: file`, `size: N`, `modified: RFC 3339`, ... one per line. A symlink's type is
/// `symlink` and its size and times its target's: the wire describes a link only through its
/// target (a no-follow `fs/getMetadata` refuses a link, as upstream).
async fn stat(client: &Client, remote: &str) -> anyhow::Result<String> {
    let params = GetMetadataParams {
        path: path_uri(remote)?,
        follow_symlinks: None,
        sandbox: None,
    };
    let metadata: Metadata = client.send::<methods::FsGetMetadata>(&params).await?;
    let kind = match (metadata.is_symlink, metadata.is_directory, metadata.is_file) {
        (true, _, _) => "symlink",
        (_, true, _) => "directory",
        (_, _, true) => "file",
        _ => "other",
    };
    let time = |ms: i64| {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
        humantime::format_rfc3339_millis(at).to_string()
    };
    Ok(format!(
        "type: {kind}\nsize: {}\nmodified: {}\ncreated: {}\n",
        metadata.size,
        time(metadata.modified_at_ms),
        time(metadata.created_at_ms)
    ))
}

async fn watch(client: &Client, remote: &str, recursive: bool) -> anyhow::Result<()> {
    let mut watch = client.watch(&path_uri(remote)?, recursive).await?;
    let mut stdout = std::io::stdout();
    while let Some(changed) = watch.next().await {
        if changed.events_dropped {
            eprintln!("exec-server: some changes were dropped by the daemon");
        }
        for change in changed.changes {
            let kind = serde_json::to_value(change.kind)?;
            let path = change.path.to_path().map_or_else(
                |_| change.path.as_str().to_owned(),
                |path| path.display().to_string(),
            );
            writeln!(stdout, "{} {path}", kind.as_str().unwrap_or("change"))?;
        }
        stdout.flush()?;
    }
    anyhow::bail!("the connection to the daemon ended")
}
