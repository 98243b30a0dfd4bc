//! `fs get` and `fs put`: files and (with -r) directory trees between here and the daemon's
//! host, with a progress bar on a terminal, and `--resume` to finish a copy that stopped by
//! sending only the bytes past what the target already holds.

use exec_server_client::fs::Metadata;
use exec_server_client::path_uri;
use exec_server_client::protocol::fs::CreateDirectoryParams;
use exec_server_client::protocol::methods;
use exec_server_client::protocol::PathUri;
use exec_server_client::Client;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal as _, Read as _, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::Path;

#[derive(Debug, clap::Args)]
pub struct CopyFlags {
    /// Copy a directory and everything in it.
    #[arg(long, short = 'r')]
    recursive: bool,
    /// Finish an interrupted copy: a target file shorter than its source gets only the rest
    /// (appended), one of the same size is skipped.
    #[arg(long)]
    resume: bool,
    /// No progress bar, even on a terminal.
    #[arg(long, short = 'q')]
    quiet: bool,
}

/// One bar for the whole copy, its length growing as files are found; hidden unless stderr
/// is a terminal.
fn progress(flags: &CopyFlags) -> ProgressBar {
    if flags.quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{wide_msg} {bytes}/{total_bytes} {binary_bytes_per_sec} {bar:30} {eta}",
        )
        .expect("the template is valid"),
    );
    bar
}

/// The name a copy takes inside an existing directory: the source's last component.
fn base_name(path: &str) -> anyhow::Result<&str> {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|name| !name.is_empty())
        .ok_or_else(|| anyhow::anyhow!("`{path}` names no file"))
}

pub(super) async fn get(
    client: &Client,
    flags: &CopyFlags,
    remote: &str,
    local: &Path,
) -> anyhow::Result<()> {
    let source = path_uri(remote)?;
    let metadata = client.metadata(&source).await?;
    anyhow::ensure!(
        !metadata.is_directory || (flags.recursive && local != Path::new("-")),
        "{remote} is a directory (use -r, and a local directory)"
    );
    if local == Path::new("-") {
        let reader = client.open(&source).await?;
        let mut stdout = std::io::stdout().lock();
        reader.read_all(|block| stdout.write_all(block)).await?;
        stdout.flush()?;
        return Ok(reader.close().await?);
    }
    // As cp: into an existing directory, under the source's name.
    let target = match local.is_dir() {
        true => local.join(base_name(remote)?),
        false => local.to_path_buf(),
    };
    let bar = progress(flags);
    if metadata.is_directory {
        get_tree(client, flags, &bar, &source, &target).await?;
    } else {
        get_file(client, flags, &bar, &source, &metadata, &target).await?;
    }
    bar.finish_and_clear();
    Ok(())
}

/// Directories first, then their contents, depth first (no recursion in async code).
async fn get_tree(
    client: &Client,
    flags: &CopyFlags,
    bar: &ProgressBar,
    source: &PathUri,
    target: &Path,
) -> anyhow::Result<()> {
    let mut pending = vec![(source.clone(), target.to_path_buf())];
    while let Some((dir, local)) = pending.pop() {
        std::fs::create_dir_all(&local)
            .map_err(|err| anyhow::anyhow!("cannot create {}: {err}", local.display()))?;
        for entry in client.read_directory(&dir).await? {
            let path = PathUri::from_path(&dir.to_path()?.join(&entry.file_name))?;
            let local = local.join(&entry.file_name);
            if entry.is_directory {
                pending.push((path, local));
            } else if entry.is_file {
                let metadata = client.metadata(&path).await?;
                get_file(client, flags, bar, &path, &metadata, &local).await?;
            } else {
                eprintln!("exec-server: skipped {} (not a file)", path.as_str());
            }
        }
    }
    Ok(())
}

