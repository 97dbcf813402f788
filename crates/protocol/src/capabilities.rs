//! `capabilities/discoverV2` and `capabilityRoots/discoverV1`: what is installed on the
//! executor (skills, plugins), as files and as the metadata parsed from them.
//!
//! Both are read-only inventories. `discoverV2` answers with parsed skills and plugins from the
//! executor's own roots (`$CODEX_HOME/skills`, `~/.agents/skills`, `/etc/codex/skills`, the
//! plugin cache); `discoverV1` answers with the raw files found under roots the client names.

use serde::{Deserialize, Serialize};

use crate::PathUri;
use crate::sandbox::SandboxContext;

/// The most roots one `capabilityRoots/discoverV1` may name (the reference's bound).
pub const CAPABILITY_ROOTS_MAX: usize = 128;

/// `capabilities/discoverV2` params. `cwd` is checked to be a `file:` URI; the inventory does
/// not depend on it (repository skills are the client's to read).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", expecting = "struct DiscoverV2CapabilitiesRequest")]
pub struct DiscoverV2Params {
    pub cwd: PathUri,
    /// The turn's filesystem intent: where it hides something, discovery reads only what it
    /// may. Here, unlike on `fs/*` calls, the intent must name its `cwd`.
    #[serde(default, deserialize_with = "intent_with_cwd")]
    pub sandbox: Option<SandboxContext>,
}

fn intent_with_cwd<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SandboxContext>, D::Error> {
    let intent = Option::<SandboxContext>::deserialize(deserializer)?;
    if intent.as_ref().is_some_and(|intent| intent.cwd.is_none()) {
        return Err(serde::de::Error::missing_field("cwd"));
    }
    Ok(intent)
}

/// `capabilities/discoverV2` result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverV2Response {
    /// One per installed plugin (its active version), sorted by id.
    pub plugins: Vec<ExecutorPlugin>,
    /// Standalone skills, root by root, each root's sorted by path.
    pub skills: Vec<ExecutorSkill>,
    /// Short, generic notes that the inventory may be incomplete (never paths or contents).
    pub warnings: Vec<String>,
}

/// An installed plugin: its active version's files and skills.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorPlugin {
    /// `<name>@<marketplace>`.
    pub id: String,
    pub display_name: String,
    pub remote_plugin_id: Option<String>,
    pub version: String,
    /// The active version's directory.
    pub root: PathUri,
    pub files: PluginFiles,
    /// Skills named `<namespace>:<name>`; they carry no `discoveryRoot`.
    pub skills: Vec<ExecutorSkill>,
}

/// A skill, parsed from its `SKILL.md` front matter and sibling `agents/openai.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorSkill {
    pub name: String,
    pub description: String,
    pub short_description: Option<String>,
    /// The `SKILL.md` file.
    pub path: PathUri,
    /// Present for standalone skills only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery_root: Option<DiscoveryRoot>,
    pub dependencies: Option<SkillDependencies>,
    pub policy: Option<SkillPolicy>,
}

/// Which standalone root a skill came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveryRoot {
    /// `codex-home-skills`, `user-agent-skills` or `system-skills`.
    pub id: String,
    pub path: PathUri,
}

/// What a skill needs, from `agents/openai.yaml`'s `dependencies`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillDependencies {
    pub tools: Vec<SkillToolDependency>,
}

/// One tool a skill depends on (an MCP server, a CLI, an environment variable, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillToolDependency {
    #[serde(rename = "type")]
    pub kind: String,
    pub value: String,
    pub description: Option<String>,
    pub transport: Option<String>,
    pub command: Option<String>,
    pub url: Option<String>,
    pub oauth_callback_port: Option<u16>,
}

/// How a skill may be invoked, from `agents/openai.yaml`'s `policy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillPolicy {
    /// Null when the file does not say; the client decides the default.
    pub allow_implicit_invocation: Option<bool>,
    /// The products the skill is for; empty means all.
    pub products: Vec<SkillProduct>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SkillProduct {
    Codex,
    Chatgpt,
    Atlas,
}

