//! The shell side of a snapshot: what the capture runs in place of the command, and the
//! command line that restores the captured state before the command.

use std::collections::BTreeMap;

/// The shells whose state can be captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shell {
    Bash,
    Zsh,
    Sh,
}

impl Shell {
    pub(crate) fn named(name: &str) -> Option<Self> {
        match name {
            "bash" => Some(Self::Bash),
            "zsh" => Some(Self::Zsh),
            "sh" => Some(Self::Sh),
            _ => None,
        }
    }
}

/// Where the captured state starts: whatever the profile printed before it is dropped.
pub(crate) const STATE_MARKER: &str = "# Snapshot file";

/// The environment variables carrying the state, numbered from 0.
const STATE_VARIABLE: &str = "__CODEX_SHELL_SNAPSHOT_STATE_";

/// Each state variable's value at most: one argument or variable is limited to 128 KiB on
/// Linux (MAX_ARG_STRLEN).
const STATE_CHUNK_BYTES: usize = 60 * 1024;

/// What the capture runs as the login shell's command (`-lc`): the interactive profile, then
/// the state (functions, options, zsh's aliases) as shell text after [`STATE_MARKER`], a NUL,
/// and the exported environment NUL-separated, which the daemon filters itself.
pub(crate) fn capture(shell: Shell) -> String {
    let state = match shell {
        Shell::Bash => concat!(
            "if [ -z \"$BASH_ENV\" ] && [ -r \"$HOME/.bashrc\" ]; then . \"$HOME/.bashrc\"; fi\n",
            "echo '# Snapshot file'\n",
            // Aliases are not kept: a non-interactive bash does not expand them.
            "unalias -a 2>/dev/null || true\n",
            "declare -f\n",
            "set -o | awk '$2 == \"on\" { print \"set -o \" $1 }'\n",
        ),
        Shell::Zsh => concat!(
            "zrc=\"${ZDOTDIR:-$HOME}/.zshrc\"\n",
            "[[ -r \"$zrc\" ]] && . \"$zrc\"\n",
            "print '# Snapshot file'\n",
            "print 'unalias -a 2>/dev/null || true'\n",
            "functions\n",
            "setopt | sed 's/^/setopt /'\n",
            "alias -L\n",
        ),
        Shell::Sh => concat!(
            "if [ -n \"$ENV\" ] && [ -r \"$ENV\" ]; then . \"$ENV\"; fi\n",
            "echo '# Snapshot file'\n",
            "unalias -a 2>/dev/null || true\n",
            "if command -v typeset >/dev/null 2>&1; then typeset -f; ",
            "elif command -v declare >/dev/null 2>&1; then declare -f; fi\n",
            "if set -o >/dev/null 2>&1; then ",
            "set -o | awk '$2 == \"on\" { print \"set -o \" $1 }'; fi\n",
        ),
    };
    format!("{state}printf '\\0'\n/usr/bin/env -0\n")
}

/// The shell's flag and the script's first lines for a restore: no startup file may run
/// before the state is restored (it could export again what the snapshot filtered out).
fn restore_prelude(shell: Shell) -> (&'static str, &'static str) {
    match shell {
        // Privileged mode reads no BASH_ENV and imports no functions; it is left at once.
        Shell::Bash => ("-pc", "set +o privileged\n"),
        Shell::Zsh => ("-fc", "setopt RCS\n"),
        // A line of its own all the same, so the command is the third line in every shell.
        Shell::Sh => ("-c", ":\n"),
    }
}

/// The arguments after the shell's path that restore `state` and run `command`, and the
/// variables that carry `state` into the shell; the restore unsets them first, so the command
/// never sees them. The command is the script's third line, as in codex's server (line numbers
/// in its errors match).
pub(crate) fn restore(
    shell: Shell,
    state: &str,
    command: &str,
) -> ([String; 2], BTreeMap<String, String>) {
    let mut carriers = BTreeMap::new();
    let mut rest = state;
    while !rest.is_empty() {
        let mut end = rest.len().min(STATE_CHUNK_BYTES);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (chunk, after) = rest.split_at(end);
        carriers.insert(
            format!("{STATE_VARIABLE}{}", carriers.len()),
            chunk.to_owned(),
        );
        rest = after;
    }
    let names: Vec<&str> = carriers.keys().map(String::as_str).collect();
    let expansions: String = names.iter().map(|name| format!("${{{name}}}")).collect();
    let (flag, prelude) = restore_prelude(shell);
    let script = format!(
        "{prelude}if ! eval \"unset {names}; {expansions}\" >/dev/null; then \
         printf 'failed to restore shell snapshot\\n' >&2; fi\n{command}",
        names = names.join(" "),
    );
    ([flag.to_owned(), script], carriers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_state_is_split_at_character_boundaries() {
        let state = "é".repeat(STATE_CHUNK_BYTES);
        let (args, carriers) = restore(Shell::Bash, &state, "true");
        assert_eq!(carriers.len(), 2);
        assert!(carriers
            .values()
            .all(|chunk| chunk.len() <= STATE_CHUNK_BYTES));
        assert_eq!(carriers.values().cloned().collect::<String>(), state);
        assert_eq!(args[0], "-pc");
        assert!(args[1].contains(&format!(
            "unset {STATE_VARIABLE}0 {STATE_VARIABLE}1; ${{{STATE_VARIABLE}0}}${{{STATE_VARIABLE}1}}"
        )));
        assert!(args[1].ends_with("\ntrue"));
    }
}
