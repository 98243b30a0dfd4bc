//! `exec-server fs get|put|ls`: files on the daemon's host. Remote paths are absolute paths or
//! `file:` URIs; `-` as the local side means stdout (get) or stdin (put).

use super::ConnectArgs;
use exec_server_client::path_uri;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Subcommand)]
pub enum FsCommand {
    /// Copy a remote file here, streamed block by block.
    Get {
        #[command(flatten)]
        connect: ConnectArgs,
        remote: String,
        /// A file, a directory to put it in, or `-` for stdout.
        local: PathBuf,
    },
    /// Copy a local file (or `-` for stdin) to the remote path.
    Put {
        #[command(flatten)]
        connect: ConnectArgs,
        local: PathBuf,
        remote: String,
    },
    /// List a remote directory, sorted; directories end with `/`.
    Ls {
        #[command(flatten)]
        connect: ConnectArgs,
        remote: String,
    },
}

pub async fn run(command: FsCommand) -> anyhow::Result<()> {
    match command {
        FsCommand::Get {
            connect,
            remote,
            local,
        } => {
            let uri = path_uri(&remote)?;
            let client = connect.connect().await?;
            let reader = client.open(&uri).await?;
            let mut sink = local_sink(&local, &remote)?;
            reader.read_all(|block| sink.write_all(block)).await?;
            sink.flush()?;
            reader.close().await?;
        }
        FsCommand::Put {
            connect,
            local,
            remote,
        } => {
            let uri = path_uri(&remote)?;
            let mut data = Vec::new();
            if local == Path::new("-") {
                std::io::stdin().read_to_end(&mut data)?;
            } else {
                data = std::fs::read(&local)
                    .map_err(|err| anyhow::anyhow!("cannot read {}: {err}", local.display()))?;
            }
            let client = connect.connect().await?;
            client.write_file(&uri, data).await?;
        }
        FsCommand::Ls { connect, remote } => {
            let uri = path_uri(&remote)?;
            let client = connect.connect().await?;
            let mut entries = client.read_directory(&uri).await?;
            entries.sort_by(|a, b| a.file_name.cmp(&b.file_name));
            let mut stdout = std::io::stdout().lock();
            for entry in entries {
                let suffix = if entry.is_directory { "/" } else { "" };
                writeln!(stdout, "{}{suffix}", entry.file_name)?;
            }
        }
    }
    Ok(())
}

fn local_sink(local: &Path, remote: &str) -> anyhow::Result<Box<dyn std::io::Write>> {
    if local == Path::new("-") {
        return Ok(Box::new(std::io::stdout().lock()));
    }
    let target = if local.is_dir() {
        let name = remote
            .rsplit('/')
            .next()
            .filter(|name| !name.is_empty())
            .ok_or_else(|| anyhow::anyhow!("`{remote}` names no file"))?;
        local.join(name)
    } else {
        local.to_path_buf()
    };
    let file = std::fs::File::create(&target)
        .map_err(|err| anyhow::anyhow!("cannot create {}: {err}", target.display()))?;
    Ok(Box::new(std::io::BufWriter::with_capacity(1 << 20, file)))
}