/// A plugin's own files: its manifest, and the MCP and apps configuration it declares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginFiles {
    pub manifest: CapabilityTextFile,
    pub mcp_config: Option<CapabilityTextFile>,
    pub apps_config: Option<CapabilityTextFile>,
}

/// A file and its text, exactly as read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityTextFile {
    pub path: PathUri,
    pub contents: String,
}

/// `capabilityRoots/discoverV1` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", expecting = "struct WireCapabilityRootsDiscoverParams")]
pub struct DiscoverRootsParams {
    /// At most [`CAPABILITY_ROOTS_MAX`]; ids need not be unique.
    pub roots: Vec<CapabilityRootRequest>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityRootRequest {
    pub id: String,
    pub path: PathUri,
    #[serde(default)]
    pub sandbox: Option<SandboxContext>,
}

/// `capabilityRoots/discoverV1` result: one entry per requested root, in the request's order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverRootsResponse {
    pub roots: Vec<CapabilityRootDiscovery>,
}

/// What one root holds. A root that cannot be scanned has `error` set and nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityRootDiscovery {
    pub id: String,
    pub path: PathUri,
    /// The root's own plugin, when it holds a plugin manifest.
    pub plugin: Option<PluginFiles>,
    /// Every `SKILL.md` found, sorted by path.
    pub skills: Vec<DiscoveredSkillFiles>,
    /// The plugin manifests that name the skills' namespaces: the root's own (or its nearest
    /// ancestor's), then one per plugin found below it.
    pub namespace_manifests: Vec<CapabilityTextFile>,
    /// Files skipped and limits reached, each naming what.
    pub warnings: Vec<String>,
    pub error: Option<String>,
}

impl CapabilityRootDiscovery {
    /// The root with nothing found yet: the start of a scan, or, with `error` set, a root that
    /// could not be scanned.
    pub fn empty(id: String, path: PathUri) -> Self {
        Self {
            id,
            path,
            plugin: None,
            skills: Vec::new(),
            namespace_manifests: Vec::new(),
            warnings: Vec::new(),
            error: None,
        }
    }
}

/// A skill's files: `SKILL.md` and its sibling `agents/openai.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredSkillFiles {
    pub instructions: CapabilityTextFile,
    pub metadata: Option<CapabilityTextFile>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_refuse_what_the_reference_refuses() {
        let v2 =
            |text: &str| serde_json::from_str::<DiscoverV2Params>(text).unwrap_err().to_string();
        assert!(
            v2("null")
                .starts_with("invalid type: null, expected struct DiscoverV2CapabilitiesRequest")
        );
        assert!(v2("{}").starts_with("missing field `cwd`"));
        assert!(v2(r#"{"cwd":"rel"}"#).starts_with("invalid URI: relative URL without a base"));
        assert!(v2(r#"{"cwd":"http://x/"}"#).starts_with("unsupported path URI scheme `http`"));
        assert!(
            v2(r#"{"cwd":"file:///","sandbox":{}}"#).starts_with("missing field `permissions`")
        );
        let v1 =
            |text: &str| serde_json::from_str::<DiscoverRootsParams>(text).unwrap_err().to_string();
        assert!(
            v1("null").starts_with(
                "invalid type: null, expected struct WireCapabilityRootsDiscoverParams"
            )
        );
        assert!(v1("{}").starts_with("missing field `roots`"));
        assert!(v1(r#"{"roots":5}"#).starts_with("invalid type: integer `5`, expected a sequence"));
        assert!(
            v1(r#"{"roots":[{"id":1,"path":"file:///"}]}"#)
                .starts_with("invalid type: integer `1`, expected a string")
        );
        assert!(v1(r#"{"roots":[{"path":"file:///"}]}"#).starts_with("missing field `id`"));
    }

    #[test]
    fn unknown_fields_and_a_null_sandbox_are_accepted() {
        let params: DiscoverV2Params =
            serde_json::from_str(r#"{"cwd":"file:///nope","sandbox":null,"extra":1}"#).unwrap();
        assert!(params.sandbox.is_none());
        let params: DiscoverRootsParams =
            serde_json::from_str(r#"{"roots":[{"id":"a","path":"file:///x"}],"extra":true}"#)
                .unwrap();
        assert_eq!(params.roots.len(), 1);
    }
}
