//! `process/start {networkProxy}`: the managed network proxy Codex asks an executor to launch
//! for one process (`networkProxyLaunch`), as Codex 0.171 sends it.
//!
//! The members Codex always sends are required, as the reference requires them, so a request
//! missing one is refused in the reference's words (`missing field `mode``) before anything
//! else is looked at. Members whose meaning a server needs only once it launches proxies are
//! carried as they came.

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_providers: Option<Value>,
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
