//! A `SKILL.md` file's front matter: the YAML block between `---` lines that names and
//! describes the skill.
//!
//! Read as the reference reads it, so a skill that loads there loads here: YAML first; where
//! that fails, once more with prose values quoted (skill authors write
//! `description: Deploy to AWS: ECS`, which YAML refuses), and only then refused.

use serde::Deserialize;
use serde_yaml_ng::Value;

/// The longest skill name, in characters.
pub(crate) const MAX_NAME_CHARS: usize = 64;

/// What a front matter says about its skill, each text on one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FrontMatter {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) short_description: Option<String>,
}

/// Why a `SKILL.md` does not describe a skill.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FrontMatterError {
    #[error("missing YAML frontmatter delimited by ---")]
    Missing,
    #[error("invalid YAML: {0}")]
    InvalidYaml(String),
    #[error("missing field `{0}`")]
    MissingField(&'static str),
    #[error("invalid name: exceeds maximum length of {MAX_NAME_CHARS} characters")]
    NameTooLong,
}

#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    metadata: RawMetadata,
}

#[derive(Default, Deserialize)]
struct RawMetadata {
    #[serde(default, rename = "short-description")]
    short_description: Option<String>,
}

/// Parses `contents`' front matter. A skill without a `name` is named `default_name` (its
/// directory's name).
pub(crate) fn parse(contents: &str, default_name: &str) -> Result<FrontMatter, FrontMatterError> {
    let block = block(contents).ok_or(FrontMatterError::Missing)?;
    let raw: Raw = match serde_yaml_ng::from_str(&block) {
        Ok(raw) => raw,
        Err(error) => quote_prose_values(&block)
            .and_then(|quoted| serde_yaml_ng::from_str(&quoted).ok())
            .ok_or_else(|| FrontMatterError::InvalidYaml(error.to_string()))?,
    };
    let name = raw
        .name
        .as_deref()
        .map(one_line)
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| one_line(default_name));
    let description = raw.description.as_deref().map(one_line).unwrap_or_default();
    let short_description =
        raw.metadata.short_description.as_deref().map(one_line).filter(|text| !text.is_empty());
    if name.is_empty() {
        return Err(FrontMatterError::MissingField("name"));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(FrontMatterError::NameTooLong);
    }
    if description.is_empty() {
        return Err(FrontMatterError::MissingField("description"));
    }
    Ok(FrontMatter { name, description, short_description })
}

/// Collapses every run of whitespace (newlines included) to one space, and trims.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The lines between a first line of `---` and the next `---` line; none when either is
/// missing or nothing lies between them.
fn block(contents: &str) -> Option<String> {
    let mut lines = contents.lines();
    if lines.next()?.trim() != "---" {
        return None;
    }
    let mut inside = Vec::new();
    for line in lines {
        if line.trim() == "---" {
            return (!inside.is_empty()).then(|| inside.join("\n"));
        }
        inside.push(line);
    }
    None
}

/// The block with each `key: value` line whose value YAML cannot take as written — one holding
/// `: `, or one opening a flow collection or reserved indicator it never closes — quoted as a
/// single-quoted scalar. Block scalars (`|`, `>`) and their bodies, quoted values and comments
/// are left alone. None when no line needed quoting.
fn quote_prose_values(block: &str) -> Option<String> {
    let mut changed = false;
    // The indentation of a `key: |` line while its body continues.
    let mut block_scalar: Option<usize> = None;
    let mut lines = Vec::new();
    for line in block.lines() {
        let indent = line.chars().take_while(|c| *c == ' ').count();
        if let Some(owner) = block_scalar {
            if line.trim().is_empty() || indent > owner {
                lines.push(line.to_owned());
                continue;
            }
            block_scalar = None;
        }
        match quoted_line(line) {
            Quoting::Quoted(quoted) => {
                lines.push(quoted);
                changed = true;
            }
            Quoting::BlockScalar => {
                block_scalar = Some(indent);
                lines.push(line.to_owned());
            }
            Quoting::Unchanged => lines.push(line.to_owned()),
        }
    }
    changed.then(|| lines.join("\n"))
}

enum Quoting {
    Quoted(String),
    BlockScalar,
    Unchanged,
}

