//! envd's users: `Authorization: Basic base64("<user>:")` on RPCs and `username=` on
//! `/files` name the account a command runs as and files are written as. Default: root, as
//! envd's; a daemon not running as root serves only its own account.

use super::connect::{Code, ConnectError};
use axum::http::HeaderMap;
use nix::unistd::{Gid, Uid, User};
use std::collections::HashMap;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// An account of this host, resolved.
#[derive(Clone, Debug)]
pub(crate) struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Its supplementary groups, its primary group first.
    pub groups: Vec<u32>,
    pub home: PathBuf,
}

impl Account {
    /// Whether commands and files of this account need credentials other than the daemon's.
    pub(crate) fn is_other(&self) -> bool {
        self.uid != nix::unistd::geteuid().as_raw()
    }

    /// `path` as envd resolves it for this account: `~` and relative paths from its home.
    pub(crate) fn resolve(&self, path: &str) -> PathBuf {
        let expanded = match path.strip_prefix('~') {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                self.home.join(rest.trim_start_matches('/'))
            }
            _ => PathBuf::from(path),
        };
        let absolute = if expanded.is_absolute() {
            expanded
        } else {
            self.home.join(expanded)
        };
        clean(&absolute)
    }
}

/// `path` without `.` and `..` components (lexically, as Go's filepath.Clean).
fn clean(path: &std::path::Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The user an RPC names in its `Authorization: Basic` header, if any.
fn basic_user(headers: &HeaderMap) -> Result<Option<String>, ConnectError> {
    use base64::Engine as _;
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let bad = || ConnectError::new(Code::Unauthenticated, "invalid Authorization header");
    let value = value.to_str().map_err(|_| bad())?;
    let encoded = value.strip_prefix("Basic ").ok_or_else(bad)?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| bad())?;
    let text = String::from_utf8(decoded).map_err(|_| bad())?;
    let user = text.split(':').next().unwrap_or("");
    Ok((!user.is_empty()).then(|| user.to_owned()))
}

/// How long a resolved account is used again without asking NSS: a lookup of the user and its
/// groups takes ~150 µs here (NSS's systemd module), a third of an exec round trip.
const ACCOUNT_TTL: Duration = Duration::from_secs(2);

/// Accounts resolved in the last [`ACCOUNT_TTL`], by the name asked for (None: the default).
/// Only found accounts are kept: a user made a moment ago is found at its first use.
#[derive(Default)]
pub(crate) struct Accounts {
    recent: Mutex<HashMap<Option<String>, (Instant, Account)>>,
}

impl Accounts {
    /// The account the request's `Authorization: Basic` header names (see [`lookup`]).
    pub(crate) fn of_request(&self, headers: &HeaderMap) -> Result<Account, ConnectError> {
        self.lookup(basic_user(headers)?.as_deref())
    }

    /// [`lookup`], from the recent ones when it is there.
    pub(crate) fn lookup(&self, name: Option<&str>) -> Result<Account, ConnectError> {
        let key = name.map(str::to_owned);
        if let Some((at, account)) = self.recent.lock().unwrap().get(&key) {
            if at.elapsed() < ACCOUNT_TTL {
                return Ok(account.clone());
            }
        }
        let account = lookup(name)?;
        let mut recent = self.recent.lock().unwrap();
        recent.retain(|_, (at, _)| at.elapsed() < ACCOUNT_TTL);
        recent.insert(key, (Instant::now(), account.clone()));
        Ok(account)
    }
}

/// The account `name` names (None: the default, root, or the daemon's own when it is not
/// root). A daemon not running as root refuses any account but its own.
fn lookup(name: Option<&str>) -> Result<Account, ConnectError> {
    let own = nix::unistd::geteuid();
    let user = match name {
        Some(name) => User::from_name(name)
            .map_err(|err| {
                ConnectError::new(
                    Code::Internal,
                    format!("error looking up user '{name}': {err}"),
                )
            })?
            .ok_or_else(|| {
                ConnectError::new(
                    Code::Unauthenticated,
                    format!("error looking up user '{name}': user: unknown user {name}"),
                )
            })?,
        None => {
            let default = if own.is_root() { Uid::from_raw(0) } else { own };
            User::from_uid(default)
                .ok()
                .flatten()
                .ok_or_else(|| ConnectError::new(Code::Internal, "the daemon's user is unknown"))?
        }
    };
    if !own.is_root() && user.uid != own {
        return Err(ConnectError::new(
            Code::PermissionDenied,
            format!(
                "this daemon runs as uid {own} and cannot act as user '{}'",
                user.name
            ),
        ));
    }
    let mut groups = vec![user.gid.as_raw()];
    if let Ok(name) = CString::new(user.name.clone()) {
        if let Ok(list) = nix::unistd::getgrouplist(&name, user.gid) {
            groups.extend(list.iter().map(|gid: &Gid| gid.as_raw()));
        }
    }
    groups.dedup();
    Ok(Account {
        name: user.name,
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        groups,
        home: user.dir,
    })
}

/// The name of user `uid`, or the number.
pub(crate) fn user_name(uid: u32) -> String {
    match User::from_uid(Uid::from_raw(uid)) {
        Ok(Some(user)) => user.name,
        _ => uid.to_string(),
    }
}

/// The name of group `gid`, or the number.
pub(crate) fn group_name(gid: u32) -> String {
    match nix::unistd::Group::from_gid(Gid::from_raw(gid)) {
        Ok(Some(group)) => group.name,
        _ => gid.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_from_the_home_as_envd_does() {
        let account = Account {
            name: "u".into(),
            uid: 1,
            gid: 1,
            groups: vec![1],
            home: "/home/u".into(),
        };
        assert_eq!(account.resolve("a/b"), PathBuf::from("/home/u/a/b"));
        assert_eq!(account.resolve("~/x"), PathBuf::from("/home/u/x"));
        assert_eq!(account.resolve(""), PathBuf::from("/home/u"));
        assert_eq!(account.resolve("/tmp/../etc/./x"), PathBuf::from("/etc/x"));
    }
}
