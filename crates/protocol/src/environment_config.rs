//! `environmentConfig/read`: chosen keys of the executor's own Codex configuration, layer by
//! layer, so a client can find what only the executor can see (its HTTP MCP servers, above
//! all) without reading the files itself.

use serde::{Deserialize, Serialize};

use crate::PathUri;

/// `environmentConfig/read` params. All three are required. `cwd` travels as text and is
/// checked after the paths, in the reference's order (see `validate` in the engine).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentConfigReadParams {
    pub cwd: String,
    /// Key paths into the config layers (`[["mcp_servers"]]`); each selects the value there.
    pub config_paths: Vec<Vec<String>>,
    /// Key paths into the requirements layers.
    pub requirements_paths: Vec<Vec<String>>,
}

/// `environmentConfig/read` result, in the reference's key order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentConfigReadResponse {
    /// `$HOME`; null when the executor has none.
    pub user_home_dir: Option<PathUri>,
    /// `$CODEX_HOME`, `~/.codex` by default.
    pub codex_home_dir: PathUri,
    /// The machine's host name (Codex picks host-specific requirements by it).
    pub hostname: String,
    pub config: ConfigLayers,
    pub requirements: ConfigLayers,
}

/// The layers that hold a selected key, lowest precedence first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigLayers {
    pub layers: Vec<ConfigLayer>,
    /// Where a client inserts the layers only it knows (cloud-provided ones): how many of
    /// `layers` come before that point.
    pub cloud_insertion_index: usize,
}

/// One layer: where it came from, the directory its relative paths resolve against, and the
/// selected keys as a TOML document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigLayer {
    pub source: String,
    pub base_dir: PathUri,
    pub toml: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_refuse_what_the_reference_refuses() {
        let decode = |text: &str| {
            serde_json::from_str::<EnvironmentConfigReadParams>(text).unwrap_err().to_string()
        };
        assert!(
            decode("null")
                .starts_with("invalid type: null, expected struct EnvironmentConfigReadParams")
        );
        assert!(
            decode(r#"{"cwd":"file:///x","configPaths":[]}"#)
                .starts_with("missing field `requirementsPaths`")
        );
        assert!(
            decode(r#"{"cwd":"file:///x","configPaths":"model","requirementsPaths":[]}"#)
                .starts_with(r#"invalid type: string "model", expected a sequence"#)
        );
        assert!(
            decode(r#"{"cwd":"file:///x","configPaths":[[1]],"requirementsPaths":[]}"#)
                .starts_with("invalid type: integer `1`, expected a string")
        );
    }
}
