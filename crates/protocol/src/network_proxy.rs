//! `process/start {networkProxy}`: the managed network proxy Codex asks an executor to launch
//! for one process (`networkProxyLaunch`), as Codex 0.171 sends it.
//!
//! The members Codex always sends are required, as the reference requires them, so a request
//! missing one is refused in the reference's words (`missing field `mode``) before anything
//! else is looked at. Members whose meaning a server needs only once it launches proxies are
//! carried as they came.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `networkProxy`: the proxy, and who the launch is for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// Named in type errors as the reference names it.
#[serde(rename_all = "camelCase", expecting = "struct RemoteNetworkProxyLaunchConfig")]
pub struct NetworkProxyLaunch {
    pub proxy: NetworkProxyConfig,
    /// Who asked (conversation, model, originator…), for the proxy's audit events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_metadata: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_id: Option<String>,
    /// Fresh for every start: names the launch in policy decisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    /// How long the proxy waits for Codex to decide on a domain nobody decided yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_decision_timeout_ms: Option<u64>,
}

/// `networkProxy.proxy`: what the launched proxy allows and how the process reaches it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// Named in type errors as the reference names it.
#[serde(rename_all = "camelCase", expecting = "struct RemoteNetworkProxyConfig")]
pub struct NetworkProxyConfig {
    /// A launch with the proxy off is refused: there would be nothing to launch.
    pub enabled: bool,
    pub enable_socks5: bool,
    pub enable_socks5_udp: bool,
    /// Codex 0.171: the sandbox's outbound TCP goes through the SOCKS5 listener, so programs
    /// that ignore proxy variables are held to the policy too. Needs a sandbox and SOCKS5.
    #[serde(default)]
    pub transparent_tcp: bool,
    pub allow_upstream_proxy: bool,
    pub dangerously_allow_all_unix_sockets: bool,
    pub mode: NetworkMode,
    pub allow_local_binding: bool,
    /// Host → `allow` or `deny`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domains: Option<Value>,
    /// Hosts whose first use Codex reviews (from its requirements).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_domains: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unix_sockets: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_masking: Option<bool>,
    /// Secrets of the caller's own naming to mask beside the built-in ones (Codex's
    /// `[features.network_proxy.credentials.NAME]`), by name.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "providers_as_the_reference_reads_them"
    )]
    pub credential_providers: Option<BTreeMap<String, CredentialProviderConfig>>,
}

/// `credentialProviders`, decoded from its own text: the reference reads it so, and its type
/// errors say so (`invalid type: integer `5``, where a number decoded in place is `number`).
fn providers_as_the_reference_reads_them<'de, D>(
    deserializer: D,
) -> Result<Option<BTreeMap<String, CredentialProviderConfig>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let Some(value) = Option::<Value>::deserialize(deserializer)? else { return Ok(None) };
    serde_json::from_str(&value.to_string()).map(Some).map_err(|error| {
        let words = error.to_string();
        let words = match error.line() {
            0 => words.as_str(),
            _ => words.rsplit_once(" at line ").map_or(words.as_str(), |(words, _)| words),
        };
        serde::de::Error::custom(words)
    })
}

/// One custom credential provider, as Codex 0.171 sends it (its config table's keys, in
/// snake case on the wire as in the TOML). Every member may be missing; one not listed here
/// refuses the start, as on the reference. Whether the provider can be honoured (a pattern
/// that compiles, a destination that may carry a secret) is decided when the proxy starts,
/// not here: the reference runs a start whose providers it cannot use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CredentialProviderConfig {
    /// The variables that may hold the secret.
    pub env: Vec<String>,
    /// Regular expressions a value must match as a whole to be this provider's secret.
    pub patterns: Vec<String>,
    /// Where the secret may be sent: `https://host[:port][/path]`, or `http://` to a loopback
    /// host; a bare host means `https://` (`http://` when it is a loopback one).
    pub url_prefixes: Vec<String>,
    /// A variable whose value is one more such prefix (or host).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url_prefix_from_env: Option<String>,
    /// How a request carries the secret; none means `bearer`.
    pub auth: Vec<CredentialAuthMethod>,
    /// The header `header` authentication puts the secret in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// What comes before the secret in that header's value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

/// Where a request carries a custom provider's secret, in the reference's order (which its
/// "unknown variant" error lists).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialAuthMethod {
    /// `Authorization: Bearer SECRET`.
    Bearer,
    /// `Authorization: token SECRET`.
    Token,
    /// `Authorization: Basic base64(…)`, the secret within the pair.
    Basic,
    /// The provider's own `header`, its value `prefix` then the secret.
    Header,
}

/// `full`: every method; `limited`: only reads (GET, HEAD, OPTIONS). In the reference's order,
/// which its "unknown variant" error lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    Limited,
    Full,
}

