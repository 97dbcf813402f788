//! `--strict-config`: the names in the command line's settings and in this executor's
//! configuration files checked against those Codex knows ([`super::known`]), each refusal in
//! the reference's words. What is checked is the top-level keys and the feature names under
//! `[features]`; a value's type and the keys inside other tables are Codex's to check where
//! it reads them, since no setting changes what Tether does.

use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};

use super::ConfigError;
use super::known;
use super::layers::{Sources, stacks};
use super::overrides::Override;

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum StrictError {
    /// A `-c` (or `--enable`/`--disable`) key Codex does not know: its path up to the first
    /// unknown segment.
    #[error("unknown configuration field `{0}` in -c/--config override")]
    UnknownOverride(String),
    /// A configuration file's key Codex does not know, where it is in the file.
    #[error("{}:{line}:{column}: unknown configuration field `{key}`", path.display())]
    UnknownInFile { path: PathBuf, line: usize, column: usize, key: String },
    /// A configuration file that could not be read or parsed.
    #[error("{}", .0.reason)]
    Load(#[from] ConfigError),
}

/// The path of `key` up to its first segment Codex does not know, as Codex names it in a
/// refusal; `None` when every segment checked is known.
pub fn unknown_part(key: &str) -> Option<String> {
    let mut segments = key.split('.');
    let top = segments.next()?;
    if !known::is_config_key(top) {
        return Some(top.to_owned());
    }
    match (top, segments.next()) {
        ("features", Some(feature)) if !known::is_feature(feature) => {
            Some(format!("features.{feature}"))
        }
        _ => None,
    }
}

/// Refuses the first of `overrides` whose key Codex does not know.
pub fn check_overrides(overrides: &[Override]) -> Result<(), StrictError> {
    match overrides.iter().find_map(|setting| unknown_part(&setting.key)) {
        Some(unknown) => Err(StrictError::UnknownOverride(unknown)),
        None => Ok(()),
    }
}

/// Refuses the first key Codex does not know in the configuration files it would read on
/// this executor from `cwd`: the system's, the user's, each trusted project's, the legacy
/// managed file. A file that does not parse is refused too.
pub fn check_files(sources: &Sources, cwd: &Path) -> Result<(), StrictError> {
    let stacks = stacks(sources, cwd)?;
    for layer in &stacks.config.0 {
        // Parsed once already, so it reads; a file changed since is checked as it is now.
        let Ok(text) = std::fs::read_to_string(&layer.file) else { continue };
        let Ok(document) = DeTable::parse(&text) else { continue };
        if let Some((key, at)) = first_unknown(document.get_ref()) {
            let (line, column) = line_and_column(&text, at);
            return Err(StrictError::UnknownInFile { path: layer.file.clone(), line, column, key });
        }
    }
    Ok(())
}

/// The first key of `document` Codex does not know, with its byte offset.
fn first_unknown(document: &DeTable<'_>) -> Option<(String, usize)> {
    for (key, value) in document {
        let name = key.get_ref().as_ref();
        if !known::is_config_key(name) {
            return Some((name.to_owned(), key.span().start));
        }
        if let ("features", DeValue::Table(features)) = (name, value.get_ref()) {
            let unknown = features.keys().find(|feature| !known::is_feature(feature.get_ref()));
            if let Some(feature) = unknown {
                return Some((format!("features.{}", feature.get_ref()), feature.span().start));
            }
        }
    }
    None
}

/// The 1-based line and column (in characters) of byte `at` of `text`.
fn line_and_column(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |last| last.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_path_to_the_first_unknown_segment() {
        assert_eq!(unknown_part("model"), None);
        assert_eq!(unknown_part("shell_environment_policy.inherit"), None);
        assert_eq!(unknown_part("foo.bar"), Some("foo".into()));
        assert_eq!(unknown_part("features.shell_snapshot"), None);
        assert_eq!(unknown_part("features.nosuch.x"), Some("features.nosuch".into()));
        let overrides = [Override::parse("model=o3").unwrap(), Override::feature("nosuch", true)];
        assert_eq!(
            check_overrides(&overrides).unwrap_err().to_string(),
            "unknown configuration field `features.nosuch` in -c/--config override"
        );
    }

    #[test]
    fn a_file_is_refused_at_its_first_unknown_key() {
        let keys = |text: &str| {
            let document = DeTable::parse(text).unwrap();
            first_unknown(document.get_ref()).map(|(key, at)| (key, line_and_column(text, at)))
        };
        assert_eq!(keys("model = \"a\"\n[otel]\nx = 1\n"), None);
        assert_eq!(keys("bogus_key = 1\n"), Some(("bogus_key".into(), (1, 1))));
        assert_eq!(
            keys("model = \"a\"\n\n[features]\nshell_snapshot = true\n  nosuch = true\n"),
            Some(("features.nosuch".into(), (5, 3)))
        );
        assert_eq!(keys("features.nosuch = 1\n"), Some(("features.nosuch".into(), (1, 10))));
    }
}
