//! `-c key=value`, `--enable FEATURE` and `--disable FEATURE` of `codex exec-server`, read as
//! Codex reads them: a dotted key, then a TOML value (a value that is not TOML is taken as a
//! string, as Codex takes it).

use std::fmt;

/// One setting given on the command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    /// The dotted path, trimmed (`shell_environment_policy.inherit`).
    pub key: String,
    pub value: toml::Value,
}

/// Why a `-c` could not be read, in Codex's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    #[error("Invalid override (missing '='): {0}")]
    MissingEquals(String),
    #[error("Empty key in override: {0}")]
    EmptyKey(String),
}

impl Override {
    /// Reads `key=value`.
    pub fn parse(text: &str) -> Result<Self, OverrideError> {
        let (key, value) =
            text.split_once('=').ok_or_else(|| OverrideError::MissingEquals(text.to_owned()))?;
        let key = key.trim();
        if key.is_empty() {
            return Err(OverrideError::EmptyKey(text.to_owned()));
        }
        let value = value.trim();
        let value = toml::from_str::<toml::Table>(&format!("value = {value}"))
            .ok()
            .and_then(|mut table| table.remove("value"))
            .unwrap_or_else(|| toml::Value::String(value.to_owned()));
        Ok(Self { key: key.to_owned(), value })
    }

    /// `--enable NAME` (`on`) or `--disable NAME`: `features.NAME` set to `on`.
    pub fn feature(name: &str, on: bool) -> Self {
        Self { key: format!("features.{name}"), value: toml::Value::Boolean(on) }
    }

    /// The key's dotted segments.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.key.split('.')
    }
}

impl fmt::Display for Override {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_toml_or_else_a_string() {
        let read = |text| Override::parse(text).unwrap();
        assert_eq!(read("model=\"o3\"").value, toml::Value::String("o3".into()));
        assert_eq!(read(" model = o3 ").key, "model");
        assert_eq!(read("model=o3").value, toml::Value::String("o3".into()));
        assert_eq!(read("a.b=3").value, toml::Value::Integer(3));
        assert_eq!(read("a=[1,2").value, toml::Value::String("[1,2".into()));
        assert_eq!(read("a=x=y").value, toml::Value::String("x=y".into()));
        assert_eq!(read("a.b.c=1").segments().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(
            Override::parse("foo").unwrap_err().to_string(),
            "Invalid override (missing '='): foo"
        );
        assert_eq!(Override::parse(" =1").unwrap_err().to_string(), "Empty key in override:  =1");
        assert_eq!(Override::feature("shell_snapshot", false).key, "features.shell_snapshot");
    }
}