async fn get_file(
    client: &Client,
    flags: &CopyFlags,
    bar: &ProgressBar,
    source: &PathUri,
    metadata: &Metadata,
    target: &Path,
) -> anyhow::Result<()> {
    let have = match flags.resume {
        true => std::fs::metadata(target).map_or(0, |local| local.len()),
        false => 0,
    };
    bar.inc_length(metadata.size.saturating_sub(have));
    bar.set_message(target.display().to_string());
    if flags.resume && have >= metadata.size {
        return Ok(());
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(have == 0)
        .append(have > 0)
        .open(target)
        .map_err(|err| anyhow::anyhow!("cannot create {}: {err}", target.display()))?;
    let mut sink = std::io::BufWriter::with_capacity(1 << 20, file);
    let reader = client.open(source).await?;
    reader
        .read_from(have, |block| {
            bar.inc(block.len() as u64);
            sink.write_all(block)
        })
        .await?;
    sink.flush()?;
    Ok(reader.close().await?)
}

pub(super) async fn put(
    client: &Client,
    flags: &CopyFlags,
    local: &Path,
    remote: &str,
) -> anyhow::Result<()> {
    let mut target = path_uri(remote)?;
    if local == Path::new("-") {
        let mut data = Vec::new();
        std::io::stdin().read_to_end(&mut data)?;
        return Ok(client
            .upload(&target, data.len() as u64, |offset, block| {
                let start = offset as usize;
                block.copy_from_slice(&data[start..start + block.len()]);
                Ok(())
            })
            .await?);
    }
    // As cp: into an existing directory, under the source's name.
    if client.metadata(&target).await.is_ok_and(|m| m.is_directory) {
        let name = base_name(local.to_str().unwrap_or_default())?;
        target = PathUri::from_path(&target.to_path()?.join(name))?;
    }
    let bar = progress(flags);
    if local.is_dir() {
        anyhow::ensure!(
            flags.recursive,
            "{} is a directory (use -r)",
            local.display()
        );
        put_tree(client, flags, &bar, local, &target).await?;
    } else {
        put_file(client, flags, &bar, local, &target).await?;
    }
    bar.finish_and_clear();
    Ok(())
}

async fn put_tree(
    client: &Client,
    flags: &CopyFlags,
    bar: &ProgressBar,
    local: &Path,
    target: &PathUri,
) -> anyhow::Result<()> {
    let mut pending = vec![(local.to_path_buf(), target.clone())];
    while let Some((dir, remote)) = pending.pop() {
        let params = CreateDirectoryParams {
            path: remote.clone(),
            recursive: Some(true),
            follow_symlinks: None,
            sandbox: None,
        };
        client.send::<methods::FsCreateDirectory>(&params).await?;
        let entries = std::fs::read_dir(&dir)
            .map_err(|err| anyhow::anyhow!("cannot read {}: {err}", dir.display()))?;
        for entry in entries {
            let entry = entry?;
            let remote = PathUri::from_path(&remote.to_path()?.join(entry.file_name()))?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                pending.push((entry.path(), remote));
            } else if kind.is_file() {
                put_file(client, flags, bar, &entry.path(), &remote).await?;
            } else {
                eprintln!(
                    "exec-server: skipped {} (not a file)",
                    entry.path().display()
                );
            }
        }
    }
    Ok(())
}

async fn put_file(
    client: &Client,
    flags: &CopyFlags,
    bar: &ProgressBar,
    local: &Path,
    target: &PathUri,
) -> anyhow::Result<()> {
    let file = std::fs::File::open(local)
        .map_err(|err| anyhow::anyhow!("cannot read {}: {err}", local.display()))?;
    let size = file.metadata()?.len();
    // A target longer than the source is not a copy that stopped: it is copied anew.
    let have = match flags.resume {
        true => client.metadata(target).await.map_or(0, |m| m.size),
        false => 0,
    };
    let have = if have > size { 0 } else { have };
    bar.inc_length(size.saturating_sub(have));
    bar.set_message(local.display().to_string());
    let read_block = |offset, block: &mut [u8]| {
        bar.inc(block.len() as u64);
        file.read_exact_at(block, offset)
    };
    if have == 0 {
        client.upload(target, size, read_block).await?;
    } else if have < size {
        client.append(target, have..size, read_block).await?;
    }
    Ok(())
}
