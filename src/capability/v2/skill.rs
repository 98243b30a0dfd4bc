//! What discoverV2 says of one skill: its `SKILL.md` front matter (`name`, `description`,
//! `metadata.short-description`) and its `agents/openai.yaml` (`dependencies.tools`, `policy`),
//! read with codex's rules: single-line text, a name of at most 64 characters defaulting to the
//! directory's, a description required; metadata that does not parse is left out whole.

use exec_server_protocol::capability::{SkillDependencies, SkillPolicy, SkillToolDependency};
use serde::Deserialize;

const MAX_NAME_CHARS: usize = 64;
const MAX_TEXT_CHARS: usize = 1024;

/// The front matter's part that codex reads.
#[derive(Debug, PartialEq)]
pub(super) struct Frontmatter {
    pub name: String,
    pub description: String,
    pub short_description: Option<String>,
}

#[derive(Deserialize)]
struct RawFrontmatter {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    metadata: RawFrontmatterMetadata,
}

#[derive(Default, Deserialize)]
struct RawFrontmatterMetadata {
    #[serde(default, rename = "short-description")]
    short_description: Option<String>,
}

/// Parses `contents`' front matter; `directory` is the skill directory's name, the default
/// name. Err: why the skill is left out.
pub(super) fn frontmatter(contents: &str, directory: Option<&str>) -> Result<Frontmatter, String> {
    let block = frontmatter_block(contents).ok_or("missing YAML frontmatter delimited by ---")?;
    let raw: RawFrontmatter = match serde_norway::from_str(&block) {
        Ok(raw) => raw,
        // Prose such as `description: Build for AWS: ECS` is not YAML; codex quotes such
        // values and tries once more, keeping the first error if that fails too.
        Err(first) => quote_prose_values(&block)
            .and_then(|quoted| serde_norway::from_str(&quoted).ok())
            .ok_or_else(|| format!("invalid YAML: {first}"))?,
    };
    let name = raw
        .name
        .as_deref()
        .map(single_line)
        .filter(|name| !name.is_empty())
        .or_else(|| directory.map(single_line).filter(|name| !name.is_empty()))
        .unwrap_or_else(|| "skill".to_owned());
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(format!(
            "invalid name: exceeds maximum length of {MAX_NAME_CHARS} characters"
        ));
    }
    let description = raw.description.as_deref().map(single_line);
    let description = description
        .filter(|description| !description.is_empty())
        .ok_or("missing field `description`")?;
    let short_description = raw.metadata.short_description.as_deref().map(single_line);
    Ok(Frontmatter {
        name,
        description,
        short_description: short_description.filter(|text| !text.is_empty()),
    })
}

/// The lines between a first line `---` and the next `---`, if there are any.
fn frontmatter_block(contents: &str) -> Option<String> {
    let mut lines = contents.lines();
    if lines.next()?.trim() != "---" {
        return None;
    }
    let mut block = Vec::new();
    for line in lines {
        if line.trim() == "---" {
            return (!block.is_empty()).then(|| block.join("\n"));
        }
        block.push(line);
    }
    None
}

/// `block` with each `key: value` whose plain value reads as prose (it holds `: `, or opens
/// like a flow collection, alias, or backtick but is not valid YAML) put in single quotes;
/// None when no line needed it. Block scalars (`|`, `>`) and their lines are kept.
fn quote_prose_values(block: &str) -> Option<String> {
    let mut changed = false;
    let mut block_scalar: Option<usize> = None;
    let mut lines = Vec::new();
    for line in block.lines() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        if let Some(parent) = block_scalar {
            if line.trim().is_empty() || indent > parent {
                lines.push(line.to_owned());
                continue;
            }
            block_scalar = None;
        }
        match prose_value(line) {
            Some(Prose::BlockScalar) => block_scalar = Some(indent),
            Some(Prose::Quote {
                key,
                gap,
                value,
                comment,
            }) => {
                let quoted = value.replace('\'', "''");
                lines.push(format!("{key}:{gap}'{quoted}'{comment}"));
                changed = true;
                continue;
            }
            None => {}
        }
        lines.push(line.to_owned());
    }
    changed.then(|| lines.join("\n"))
}

enum Prose<'a> {
    BlockScalar,
    Quote {
        key: &'a str,
        gap: &'a str,
        value: &'a str,
        comment: &'a str,
    },
}

