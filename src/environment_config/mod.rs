//! `environmentConfig/read`: this host's codex configuration and requirements layers, read as
//! codex's exec-server reads them (`codex-rs/exec-server/src/environment_config.rs` over
//! `codex-rs/config/src/loader/local.rs`) and cut down to the key paths the client asked for.
//! The layers stay raw (no relative paths resolved, no merge): merging and policy are the
//! client's. codex's agent asks for `mcp_servers` at startup, to run the executor's own HTTP
//! MCP servers.
//!
//! Config layers, lowest precedence first: `/etc/codex/config.toml`, `$CODEX_HOME/config.toml`,
//! then each trusted `.codex/config.toml` from the project root down to `cwd` (`project`).
//! Requirements: `/etc/codex/requirements.toml`.

mod project;
mod selection;

use crate::rpc::RpcError;
use exec_server_protocol::environment_config::*;
use exec_server_protocol::PathUri;
use std::io::{self, Read as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use toml::{Table, Value};

const CONFIG_FILE: &str = "config.toml";
const SYSTEM_CONFIG: &str = "/etc/codex/config.toml";
const SYSTEM_REQUIREMENTS: &str = "/etc/codex/requirements.toml";
/// Beyond codex, which reads any size: a configuration file larger than this is refused, so a
/// read cannot hold the daemon's memory (the reply itself is bounded by the selection).
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// One TOML source and the directory its relative paths are taken from.
struct Layer {
    source: String,
    base_dir: PathBuf,
    toml: Table,
}

struct Stack {
    layers: Vec<Layer>,
    cloud_insertion_index: usize,
}

pub(crate) async fn read(
    params: EnvironmentConfigReadParams,
) -> Result<EnvironmentConfigReadResponse, RpcError> {
    validate(&params)?;
    let cwd = params
        .cwd
        .to_path()
        .map_err(|err| RpcError::invalid_params(err.to_string()))?;
    tokio::task::spawn_blocking(move || read_blocking(&params, &cwd))
        .await
        .map_err(|err| RpcError::internal(err.to_string()))?
}

/// Whole-document reads are not part of the method: every path names at least one key.
fn validate(params: &EnvironmentConfigReadParams) -> Result<(), RpcError> {
    if params.config_paths.is_empty() && params.requirements_paths.is_empty() {
        return Err(RpcError::invalid_params(
            "at least one config or requirements path is required",
        ));
    }
    let paths = params.config_paths.iter().chain(&params.requirements_paths);
    if paths.clone().any(Vec::is_empty) {
        return Err(RpcError::invalid_params(
            "TOML paths must contain at least one key segment",
        ));
    }
    Ok(())
}

fn read_blocking(
    params: &EnvironmentConfigReadParams,
    cwd: &Path,
) -> Result<EnvironmentConfigReadResponse, RpcError> {
    let codex_home = codex_home()
        .map_err(|err| RpcError::internal(format!("failed to find Codex home: {err}")))?;
    let (config, requirements) = load(&codex_home, cwd).map_err(|err| {
        RpcError::internal(format!("failed to load executor-local config: {err}"))
    })?;
    Ok(EnvironmentConfigReadResponse {
        user_home_dir: home_dir().and_then(|home| PathUri::from_path(&home).ok()),
        codex_home_dir: PathUri::from_path(&codex_home)
            .map_err(|err| RpcError::internal(err.to_string()))?,
        hostname: hostname(),
        config: serialize(selection::select(config, &params.config_paths))?,
        requirements: serialize(selection::select(requirements, &params.requirements_paths))?,
    })
}

fn load(codex_home: &Path, cwd: &Path) -> io::Result<(Stack, Stack)> {
    let system_file = Path::new(SYSTEM_CONFIG);
    let system = read_toml(system_file)?.unwrap_or_default();
    let user_file = codex_home.join(CONFIG_FILE);
    let user = read_toml(&user_file)?.unwrap_or_default();
    // The project's root markers and trust come from the system and user layers together.
    let mut discovery = system.clone();
    merge(&mut discovery, &user);
    let mut layers = vec![
        file_layer("system", system_file, system),
        file_layer("user", &user_file, user),
    ];
    layers.extend(project::layers(&discovery, cwd, codex_home)?);
    let requirements_file = Path::new(SYSTEM_REQUIREMENTS);
    let requirements: Vec<Layer> = read_toml(requirements_file)?
        .map(|toml| Layer {
            source: requirements_file.display().to_string(),
            base_dir: parent(requirements_file),
            toml,
        })
        .into_iter()
        .collect();
    let config = Stack {
        layers,
        // Cloud layers go right after the system layer.
        cloud_insertion_index: 1,
    };
    let requirements = Stack {
        cloud_insertion_index: requirements.len(),
        layers: requirements,
    };
    Ok((config, requirements))
}

fn file_layer(kind: &str, file: &Path, toml: Table) -> Layer {
    Layer {
        source: format!("{kind} ({})", file.display()),
        base_dir: parent(file),
        toml,
    }
}

fn parent(file: &Path) -> PathBuf {
    file.parent().unwrap_or(Path::new("/")).to_path_buf()
}

/// The file's table, `None` when it does not exist.
fn read_toml(file: &Path) -> io::Result<Option<Table>> {
    let Some(text) = read_text(file)? else {
        return Ok(None);
    };
    toml::from_str(&text).map(Some).map_err(|err| {
        // codex's form: `<file>:<line>:<column>: <message>`, 1-based.
        let at = err.span().map_or(0, |span| span.start);
        let before = &text[..at.min(text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}:{line}:{column}: {}", file.display(), err.message()),
        )
    })
}

/// A regular file's text, `None` when it does not exist. Opened without blocking, so a FIFO
/// named `config.toml` cannot hold the read, and refused past [`MAX_FILE_BYTES`].
fn read_text(file: &Path) -> io::Result<Option<String>> {
    let failed = |err: io::Error| {
        io::Error::new(
            err.kind(),
            format!("Failed to read config file {}: {err}", file.display()),
        )
    };
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(file);
    let opened = match opened {
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        other => other.map_err(failed)?,
    };
    let metadata = opened.metadata().map_err(failed)?;
    if !metadata.is_file() {
        return Err(failed(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        )));
    }
    if metadata.len() > MAX_FILE_BYTES {
        return Err(failed(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {MAX_FILE_BYTES} bytes"),
        )));
    }
    let mut text = String::new();
    opened
        .take(MAX_FILE_BYTES)
        .read_to_string(&mut text)
        .map_err(failed)?;
    Ok(Some(text))
}

