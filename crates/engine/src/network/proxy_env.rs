//! The variables a process launched behind its proxy is given, as the reference gives them
//! (measured on the wire against Codex 0.171's): every tool's proxy variable names the process's
//! HTTP proxy, the catch-all ones its SOCKS5 proxy when it has one, no destination is exempt
//! unless local binding is allowed, and markers say a managed proxy is in force.

use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Variables that name the HTTP proxy (`http://127.0.0.1:PORT`).
const HTTP_PROXY_VARIABLES: [&str; 21] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "WS_PROXY",
    "WSS_PROXY",
    "ws_proxy",
    "wss_proxy",
    "YARN_HTTP_PROXY",
    "YARN_HTTPS_PROXY",
    "NPM_CONFIG_PROXY",
    "NPM_CONFIG_HTTP_PROXY",
    "NPM_CONFIG_HTTPS_PROXY",
    "npm_config_proxy",
    "npm_config_http_proxy",
    "npm_config_https_proxy",
    "BUNDLE_HTTP_PROXY",
    "BUNDLE_HTTPS_PROXY",
    "PIP_PROXY",
    "DOCKER_HTTP_PROXY",
    "DOCKER_HTTPS_PROXY",
];

/// Variables that name the SOCKS5 proxy (`socks5h://`, names resolved by the proxy), or the
/// HTTP one when the launch has no SOCKS5.
const CATCH_ALL_VARIABLES: [&str; 4] = ["ALL_PROXY", "all_proxy", "FTP_PROXY", "ftp_proxy"];

/// Every variable that names a proxy, HTTP's and the catch-all ones.
pub(crate) fn proxy_variables() -> impl Iterator<Item = &'static str> {
    HTTP_PROXY_VARIABLES.into_iter().chain(CATCH_ALL_VARIABLES)
}

/// Variables listing the destinations reached without the proxy.
const NO_PROXY_VARIABLES: [&str; 5] =
    ["NO_PROXY", "no_proxy", "NPM_CONFIG_NOPROXY", "npm_config_noproxy", "BUNDLE_NO_PROXY"];

/// What goes around the proxy when local binding is allowed: the local and private ranges.
const LOCAL_DESTINATIONS: &str = "localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16";

/// Sets the proxy variables in a child's `env` (over any the caller sent: a process behind a
/// managed proxy must not be pointed elsewhere).
pub fn apply(
    env: &mut BTreeMap<String, String>,
    http: SocketAddr,
    socks: Option<SocketAddr>,
    allow_local: bool,
) {
    let http = format!("http://{http}");
    let catch_all = socks.map_or_else(|| http.clone(), |socks| format!("socks5h://{socks}"));
    let mut set = |name: &str, value: &str| {
        env.insert(name.to_owned(), value.to_owned());
    };
    HTTP_PROXY_VARIABLES.iter().for_each(|name| set(name, &http));
    CATCH_ALL_VARIABLES.iter().for_each(|name| set(name, &catch_all));
    let exempt = if allow_local { LOCAL_DESTINATIONS } else { "" };
    NO_PROXY_VARIABLES.iter().for_each(|name| set(name, exempt));
    set("CODEX_NETWORK_PROXY_ACTIVE", "1");
    set("CODEX_NETWORK_ALLOW_LOCAL_BINDING", if allow_local { "1" } else { "0" });
    set("NODE_USE_ENV_PROXY", "1");
    set("ELECTRON_GET_USE_PROXY", "true");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `env | sort` of the reference's child with a launch of no SOCKS5 and no local binding,
    /// its ports replaced by this test's (`PATH` was the caller's own).
    const WITHOUT_SOCKS: &str = "ALL_PROXY=http://127.0.0.1:44487
BUNDLE_HTTPS_PROXY=http://127.0.0.1:44487
BUNDLE_HTTP_PROXY=http://127.0.0.1:44487
BUNDLE_NO_PROXY=
CODEX_NETWORK_ALLOW_LOCAL_BINDING=0
CODEX_NETWORK_PROXY_ACTIVE=1
DOCKER_HTTPS_PROXY=http://127.0.0.1:44487
DOCKER_HTTP_PROXY=http://127.0.0.1:44487
ELECTRON_GET_USE_PROXY=true
FTP_PROXY=http://127.0.0.1:44487
HTTPS_PROXY=http://127.0.0.1:44487
HTTP_PROXY=http://127.0.0.1:44487
NODE_USE_ENV_PROXY=1
NO_PROXY=
NPM_CONFIG_HTTPS_PROXY=http://127.0.0.1:44487
NPM_CONFIG_HTTP_PROXY=http://127.0.0.1:44487
NPM_CONFIG_NOPROXY=
NPM_CONFIG_PROXY=http://127.0.0.1:44487
PATH=/usr/bin:/bin
PIP_PROXY=http://127.0.0.1:44487
WSS_PROXY=http://127.0.0.1:44487
WS_PROXY=http://127.0.0.1:44487
YARN_HTTPS_PROXY=http://127.0.0.1:44487
YARN_HTTP_PROXY=http://127.0.0.1:44487
all_proxy=http://127.0.0.1:44487
ftp_proxy=http://127.0.0.1:44487
http_proxy=http://127.0.0.1:44487
https_proxy=http://127.0.0.1:44487
no_proxy=
npm_config_http_proxy=http://127.0.0.1:44487
npm_config_https_proxy=http://127.0.0.1:44487
npm_config_noproxy=
npm_config_proxy=http://127.0.0.1:44487
ws_proxy=http://127.0.0.1:44487
wss_proxy=http://127.0.0.1:44487";

    fn sorted(env: &BTreeMap<String, String>) -> String {
        env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn the_variables_are_the_references() {
        let mut env = BTreeMap::from([
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
            ("HTTP_PROXY".to_owned(), "http://elsewhere:3128".to_owned()),
        ]);
        apply(&mut env, "127.0.0.1:44487".parse().unwrap(), None, false);
        assert_eq!(sorted(&env), WITHOUT_SOCKS);
    }

    #[test]
    fn socks5_takes_the_catch_all_variables_and_local_binding_exempts_local_ranges() {
        let mut env = BTreeMap::new();
        let socks = Some("127.0.0.1:42373".parse().unwrap());
        apply(&mut env, "127.0.0.1:36053".parse().unwrap(), socks, true);
        for name in CATCH_ALL_VARIABLES {
            assert_eq!(env[name], "socks5h://127.0.0.1:42373", "{name}");
        }
        assert_eq!(env["HTTPS_PROXY"], "http://127.0.0.1:36053");
        assert_eq!(
            env["no_proxy"],
            "localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"
        );
        assert_eq!(env["CODEX_NETWORK_ALLOW_LOCAL_BINDING"], "1");
        assert_eq!(env.len(), 34);
    }
}
