//! Where discoverV2 looks, as codex's exec-server resolves it: each installed plugin of
//! `$CODEX_HOME/plugins/cache/<marketplace>/<plugin>/` at its active version, then the
//! standalone skill roots `$CODEX_HOME/skills` and `~/.agents/skills`. Only names are listed
//! here, on the host (a location says where to look, it grants nothing); every file is read
//! later through the request's sandbox.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::io::{self, Read as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

const PLUGINS_CACHE: &str = "plugins/cache";
/// The version a plugin installed from a local directory has; it wins over any other.
const LOCAL_VERSION: &str = "local";
const REMOTE_INSTALL_METADATA: &str = ".codex-remote-plugin-install.json";
const MAX_REMOTE_INSTALL_METADATA_BYTES: u64 = 16 * 1024;
const MAX_REMOTE_PLUGIN_ID_BYTES: usize = 1024;
const MAX_LOCATIONS: usize = 512;
const MAX_LOCATION_WARNINGS: usize = 64;

pub(super) struct Location {
    pub root: PathBuf,
    pub kind: Kind,
}

pub(super) enum Kind {
    Plugin(InstalledPlugin),
    /// A standalone skill root, by its wire id.
    Skills(&'static str),
}

pub(super) struct InstalledPlugin {
    /// `<plugin>@<marketplace>`.
    pub id: String,
    pub version: String,
    pub remote_plugin_id: Option<String>,
}

#[derive(Default)]
pub(super) struct Locations {
    pub locations: Vec<Location>,
    /// Why a location may be missing or incomplete.
    pub warnings: Vec<String>,
}

/// The locations under `codex_home` and `user_home`, in codex's order: plugins by id, then
/// the skill roots. Err: the cache could not be listed, or a root inspected, so the answer
/// would be incomplete (codex fails the call then).
pub(super) fn resolve(
    codex_home: Option<&Path>,
    user_home: Option<&Path>,
) -> io::Result<Locations> {
    let skill_roots = [
        codex_home.map(|home| (home.join("skills"), "codex-home-skills")),
        user_home.map(|home| (home.join(".agents/skills"), "user-agent-skills")),
    ];
    let mut found = Locations::default();
    if let Some(cache) = codex_home.map(|home| home.join(PLUGINS_CACHE)) {
        if is_directory(&cache)? {
            installed_plugins(&cache, &mut found)?;
        }
    }
    let mut seen = Vec::new();
    for (root, id) in skill_roots.into_iter().flatten() {
        if !seen.contains(&root) && is_directory(&root)? {
            seen.push(root.clone());
            let kind = Kind::Skills(id);
            found.locations.push(Location { root, kind });
        }
    }
    if found.locations.len() > MAX_LOCATIONS {
        found.warnings.truncate(MAX_LOCATION_WARNINGS - 1);
        found.warnings.push(format!(
            "capability discovery reached its {MAX_LOCATIONS}-location limit"
        ));
        found.locations.truncate(MAX_LOCATIONS);
    }
    found.warnings.truncate(MAX_LOCATION_WARNINGS);
    Ok(found)
}

/// Whether `path` is a directory (links followed); a missing one is not an error.
fn is_directory(path: &Path) -> io::Result<bool> {
    match std::fs::metadata(path) {
        Ok(meta) => Ok(meta.is_dir()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err),
    }
}

/// Each `<marketplace>/<plugin>` directory of the cache with a version to use.
fn installed_plugins(cache: &Path, found: &mut Locations) -> io::Result<()> {
    let mut packages = BTreeMap::new();
    for marketplace in listed(cache)? {
        // Listed whatever its name, as codex's one walk of the cache two levels deep.
        let packages_of = listed(&marketplace)?;
        let Some(market) = segment(&marketplace, false) else {
            continue;
        };
        for package in packages_of {
            if let Some(name) = segment(&package, true) {
                packages.insert(format!("{name}@{market}"), package);
            }
        }
    }
    let mut plugins = 0;
    for (id, package) in packages {
        let Some(version) = active_version(&package) else {
            continue;
        };
        if plugins == MAX_LOCATIONS {
            found.warnings.push(format!(
                "plugin cache reached its {MAX_LOCATIONS}-location limit"
            ));
            break;
        }
        plugins += 1;
        let remote_plugin_id = match remote_plugin_id(&package.join(REMOTE_INSTALL_METADATA)) {
            Ok(remote) => remote,
            Err(err) => {
                found.warnings.push(format!(
                    "could not read remote installation metadata for {id}: {err}"
                ));
                None
            }
        };
        found.locations.push(Location {
            root: package.join(&version),
            kind: Kind::Plugin(InstalledPlugin {
                id,
                version,
                remote_plugin_id,
            }),
        });
    }
    Ok(())
}

/// The directories in `directory`, links followed; a failure is codex's, naming the path.
fn listed(directory: &Path) -> io::Result<Vec<PathBuf>> {
    let failed = |err: io::Error| {
        let uri = exec_server_protocol::PathUri::from_path(directory);
        let shown = uri.map_or_else(|_| directory.display().to_string(), |uri| uri.to_string());
        io::Error::other(format!("failed to scan plugin cache path {shown}: {err}"))
    };
    let mut found = Vec::new();
    for entry in std::fs::read_dir(directory).map_err(failed)? {
        let path = entry.map_err(failed)?.path();
        if std::fs::metadata(&path).is_ok_and(|meta| meta.is_dir()) {
            found.push(path);
        }
    }
    Ok(found)
}

/// The directory's name if it may be a marketplace's (letters, digits, `-`, `_`) or, with
/// `dots`, a plugin's (`.` too, but not first).
fn segment(path: &Path, dots: bool) -> Option<&str> {
    let name = path.file_name()?.to_str()?;
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_' || (dots && c == '.');
    (!name.starts_with('.') && name.chars().all(allowed)).then_some(name)
}

/// The version directory to use: `local` when present, else the greatest, in semver order
/// where both parse and by name otherwise. Links are not versions.
fn active_version(package: &Path) -> Option<String> {
    let mut versions: Vec<String> = std::fs::read_dir(package)
        .ok()?
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|version| is_version(version))
        .collect();
    if versions.iter().any(|version| version == LOCAL_VERSION) {
        return Some(LOCAL_VERSION.to_owned());
    }
    versions.sort_by(|a, b| compare_versions(a, b));
    versions.pop()
}