/// codex's layer merge: tables merge key by key, anything else replaces.
fn merge(base: &mut Table, overlay: &Table) {
    for (key, value) in overlay {
        match (base.get_mut(key), value) {
            (Some(Value::Table(base)), Value::Table(overlay)) => merge(base, overlay),
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

/// `CODEX_HOME` when set (it must name an existing directory), else `~/.codex`.
pub(crate) fn codex_home() -> io::Result<PathBuf> {
    match std::env::var_os("CODEX_HOME").filter(|value| !value.is_empty()) {
        Some(value) => {
            let path = PathBuf::from(&value);
            let canonical = std::fs::canonicalize(&path).map_err(|err| {
                io::Error::new(
                    err.kind(),
                    format!("CODEX_HOME points to {path:?}, but that path does not exist"),
                )
            })?;
            if !canonical.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("CODEX_HOME points to {path:?}, but that path is not a directory"),
                ));
            }
            Ok(canonical)
        }
        None => home_dir().map(|home| home.join(".codex")).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "Could not find home directory")
        }),
    }
}

fn home_dir() -> Option<PathBuf> {
    std::env::home_dir().filter(|home| home.is_absolute())
}

fn hostname() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(name.trim().to_owned()).filter(|name| !name.is_empty())
}

fn serialize(stack: Stack) -> Result<EnvironmentConfigLayerStack, RpcError> {
    let layers = stack
        .layers
        .into_iter()
        .map(|layer| {
            let toml = toml::to_string(&layer.toml).map_err(|err| {
                RpcError::internal(format!("failed to serialize executor-local config: {err}"))
            })?;
            Ok(EnvironmentConfigLayer {
                source: layer.source,
                base_dir: PathUri::from_path(&layer.base_dir)
                    .map_err(|err| RpcError::internal(err.to_string()))?,
                toml,
            })
        })
        .collect::<Result<_, RpcError>>()?;
    Ok(EnvironmentConfigLayerStack {
        layers,
        cloud_insertion_index: stack.cloud_insertion_index,
    })
}
