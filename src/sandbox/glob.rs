//! Expansion of `glob_pattern` entries into the paths that exist when the process starts.
//!
//! Supported syntax, per path component: `*` (any run, including dotfiles), `?`, `[abc]`,
//! `[a-z]`, `[!abc]`, `\x` (a literal `x`), and a whole component `**` (zero or more
//! directories). The walk starts at the pattern's literal prefix, never follows symbolic links,
//! descends at most `max_depth` directories below that prefix and visits at most
//! [`MAX_VISITED`] entries; hitting either bound fails the request rather than granting or
//! denying a partial set. Paths created after the start are not covered (documented).

use std::path::{Component, Path, PathBuf};

/// Directory entries a single pattern may visit before the request fails closed.
pub(super) const MAX_VISITED: usize = 100_000;

/// Depth used when the profile gives no `glob_scan_max_depth`.
pub(super) const DEFAULT_MAX_DEPTH: u32 = 8;

/// Whether `pattern` has any glob syntax (otherwise it names one path).
pub(super) fn is_pattern(pattern: &str) -> bool {
    pattern.contains(['*', '?', '[', '\\'])
}

/// Why a pattern cannot be expanded (a bound hit fails rather than grant a partial set).
#[derive(Debug, thiserror::Error)]
pub(crate) enum GlobError {
    #[error("glob pattern `{0}` must not contain `..`")]
    Parent(String),
    #[error("glob pattern `{0}` is not UTF-8")]
    NotUtf8(String),
    #[error("glob pattern `{0}` is not POSIX")]
    NotPosix(String),
    #[error(
        "glob pattern `{pattern}` reaches deeper than glob_scan_max_depth {max_depth} under `{}`",
        under.display()
    )]
    TooDeep {
        pattern: String,
        max_depth: u32,
        under: PathBuf,
    },
    #[error("glob pattern `{0}` visits more than {MAX_VISITED} entries")]
    TooMany(String),
}

/// Existing paths under `base` matching the relative or absolute `pattern` (an absolute one
/// ignores `base`).
pub(super) fn expand(
    pattern: &str,
    base: &Path,
    max_depth: u32,
) -> Result<Vec<PathBuf>, GlobError> {
    let path = Path::new(pattern);
    let mut start = if path.is_absolute() {
        PathBuf::from("/")
    } else {
        base.to_path_buf()
    };
    let mut parts: Vec<String> = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => return Err(GlobError::Parent(pattern.into())),
            Component::Normal(part) => parts.push(
                part.to_str()
                    .ok_or_else(|| GlobError::NotUtf8(pattern.into()))?
                    .to_owned(),
            ),
            Component::Prefix(_) => return Err(GlobError::NotPosix(pattern.into())),
        }
    }
    // The literal prefix is walked directly, not scanned.
    let literal = parts.iter().take_while(|part| !is_pattern(part)).count();
    for part in &parts[..literal] {
        start.push(part);
    }
    let rest = &parts[literal..];
    if rest.is_empty() {
        return Ok(if start.symlink_metadata().is_ok() {
            vec![start]
        } else {
            Vec::new()
        });
    }
    let mut walk = Walk {
        matches: Vec::new(),
        visited: 0,
        max_depth,
        pattern,
    };
    walk.visit(&start, rest, 0)?;
    walk.matches.sort();
    walk.matches.dedup();
    Ok(walk.matches)
}

struct Walk<'a> {
    matches: Vec<PathBuf>,
    visited: usize,
    max_depth: u32,
    pattern: &'a str,
}

impl Walk<'_> {
    fn visit(&mut self, dir: &Path, rest: &[String], depth: u32) -> Result<(), GlobError> {
        let Some((first, tail)) = rest.split_first() else {
            self.matches.push(dir.to_path_buf());
            return Ok(());
        };
        if first == "**" {
            // Zero directories...
            self.visit(dir, tail, depth)?;
        }
        if depth >= self.max_depth {
            if first == "**" || !tail.is_empty() {
                // Entries below the bound could match: the set would be incomplete.
                if has_subdirectories(dir) {
                    return Err(GlobError::TooDeep {
                        pattern: self.pattern.into(),
                        max_depth: self.max_depth,
                        under: dir.to_path_buf(),
                    });
                }
            }
            if first == "**" {
                return Ok(());
            }
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            self.visited += 1;
            if self.visited > MAX_VISITED {
                return Err(GlobError::TooMany(self.pattern.into()));
            }
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let path = entry.path();
            let is_dir = entry.file_type().is_ok_and(|kind| kind.is_dir());
            if first == "**" {
                // ...or one more directory, keeping `**` in place.
                if is_dir && depth < self.max_depth {
                    self.visit(&path, rest, depth + 1)?;
                }
            } else if component_matches(first, name) {
                if tail.is_empty() {
                    self.matches.push(path);
                } else if is_dir && depth < self.max_depth {
                    self.visit(&path, tail, depth + 1)?;
                }
            }
        }
        Ok(())
    }
}