/// How [`quote_prose_values`] treats `line`.
fn prose_value(line: &str) -> Option<Prose<'_>> {
    let (key, rest) = line.split_once(':')?;
    if key.trim().is_empty() || rest.starts_with(|c: char| !c.is_whitespace()) {
        return None;
    }
    let after_gap = rest.trim_start();
    let gap = &rest[..rest.len() - after_gap.len()];
    // A ` #` (or a leading `#`) starts a comment, kept outside the quotes.
    let comment_at = after_gap.char_indices().find_map(|(at, c)| {
        let after_space = after_gap[..at].ends_with(char::is_whitespace);
        (c == '#' && (at == 0 || after_space)).then_some(at)
    });
    let (value, comment) = match comment_at {
        Some(at) => {
            let value = after_gap[..at].trim_end();
            (value, &after_gap[value.len()..])
        }
        None => (after_gap.trim_end(), ""),
    };
    let first = value.chars().next()?;
    match first {
        '|' | '>' => return Some(Prose::BlockScalar),
        '\'' | '"' => return None,
        _ => {}
    }
    let has_separator = value
        .char_indices()
        .any(|(at, c)| c == ':' && value[at + 1..].starts_with(char::is_whitespace));
    let broken_flow = matches!(first, '[' | '{' | '@' | '`')
        && serde_norway::from_str::<serde_norway::Value>(value).is_err();
    (has_separator || broken_flow).then_some(Prose::Quote {
        key,
        gap,
        value,
        comment,
    })
}

/// Runs of whitespace made one space, the ends trimmed.
fn single_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[derive(Deserialize)]
struct RawMetadata {
    #[serde(default)]
    dependencies: Option<RawDependencies>,
    #[serde(default)]
    policy: Option<RawPolicy>,
}

#[derive(Deserialize)]
struct RawDependencies {
    #[serde(default)]
    tools: Vec<RawTool>,
}

#[derive(Deserialize)]
struct RawTool {
    #[serde(rename = "type")]
    kind: Option<String>,
    value: Option<String>,
    description: Option<String>,
    transport: Option<String>,
    command: Option<String>,
    url: Option<String>,
}

#[derive(Deserialize)]
struct RawPolicy {
    #[serde(default)]
    allow_implicit_invocation: Option<bool>,
    #[serde(default)]
    products: Vec<Product>,
}

/// codex's products; a file naming another is not read at all, as codex does.
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Product {
    #[serde(alias = "CODEX")]
    Codex,
    #[serde(alias = "CHATGPT")]
    Chatgpt,
    #[serde(alias = "ATLAS")]
    Atlas,
}

impl Product {
    fn name(&self) -> &'static str {
        match self {
            Product::Codex => "codex",
            Product::Chatgpt => "chatgpt",
            Product::Atlas => "atlas",
        }
    }
}

/// `agents/openai.yaml`'s dependencies and policy; nothing when it does not parse.
pub(super) fn metadata(contents: &str) -> (Option<SkillDependencies>, Option<SkillPolicy>) {
    let Ok(raw) = serde_norway::from_str::<RawMetadata>(contents) else {
        return (None, None);
    };
    let tools: Vec<_> = (raw.dependencies.map(|deps| deps.tools))
        .unwrap_or_default()
        .into_iter()
        .filter_map(tool)
        .collect();
    let dependencies = (!tools.is_empty()).then_some(SkillDependencies { tools });
    let policy = raw.policy.map(|policy| SkillPolicy {
        allow_implicit_invocation: policy.allow_implicit_invocation,
        products: policy
            .products
            .iter()
            .map(|p| p.name().to_owned())
            .collect(),
    });
    (dependencies, policy)
}

/// A tool with a usable type and value; other members too long or empty are left out.
fn tool(raw: RawTool) -> Option<SkillToolDependency> {
    Some(SkillToolDependency {
        kind: text(raw.kind, MAX_NAME_CHARS)?,
        value: text(raw.value, MAX_TEXT_CHARS)?,
        description: text(raw.description, MAX_TEXT_CHARS),
        transport: text(raw.transport, MAX_NAME_CHARS),
        command: text(raw.command, MAX_TEXT_CHARS),
        url: text(raw.url, MAX_TEXT_CHARS),
        oauth_callback_port: None,
    })
}

fn text(value: Option<String>, max_chars: usize) -> Option<String> {
    let value = single_line(&value?);
    (!value.is_empty() && value.chars().count() <= max_chars).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prose_values_are_quoted_and_the_rest_kept() {
        let skill = "---\nname: a\ndescription: Build for AWS: ECS # note\n---\nbody";
        let parsed = frontmatter(skill, Some("dir")).unwrap();
        assert_eq!(parsed.description, "Build for AWS: ECS");
        let block = "description: |\n  x: y\nname: [unclosed";
        let quoted = quote_prose_values(block).unwrap();
        assert_eq!(quoted, "description: |\n  x: y\nname: '[unclosed'");
    }

    #[test]
    fn names_default_to_the_directory_and_are_bounded() {
        let parsed = frontmatter("---\ndescription: d\n---\n", Some(" my  dir ")).unwrap();
        assert_eq!(parsed.name, "my dir");
        let long = format!("---\nname: {}\ndescription: d\n---\n", "x".repeat(65));
        assert!(frontmatter(&long, None).is_err());
        assert!(frontmatter("---\nname: n\n---\n", None).is_err());
        assert!(frontmatter("---\n---\n", None).is_err());
    }

    #[test]
    fn an_unknown_product_drops_the_whole_file() {
        let (_, policy) = metadata("policy:\n  products: [codex, CHATGPT]\n");
        assert_eq!(policy.unwrap().products, ["codex", "chatgpt"]);
        assert_eq!(metadata("policy:\n  products: [Codex]\n"), (None, None));
    }
}
