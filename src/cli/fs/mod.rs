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
    /// Copy a local file (or `-` for stdin) to the remote path, streamed block by block; the
    /// remote file is replaced only once the copy is complete.
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

pub(super) async fn run(command: FsCommand) -> anyhow::Result<()> {
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
            let client = connect.connect().await?;
            if local == Path::new("-") {
                let mut data = Vec::new();
                std::io::stdin().read_to_end(&mut data)?;
                client
                    .upload(&uri, data.len() as u64, |offset, block| {
                        let start = offset as usize;
                        block.copy_from_slice(&data[start..start + block.len()]);
                        Ok(())
                    })
                    .await?;
            } else {
                use std::os::unix::fs::FileExt as _;
                let file = std::fs::File::open(&local)
                    .map_err(|err| anyhow::anyhow!("cannot read {}: {err}", local.display()))?;
                let size = file.metadata()?.len();
                client
                    .upload(&uri, size, |offset, block| {
                        file.read_exact_at(block, offset)
                    })
                    .await?;
            }
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