impl NetworkProxyLaunch {
    /// What the reference refuses in a launch before it starts anything, in its words (all
    /// `-32602`): transparent TCP without a sandbox to route, a proxy that is off, transparent
    /// TCP without the SOCKS5 listener it goes through.
    pub fn refusal(&self, sandboxed: bool) -> Option<&'static str> {
        let proxy = &self.proxy;
        if proxy.transparent_tcp && !sandboxed {
            return Some("transparent TCP requires a managed Linux sandbox");
        }
        if !proxy.enabled {
            return Some(
                "invalid network proxy config: executor-local network proxy launch requires an enabled proxy",
            );
        }
        if proxy.transparent_tcp && !proxy.enable_socks5 {
            return Some(
                "invalid network proxy config: transparent_tcp requires an enabled managed SOCKS5 proxy",
            );
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Decoded from a [`Value`], as the server decodes a request's params.
    fn launch(proxy: Value) -> Result<NetworkProxyLaunch, String> {
        serde_json::from_value(json!({"proxy": proxy})).map_err(|e| e.to_string())
    }

    fn proxy() -> Value {
        json!({"enabled": true, "enableSocks5": true, "enableSocks5Udp": false,
            "allowUpstreamProxy": false, "dangerouslyAllowAllUnixSockets": false,
            "mode": "full", "allowLocalBinding": false})
    }

    /// The reference's required members, each named when missing; `transparentTcp` is optional
    /// and must be a boolean.
    #[test]
    fn required_members_are_named_and_types_are_checked() {
        for member in ["enabled", "enableSocks5", "mode", "allowLocalBinding"] {
            let mut proxy = proxy();
            proxy.as_object_mut().unwrap().remove(member);
            assert_eq!(launch(proxy).unwrap_err(), format!("missing field `{member}`"));
        }
        assert!(!launch(proxy()).unwrap().proxy.transparent_tcp);
        let mut wrong = proxy();
        wrong["transparentTcp"] = json!("yes");
        assert_eq!(launch(wrong).unwrap_err(), "invalid type: string \"yes\", expected a boolean");
        let missing = serde_json::from_value::<NetworkProxyLaunch>(json!({})).unwrap_err();
        assert_eq!(missing.to_string(), "missing field `proxy`");
        let mut half = proxy();
        half["mode"] = json!("half");
        assert_eq!(
            launch(half).unwrap_err(),
            "unknown variant `half`, expected `limited` or `full`"
        );
        let with_providers = |providers: Value| {
            let mut proxy = proxy();
            proxy["credentialProviders"] = providers;
            launch(proxy)
        };
        for (providers, refusal) in [
            (json!(5), "invalid type: integer `5`, expected a map"),
            (
                json!({"x": 5}),
                "invalid type: integer `5`, expected struct CredentialProviderConfig",
            ),
            (
                json!({"x": {"auth": ["foo"]}}),
                "unknown variant `foo`, expected one of `bearer`, `token`, `basic`, `header`",
            ),
            (
                json!({"x": {"bogus": 1}}),
                "unknown field `bogus`, expected one of `env`, `patterns`, `url_prefixes`, `url_prefix_from_env`, `auth`, `header`, `prefix`",
            ),
        ] {
            assert_eq!(with_providers(providers).unwrap_err(), refusal);
        }
        let empty = with_providers(json!({"x": {}})).unwrap().proxy.credential_providers.unwrap();
        assert_eq!(empty["x"], CredentialProviderConfig::default());
        let null = launch(Value::Null).unwrap_err();
        assert_eq!(null, "invalid type: null, expected struct RemoteNetworkProxyConfig");
    }

    /// The reference's order: no sandbox first, then a proxy that is off, then SOCKS5.
    #[test]
    fn refusals_come_in_the_references_order() {
        let with = |changes: Value| {
            let mut proxy = proxy();
            for (key, value) in changes.as_object().unwrap() {
                proxy[key] = value.clone();
            }
            launch(proxy).unwrap()
        };
        let all_wrong =
            with(json!({"transparentTcp": true, "enabled": false, "enableSocks5": false}));
        assert_eq!(
            all_wrong.refusal(false),
            Some("transparent TCP requires a managed Linux sandbox")
        );
        assert!(all_wrong.refusal(true).unwrap().ends_with("requires an enabled proxy"));
        let no_socks = with(json!({"transparentTcp": true, "enableSocks5": false}));
        assert!(
            no_socks.refusal(true).unwrap().ends_with("requires an enabled managed SOCKS5 proxy")
        );
        assert_eq!(with(json!({"transparentTcp": true})).refusal(true), None);
        assert_eq!(with(json!({"enableSocks5": false})).refusal(false), None);
    }
}