fn is_version(name: &str) -> bool {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+');
    !name.is_empty() && name != "." && name != ".." && name.chars().all(allowed)
}

fn compare_versions(a: &str, b: &str) -> Ordering {
    match (semver::Version::parse(a), semver::Version::parse(b)) {
        (Ok(a), Ok(b)) => a.cmp(&b),
        _ => a.cmp(b),
    }
}

#[derive(serde::Deserialize)]
struct RemoteInstall {
    schema_version: u8,
    remote_plugin_id: String,
}

/// The remote id recorded at install time, if the package has one.
fn remote_plugin_id(path: &Path) -> io::Result<Option<String>> {
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    // Non-blocking: opening a FIFO would wait for a writer.
    let open = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path);
    let file = match open {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    // A FIFO or device would block or never end.
    if !file.metadata()?.is_file() {
        return Err(invalid(
            "remote installation metadata is not a regular file".into(),
        ));
    }
    let mut contents = Vec::new();
    file.take(MAX_REMOTE_INSTALL_METADATA_BYTES + 1)
        .read_to_end(&mut contents)?;
    if contents.len() as u64 > MAX_REMOTE_INSTALL_METADATA_BYTES {
        return Err(invalid(
            "remote installation metadata exceeds its byte limit".into(),
        ));
    }
    let install: RemoteInstall = serde_json::from_slice(&contents).map_err(|err| {
        invalid(format!(
            "failed to parse remote plugin install metadata: {err}"
        ))
    })?;
    if install.schema_version != 1 {
        return Err(invalid(format!(
            "unsupported remote plugin install metadata schema version: {}",
            install.schema_version
        )));
    }
    let id = install.remote_plugin_id.trim();
    if id.is_empty() {
        return Err(invalid(
            "invalid remote plugin install metadata: remote plugin id must not be blank".into(),
        ));
    }
    if id.len() > MAX_REMOTE_PLUGIN_ID_BYTES {
        return Err(invalid("remote plugin ID exceeds its byte limit".into()));
    }
    Ok(Some(id.to_owned()))
}
