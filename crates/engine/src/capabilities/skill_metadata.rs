//! A skill's `agents/openai.yaml`: the tools it depends on and how it may be invoked.
//!
//! The file is optional and advisory: one that does not parse, or holds a value of the wrong
//! shape anywhere it is typed, contributes nothing, and the skill still loads. Within a file
//! that parses, a tool without a usable `type` or `value` is left out, and an optional text
//! over its length bound is dropped, as the reference does.

use serde::Deserialize;
use tether_protocol::capabilities::{
    SkillDependencies, SkillPolicy, SkillProduct, SkillToolDependency,
};

use super::front_matter::one_line;

/// The longest `type` and `transport`, in characters.
const MAX_KIND_CHARS: usize = 64;
/// The longest `value`, `description`, `command` and `url`, in characters.
const MAX_TEXT_CHARS: usize = 1024;

/// What `agents/openai.yaml` says, or nothing of it when it does not parse.
pub(crate) fn parse(contents: &str) -> (Option<SkillDependencies>, Option<SkillPolicy>) {
    let Ok(raw) = serde_yaml_ng::from_str::<Raw>(contents) else { return (None, None) };
    let tools: Vec<SkillToolDependency> = raw
        .dependencies
        .and_then(|dependencies| dependencies.tools)
        .unwrap_or_default()
        .into_iter()
        .filter_map(RawTool::into_tool)
        .collect();
    let dependencies = (!tools.is_empty()).then_some(SkillDependencies { tools });
    let policy = raw.policy.map(|policy| SkillPolicy {
        allow_implicit_invocation: policy.allow_implicit_invocation,
        products: policy.products.into_iter().map(|product| product.0).collect(),
    });
    (dependencies, policy)
}

#[derive(Deserialize)]
struct Raw {
    /// Typed though unused here: a malformed `interface` makes the whole file unusable, as it
    /// does for the reference.
    #[serde(default)]
    #[allow(dead_code)]
    interface: Option<RawInterface>,
    #[serde(default)]
    dependencies: Option<RawDependencies>,
    #[serde(default)]
    policy: Option<RawPolicy>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct RawInterface {
    display_name: Option<String>,
    short_description: Option<String>,
    icon_small: Option<String>,
    icon_large: Option<String>,
    brand_color: Option<String>,
    default_prompt: Option<String>,
}

#[derive(Deserialize)]
struct RawDependencies {
    #[serde(default)]
    tools: Option<Vec<RawTool>>,
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
    oauth: Option<RawOauth>,
}

#[derive(Deserialize)]
struct RawOauth {
    callback_port: Option<u16>,
}

#[derive(Deserialize)]
struct RawPolicy {
    allow_implicit_invocation: Option<bool>,
    #[serde(default)]
    products: Vec<Product>,
}

/// A product name, in any case.
struct Product(SkillProduct);

impl<'de> Deserialize<'de> for Product {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        match name.to_ascii_lowercase().as_str() {
            "codex" => Ok(Product(SkillProduct::Codex)),
            "chatgpt" => Ok(Product(SkillProduct::Chatgpt)),
            "atlas" => Ok(Product(SkillProduct::Atlas)),
            _ => Err(serde::de::Error::unknown_variant(&name, &["codex", "chatgpt", "atlas"])),
        }
    }
}

impl RawTool {
    fn into_tool(self) -> Option<SkillToolDependency> {
        let kind = bounded(self.kind, MAX_KIND_CHARS)?;
        let value = bounded(self.value, MAX_TEXT_CHARS)?;
        Some(SkillToolDependency {
            kind,
            value,
            description: bounded(self.description, MAX_TEXT_CHARS),
            transport: bounded(self.transport, MAX_KIND_CHARS),
            command: bounded(self.command, MAX_TEXT_CHARS),
            url: bounded(self.url, MAX_TEXT_CHARS),
            oauth_callback_port: self.oauth.and_then(|oauth| oauth.callback_port),
        })
    }
}

/// The text on one line, when it is neither empty nor longer than `max` characters.
fn bounded(text: Option<String>, max: usize) -> Option<String> {
    let text = one_line(&text?);
    (!text.is_empty() && text.chars().count() <= max).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(contents: &str) -> Vec<(String, String)> {
        parse(contents).0.map_or_else(Vec::new, |deps| {
            deps.tools.into_iter().map(|tool| (tool.kind, tool.value)).collect()
        })
    }

    #[test]
    fn tools_need_a_type_and_a_value_and_texts_their_bounds() {
        let contents = "dependencies:\n  tools:\n    - type: mcp\n    - value: v\n    - type: cli\n      \
                        value: \"  rg   --json \"\n      oauth:\n        callback_port: 8080\n";
        let (dependencies, policy) = parse(contents);
        let tool = &dependencies.unwrap().tools[0];
        assert_eq!((tool.kind.as_str(), tool.value.as_str()), ("cli", "rg --json"));
        assert_eq!(tool.oauth_callback_port, Some(8080));
        assert!(policy.is_none());
        let long = format!(
            "dependencies:\n  tools:\n    - {{type: {}, value: v}}\n    - {{type: mcp, value: v, \
             transport: {}, description: {}}}\n",
            "t".repeat(65),
            "r".repeat(65),
            "d".repeat(1025)
        );
        let dependencies = parse(&long).0.unwrap();
        assert_eq!(dependencies.tools.len(), 1);
        assert_eq!(
            (dependencies.tools[0].transport.as_ref(), dependencies.tools[0].description.as_ref()),
            (None, None)
        );
        assert_eq!(tools("dependencies:\n  tools: []\n"), vec![]);
        assert_eq!(
            tools("dependencies:\n  tools:\n    - {type: 5, value: 6}\n"),
            vec![("5".into(), "6".into())]
        );
    }

    #[test]
    fn a_policy_keeps_what_it_says() {
        let (_, policy) = parse("policy: {}\n");
        assert_eq!(policy, Some(SkillPolicy { allow_implicit_invocation: None, products: vec![] }));
        let (_, policy) =
            parse("policy:\n  allow_implicit_invocation: True\n  products: [CODEX, atlas]\n");
        assert_eq!(
            policy,
            Some(SkillPolicy {
                allow_implicit_invocation: Some(true),
                products: vec![SkillProduct::Codex, SkillProduct::Atlas]
            })
        );
    }

    #[test]
    fn any_value_of_the_wrong_shape_voids_the_whole_file() {
        let tool = "dependencies:\n  tools:\n    - {type: mcp, value: v}\n";
        for bad in [
            "policy:\n  products: [bogus]\n",
            "policy:\n  products: ~\n",
            "policy:\n  allow_implicit_invocation: \"yes\"\n",
            "interface: [1, 2]\n",
            "interface:\n  display_name: [a]\n",
            "other: [unclosed\n",
        ] {
            assert_eq!(parse(&format!("{tool}{bad}")), (None, None), "{bad:?}");
        }
        for bad in ["70000", "'8080'", "8080.0"] {
            let contents = format!(
                "dependencies:\n  tools:\n    - {{type: mcp, value: v, oauth: {{callback_port: {bad}}}}}\n"
            );
            assert_eq!(parse(&contents), (None, None), "{bad}");
        }
        assert_eq!(parse("- a\n"), (None, None));
        assert_eq!(parse(""), (None, None));
    }
}