fn has_subdirectories(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
    })
}

/// Matches one path component against one pattern component, in O(pattern × name) time
/// (the classic last-star backtracking; `*` is the only token that matches a run).
pub(super) fn component_matches(pattern: &str, name: &str) -> bool {
    let tokens = tokenize(pattern);
    let name: Vec<char> = name.chars().collect();
    let (mut t, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match tokens.get(t) {
            Some(Token::Star) => {
                star = Some((t, n));
                t += 1;
            }
            Some(token) if token.matches(name[n]) => {
                t += 1;
                n += 1;
            }
            _ => match star {
                // Let the last star swallow one more character and retry from there.
                Some((star_t, star_n)) => {
                    star = Some((star_t, star_n + 1));
                    t = star_t + 1;
                    n = star_n + 1;
                }
                None => return false,
            },
        }
    }
    tokens[t..].iter().all(|token| matches!(token, Token::Star))
}

enum Token {
    Star,
    Any,
    Literal(char),
    /// Ranges (a single char is `(c, c)`) and whether the class is negated.
    Class(Vec<(char, char)>, bool),
}

impl Token {
    fn matches(&self, c: char) -> bool {
        match self {
            Token::Star => true,
            Token::Any => true,
            Token::Literal(literal) => *literal == c,
            Token::Class(ranges, negated) => {
                ranges.iter().any(|(low, high)| *low <= c && c <= *high) != *negated
            }
        }
    }
}

fn tokenize(pattern: &str) -> Vec<Token> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut tokens = Vec::new();
    let mut index = 0;
    while index < chars.len() {
        let token = match chars[index] {
            '*' => Token::Star,
            '?' => Token::Any,
            '\\' if index + 1 < chars.len() => {
                index += 1;
                Token::Literal(chars[index])
            }
            '[' => match class(&chars[index + 1..]) {
                Some((token, used)) => {
                    index += used;
                    token
                }
                // An unterminated class is a literal `[`.
                None => Token::Literal('['),
            },
            literal => Token::Literal(literal),
        };
        tokens.push(token);
        index += 1;
    }
    tokens
}

/// Parses a class body (after `[`); returns the token and the chars used including `]`.
fn class(body: &[char]) -> Option<(Token, usize)> {
    let negated = matches!(body.first(), Some('!' | '^'));
    let mut index = usize::from(negated);
    let mut ranges = Vec::new();
    let mut first = true;
    while index < body.len() {
        let current = body[index];
        if current == ']' && !first {
            return Some((Token::Class(ranges, negated), index + 1));
        }
        first = false;
        if index + 2 < body.len() && body[index + 1] == '-' && body[index + 2] != ']' {
            ranges.push((current, body[index + 2]));
            index += 3;
        } else {
            ranges.push((current, current));
            index += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_match_like_shell_globs() {
        assert!(component_matches("*.env", ".env"));
        assert!(component_matches("*.env", "prod.env"));
        assert!(!component_matches("*.env", "env"));
        assert!(component_matches("a?c", "abc"));
        assert!(component_matches("[ab]x", "bx"));
        assert!(!component_matches("[!ab]x", "bx"));
        assert!(component_matches("[a-c]", "b"));
        assert!(component_matches("\\*", "*"));
        assert!(!component_matches("\\*", "x"));
        assert!(component_matches("[x", "[x"));
        assert!(component_matches("a*b*c", "aXXbYYc"));
        assert!(!component_matches("a*b*c", "aXXbYY"));
        // No exponential backtracking.
        let name = "a".repeat(200);
        assert!(!component_matches(&format!("{}b", "*a".repeat(30)), &name));
    }

    #[test]
    fn expands_existing_matches_within_the_depth_bound() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("top.pem"), "").unwrap();
        std::fs::write(dir.path().join("a/b/deep.pem"), "").unwrap();
        std::fs::write(dir.path().join("a/b/other.txt"), "").unwrap();
        let found = expand("**/*.pem", dir.path(), 8).unwrap();
        assert_eq!(
            found,
            [dir.path().join("a/b/deep.pem"), dir.path().join("top.pem")]
        );
        let absolute = format!("{}/a/*/deep.pem", dir.path().display());
        assert_eq!(
            expand(&absolute, Path::new("/nowhere"), 8).unwrap(),
            [dir.path().join("a/b/deep.pem")]
        );
        assert!(expand("**/*.pem", dir.path(), 1).is_err());
        assert!(expand("../x/*", dir.path(), 8).is_err());
    }
}