fn quoted_line(line: &str) -> Quoting {
    let Some((key, value)) = line.split_once(':') else { return Quoting::Unchanged };
    if key.trim().is_empty() || value.chars().next().is_some_and(|c| !c.is_whitespace()) {
        return Quoting::Unchanged;
    }
    let text = value.trim_start();
    let spacing = &value[..value.len() - text.len()];
    // A comment starts at a `#` that begins the value or follows whitespace.
    let comment_at = text.char_indices().find_map(|(at, c)| {
        let starts = c == '#' && (at == 0 || text[..at].ends_with(char::is_whitespace));
        starts.then(|| text[..at].trim_end().len())
    });
    let (scalar, comment) = match comment_at {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let scalar = scalar.trim_end();
    let Some(first) = scalar.chars().next() else { return Quoting::Unchanged };
    match first {
        '|' | '>' => return Quoting::BlockScalar,
        '\'' | '"' => return Quoting::Unchanged,
        _ => {}
    }
    let has_mapping_colon = scalar
        .char_indices()
        .any(|(at, c)| c == ':' && scalar[at + 1..].starts_with(char::is_whitespace));
    let broken_flow =
        matches!(first, '[' | '{' | '@' | '`') && serde_yaml_ng::from_str::<Value>(scalar).is_err();
    if !has_mapping_colon && !broken_flow {
        return Quoting::Unchanged;
    }
    Quoting::Quoted(format!("{key}:{spacing}'{}'{comment}", scalar.replace('\'', "''")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(contents: &str) -> Result<FrontMatter, FrontMatterError> {
        parse(contents, "dir-name")
    }

    #[test]
    fn names_descriptions_and_short_descriptions_come_out_on_one_line() {
        let skill = parsed(
            "---\nname: \"quo ted\"\ndescription: |\n  line one\n  line two\nmetadata:\n  \
             short-description: 42\n---\nbody\n",
        )
        .unwrap();
        assert_eq!(skill.name, "quo ted");
        assert_eq!(skill.description, "line one line two");
        assert_eq!(skill.short_description.as_deref(), Some("42"));
        let numbers = parsed("---\nname: 123\ndescription: 4.5\n---\n").unwrap();
        assert_eq!((numbers.name.as_str(), numbers.description.as_str()), ("123", "4.5"));
    }

    #[test]
    fn prose_that_yaml_refuses_is_read_as_text() {
        let skill =
            parsed("---\nname: [unclosed\ndescription: has: colon and # hash\n---\n").unwrap();
        assert_eq!(skill.name, "[unclosed");
        assert_eq!(skill.description, "has: colon and");
        let skill = parsed("---\nname: it's\ndescription: Deploy: it's here\n---\n").unwrap();
        assert_eq!(skill.description, "Deploy: it's here");
    }

    #[test]
    fn a_missing_name_is_the_directory_name_and_a_missing_description_is_refused() {
        assert_eq!(parsed("---\ndescription: d\n---\n").unwrap().name, "dir-name");
        assert_eq!(parsed("---\nname: \"\"\ndescription: d\n---\n").unwrap().name, "dir-name");
        assert_eq!(
            parsed("---\nname: n\n---\n"),
            Err(FrontMatterError::MissingField("description"))
        );
        assert_eq!(
            parsed("---\nname: n\ndescription: \"  \"\n---\n"),
            Err(FrontMatterError::MissingField("description"))
        );
    }

    #[test]
    fn names_longer_than_64_characters_are_refused() {
        let name = |n: usize| format!("---\nname: {}\ndescription: d\n---\n", "é".repeat(n));
        assert!(parsed(&name(64)).is_ok());
        assert_eq!(parsed(&name(65)), Err(FrontMatterError::NameTooLong));
    }

    #[test]
    fn the_block_must_open_the_file_close_and_hold_something() {
        for contents in ["no front matter", "\n---\nname: a\n---\n", "---\nname: a\n", "---\n---\n"]
        {
            assert_eq!(parsed(contents), Err(FrontMatterError::Missing), "{contents:?}");
        }
        assert!(parsed("---\r\nname: crlf\r\ndescription: crlf\r\n---\r\n").is_ok());
    }

    #[test]
    fn values_of_the_wrong_shape_are_invalid_yaml() {
        for contents in [
            "---\nname: [a, b]\ndescription: x\n---\n",
            "---\nname: m\ndescription:\n  k: v\n---\n",
            "---\nname:\tt\ndescription: t\n  bad indent: x\n---\n",
        ] {
            assert!(
                matches!(parsed(contents), Err(FrontMatterError::InvalidYaml(_))),
                "{contents:?}"
            );
        }
    }
}
