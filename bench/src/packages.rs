//! Baseline programs the bench installs from the distribution when they are missing.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Once;

pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|path| path.exists())
    })
}

/// Installs `packages` with apt-get (as root) unless `present`; Err says why they are still
/// missing. The package lists are refreshed once per run: a fresh container has none.
pub fn ensure(packages: &[&str], present: impl Fn() -> bool) -> Result<(), String> {
    if present() {
        return Ok(());
    }
    static UPDATE: Once = Once::new();
    let apt_get = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    eprintln!("bench: installing {} for a baseline", packages.join(" "));
    UPDATE.call_once(|| {
        apt_get(&["update", "-qq"]);
    });
    apt_get(&[&["install", "-y", "-qq"], packages].concat());
    if present() {
        Ok(())
    } else {
        Err(format!(
            "{} missing and `apt-get install` failed",
            packages.join(" ")
        ))
    }
}
