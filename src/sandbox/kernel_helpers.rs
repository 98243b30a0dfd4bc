//! The programs the kernel runs as root, outside every sandbox, when any process triggers them
//! (its module loader, a core dump handler, the uevent helper), as this host configures them:
//! what `super::guard` protects from every write grant, and why `super::root_write` refuses a
//! write grant on `/` outright.

use std::path::PathBuf;

/// What [`KERNEL_HELPERS`] calls `modprobe`.
pub(super) const MODULE_LOADER: &str = "the kernel's module loader";

/// The kernel's own helpers, each a program it runs as root with every capability when any
/// process, a sandboxed one included, triggers it: `modprobe` (an exec of a file of unknown
/// format, a socket of an unloaded family), a core dump piped to a program, the uevent helper.
/// (setting, what it names, whether it names a program only after a `|`).
const KERNEL_HELPERS: &[(&str, &str, bool)] = &[
    ("/proc/sys/kernel/modprobe", MODULE_LOADER, false),
    (
        "/proc/sys/kernel/core_pattern",
        "the kernel's core dump handler",
        true,
    ),
    (
        "/proc/sys/kernel/hotplug",
        "the kernel's uevent helper",
        false,
    ),
];

/// A helper's setting as read: what it names, whether piped, its text (None: no such setting).
type Setting = (&'static str, bool, Option<String>);

/// The program of each kernel helper configured on this host, from the settings' text.
fn helper_programs(settings: &[Setting]) -> Vec<(&'static str, PathBuf)> {
    let mut programs = Vec::new();
    for (what, piped, text) in settings {
        let text = text.as_deref().unwrap_or_default().trim();
        let program = match piped {
            true => text
                .strip_prefix('|')
                .and_then(|cmd| cmd.split_whitespace().next()),
            false => Some(text).filter(|text| !text.is_empty()),
        };
        programs.extend(program.map(|program| (*what, PathBuf::from(program))));
    }
    programs
}

/// The first kernel helper this host runs, if any: a root write would let a sandbox replace
/// it, or anything it loads (libraries, an interpreter and its modules, its configuration),
/// and have the kernel run that outside every sandbox. Which files a helper ends up loading
/// cannot be known, so such a host refuses the grant.
pub(super) fn first() -> Option<(&'static str, PathBuf)> {
    all().into_iter().next()
}

/// Every kernel helper this host runs, as [`first`] finds them.
pub(super) fn all() -> Vec<(&'static str, PathBuf)> {
    let settings: Vec<Setting> = KERNEL_HELPERS
        .iter()
        .map(|(file, what, piped)| (*what, *piped, std::fs::read_to_string(file).ok()))
        .collect();
    helper_programs(&settings)
}

/// What the module loader reads besides itself when the kernel runs it: its configuration
/// (whose `install` lines are commands) and the modules it loads into the kernel.
pub(super) const MODULE_LOADER_READS: &[&str] = &[
    "/etc/modprobe.d",
    "/run/modprobe.d",
    "/lib/modprobe.d",
    "/usr/lib/modprobe.d",
    "/lib/modules",
    "/usr/lib/modules",
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn kernel_helpers_are_read_from_their_settings() {
        let settings = |texts: [&str; 3]| {
            let read: Vec<Setting> = KERNEL_HELPERS
                .iter()
                .zip(texts)
                .map(|((_, what, piped), text)| (*what, *piped, Some(text.to_owned())))
                .collect();
            helper_programs(&read)
        };
        assert!(settings(["\n", "core\n", "\n"]).is_empty());
        let found = settings(["/sbin/modprobe\n", "|/usr/share/apport/apport -p%p\n", ""]);
        let programs: Vec<&Path> = found.iter().map(|(_, path)| path.as_path()).collect();
        assert_eq!(
            programs,
            [
                Path::new("/sbin/modprobe"),
                Path::new("/usr/share/apport/apport")
            ]
        );
        assert_eq!(found[1].0, "the kernel's core dump handler");
        assert!(helper_programs(&[("x", false, None)]).is_empty());
    }
}
