//! Credential masking (`networkProxy.proxy.credentialMasking`): API keys a command can use
//! but never read, as the reference masks them.
//!
//! - The child's environment holds a placeholder in place of each bound secret: the secret's
//!   own prefix (`ghp_`, `sk-proj-`), `masked`, then random letters and digits to the
//!   secret's length — the same placeholder for the same secret in every process of the
//!   server. Any other variable holding the secret gets the same replacement. Markers say so
//!   (`CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE`, `CODEX_NETWORK_PROXY_BROKERED_CREDENTIALS`).
//! - The proxy terminates TLS for the hosts a secret is bound to, and only those ([`ca`]: a
//!   CA made in memory, its key never written; [`tls`]), and puts the real secret back in
//!   the request's headers on the way out. Plain HTTP is never rewritten: a secret never
//!   travels in the clear.
//! - The child trusts that CA through the variables tools read for a CA bundle (the system's
//!   roots with the CA's certificate, written under `$CODEX_HOME/proxy`).
//!
//! Built-in bindings (`GH_TOKEN`/`GITHUB_TOKEN` → GitHub's API hosts and `*.ghe.com`,
//! `GH_ENTERPRISE_TOKEN`/`GITHUB_ENTERPRISE_TOKEN` → `$GH_HOST`, `OPENAI_API_KEY` →
//! `api.openai.com`), unmasked in any header of a request to those hosts; and the caller's
//! own ([`providers`]: `credentialProviders`), unmasked only in the header each names and only
//! on the way to the URL prefixes each lists.

pub mod ca;
pub mod providers;
pub mod tls;

use http::header::{HeaderMap, HeaderValue};
use providers::{Outgoing, Provider, ProviderBinding};

use std::collections::{BTreeMap, HashMap};
use std::io::Read as _;
use std::sync::{Mutex, OnceLock};

/// Where a secret may be sent: a host exactly, or any name below a domain.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bound {
    Exact(String),
    Below(String),
}

impl Bound {
    fn matches(&self, host: &str) -> bool {
        match self {
            Bound::Exact(name) => host.eq_ignore_ascii_case(name),
            Bound::Below(domain) => {
                let host = host.to_ascii_lowercase();
                host.len() > domain.len() + 1
                    && host.ends_with(domain.as_str())
                    && host.as_bytes()[host.len() - domain.len() - 1] == b'.'
            }
        }
    }
}

/// The variables masked, and where each may go.
fn bindings(env: &BTreeMap<String, String>) -> Vec<(&'static str, Vec<Bound>)> {
    let github = || {
        ["github.com", "api.github.com", "uploads.github.com"]
            .map(|host| Bound::Exact(host.into()))
            .into_iter()
            .chain([Bound::Below("ghe.com".into())])
            .collect::<Vec<_>>()
    };
    let enterprise = || {
        env.get("GH_HOST")
            .filter(|host| !host.is_empty())
            .map(|host| vec![Bound::Exact(host.to_ascii_lowercase())])
            .unwrap_or_default()
    };
    vec![
        ("GH_TOKEN", github()),
        ("GITHUB_TOKEN", github()),
        ("GH_ENTERPRISE_TOKEN", enterprise()),
        ("GITHUB_ENTERPRISE_TOKEN", enterprise()),
        ("OPENAI_API_KEY", vec![Bound::Exact("api.openai.com".into())]),
    ]
}

/// One masked secret.
#[derive(Clone)]
struct Secret {
    value: String,
    placeholder: String,
    /// Built-in bindings: hosts any header of a request to may carry the secret.
    hosts: Vec<Bound>,
    /// Custom providers' bindings: where, and in which header.
    providers: Vec<ProviderBinding>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the value: this type may end up in a log line.
        f.debug_struct("Secret").field("placeholder", &self.placeholder).finish_non_exhaustive()
    }
}

/// A launch's masked secrets.
#[derive(Debug, Clone, Default)]
pub struct Masking {
    secrets: Vec<Secret>,
}

/// The variables that point tools at a CA bundle (the reference's list).
const CA_BUNDLE_VARIABLES: [&str; 13] = [
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
    "NPM_CONFIG_CAFILE",
    "npm_config_cafile",
    "BUNDLE_SSL_CA_CERT",
    "CODEX_CA_CERTIFICATE",
    "PIP_CERT",
    "DENO_CERT",
    "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE",
];

impl Masking {
    /// Masks the bound secrets of a child's `env` in place, sets the markers and the CA
    /// bundle variables (`bundle`: the bundle's path), and returns what the proxy needs to
    /// put the secrets back.
    /// `providers`: the launch's custom providers, already compiled.
    pub fn apply(env: &mut BTreeMap<String, String>, bundle: &str, providers: &[Provider]) -> Self {
        let mut secrets: Vec<Secret> = Vec::new();
        let mut brokered: Vec<(String, String)> = Vec::new();
        for (name, hosts) in bindings(env) {
            let Some(value) = env.get(name).filter(|value| !value.is_empty()).cloned() else {
                continue;
            };
            let placeholder = placeholder_for(&value);
            brokered.push((format!("@alias:{name}"), placeholder.clone()));
            brokered.push((name.to_owned(), placeholder.clone()));
            match secrets.iter_mut().find(|secret| secret.value == value) {
                Some(secret) => secret.hosts.extend(hosts),
                None => secrets.push(Secret { value, placeholder, hosts, providers: Vec::new() }),
            }
        }
        for provider in providers {
            let Some(binding) = provider.binding(env) else { continue };
            for (name, value, pattern) in provider.secrets_in(env) {
                let placeholder = match secrets.iter().find(|secret| secret.value == value) {
                    Some(secret) => secret.placeholder.clone(),
                    None => placeholder_fitting(value, pattern),
                };
                brokered.push((format!("@alias:{name}"), placeholder.clone()));
                brokered.push((name.to_owned(), placeholder.clone()));
                match secrets.iter_mut().find(|secret| secret.value == value) {
                    Some(secret) => secret.providers.push(binding.clone()),
                    None => secrets.push(Secret {
                        value: value.to_owned(),
                        placeholder,
                        hosts: Vec::new(),
                        providers: vec![binding.clone()],
                    }),
                }
            }
        }
        // Every variable holding a secret, the bound ones included, gets its placeholder.
        for value in env.values_mut() {
            for secret in &secrets {
                if value.contains(&secret.value) {
                    *value = value.replace(&secret.value, &secret.placeholder);
                }
            }
        }
        // In the reference's order: by name, the aliases (`@alias:…`) first.
        brokered.sort();
        brokered.dedup();
        env.insert("CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE".into(), "1".into());
        env.insert(
            "CODEX_NETWORK_PROXY_BROKERED_CREDENTIALS".into(),
            serde_json::to_string(&brokered).unwrap_or_default(),
        );
        for name in CA_BUNDLE_VARIABLES {
            env.insert(name.into(), bundle.into());
        }
        Self { secrets }
    }

    /// Whether some secret may go through a tunnel to `host:port`: the tunnel is opened and
    /// what goes through it rewritten.
    pub fn binds(&self, host: &str, port: u16) -> bool {
        self.secrets.iter().any(|secret| {
            secret.hosts.iter().any(|bound| bound.matches(host))
                || secret.providers.iter().any(|binding| binding.reaches(true, host, port))
        })
    }

    /// Whether some secret may go in a plain request to `host:port` (a custom provider's
    /// `http://` destination on loopback): that request is rewritten.
    pub fn binds_plain(&self, host: &str, port: u16) -> bool {
        self.secrets
            .iter()
            .any(|secret| secret.providers.iter().any(|binding| binding.reaches(false, host, port)))
    }

    /// Puts every secret that may go where `to` goes back into `headers`: a built-in one in
    /// any header (inside a tunnel only), a provider's in the header it names.
    pub fn unmask_request(&self, to: Outgoing<'_>, headers: &mut HeaderMap) {
        if to.secure {
            for value in headers.values_mut() {
                if let Some(unmasked) = self.unmask(to.host, value.as_bytes())
                    && let Ok(unmasked) = HeaderValue::from_bytes(&unmasked)
                {
                    *value = unmasked;
                }
            }
        }
        for secret in &self.secrets {
            for binding in &secret.providers {
                binding.unmask(to, headers, &secret.placeholder, &secret.value);
            }
        }
    }

    /// `value` with the placeholder of every built-in secret bound to `host` replaced by the
    /// secret; `None` when it holds none.
    fn unmask(&self, host: &str, value: &[u8]) -> Option<Vec<u8>> {
        let mut out: Option<Vec<u8>> = None;
        for secret in &self.secrets {
            if !secret.hosts.iter().any(|bound| bound.matches(host)) {
                continue;
            }
            let current = out.as_deref().unwrap_or(value);
            let placeholder = secret.placeholder.as_bytes();
            if memchr::memmem::find(current, placeholder).is_none() {
                continue;
            }
            let mut replaced = Vec::with_capacity(current.len());
            let mut rest = current;
            while let Some(at) = memchr::memmem::find(rest, placeholder) {
                replaced.extend_from_slice(&rest[..at]);
                replaced.extend_from_slice(secret.value.as_bytes());
                rest = &rest[at + placeholder.len()..];
            }
            replaced.extend_from_slice(rest);
            out = Some(replaced);
        }
        out
    }
}

/// Secrets whose placeholders are remembered. A server sees a handful (its own environment's);
/// a client that sends a new value with every start must not grow this without end: past it,
/// the placeholders are made afresh.
const MAX_REMEMBERED_SECRETS: usize = 1024;

/// The placeholder of `secret`, the same for the same secret while the server remembers it.
fn placeholder_for(secret: &str) -> String {
    remembered(secret, |known| known.is_some(), || new_placeholder(secret))
}

/// The placeholder remembered for `secret` if `keep` accepts it (given `None` when there is
/// none), else one `make` makes, remembered from then on.
fn remembered(
    secret: &str,
    keep: impl FnOnce(Option<&str>) -> bool,
    make: impl FnOnce() -> String,
) -> String {
    static MADE: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    let made = MADE.get_or_init(Default::default);
    let mut made = made.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(known) = made.get(secret).filter(|known| keep(Some(known.as_str()))) {
        return known.clone();
    }
    if made.len() >= MAX_REMEMBERED_SECRETS && !made.contains_key(secret) {
        made.clear();
    }
    let placeholder = make();
    made.insert(secret.to_owned(), placeholder.clone());
    placeholder
}

/// The placeholder of a custom provider's `secret`: one of the secret's own shape that its
/// `pattern` accepts ([`providers::placeholder_matching`]: random letters and digits where the
/// secret has them, as the reference's are random values of the pattern), remembered as the
/// built-in ones are; else the usual one (a tool that checks the shape may refuse it; the
/// secret stays masked).
fn placeholder_fitting(secret: &str, pattern: &regex::Regex) -> String {
    remembered(
        secret,
        |known| known.is_some_and(|known| pattern.is_match(known)),
        || {
            providers::placeholder_matching(secret, pattern)
                .unwrap_or_else(|| new_placeholder(secret))
        },
    )
}

/// `prefix` + `masked` + random letters and digits up to the secret's length.
fn new_placeholder(secret: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut placeholder = format!("{}masked", prefix_of(secret));
    let wanted = secret.chars().count().saturating_sub(placeholder.len());
    let mut random = vec![0u8; wanted];
    fill_random(&mut random);
    placeholder.extend(random.iter().map(|byte| ALPHABET[*byte as usize % ALPHABET.len()] as char));
    placeholder
}

/// Random bytes for placeholders. /dev/urandom does not fail on Linux; an unreadable one
/// leaves zeros, which still hold no secret.
fn fill_random(bytes: &mut [u8]) {
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(bytes));
}

/// The kind a secret announces at its start: lower-case words ending in `_` or `-`, within
/// the first 12 characters (`ghp_`, `sk-proj-`, `github_pat_`); empty when there is none.
fn prefix_of(secret: &str) -> &str {
    let head = &secret[..secret.char_indices().nth(12).map_or(secret.len(), |(at, _)| at)];
    let Some(end) = head.rfind(['_', '-']) else { return "" };
    let prefix = &head[..=end];
    match prefix.bytes().all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'-') {
        true => prefix,
        false => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn placeholders_keep_the_prefix_and_the_length() {
        for (secret, prefix) in [
            ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_masked"),
            ("sk-proj-Abc123_def-456", "sk-proj-masked"),
            ("github_pat_11ABCDEFG_hijklmnop", "github_pat_masked"),
            ("ABCDEF-secret", "masked"),
        ] {
            let placeholder = new_placeholder(secret);
            assert!(placeholder.starts_with(prefix), "{placeholder}");
            assert_eq!(placeholder.len(), secret.len().max(prefix.len()), "{placeholder}");
            assert!(!placeholder.contains(&secret[prefix.len().saturating_sub(6)..]));
        }
        assert_eq!(placeholder_for("same-secret-value"), placeholder_for("same-secret-value"));
    }

    /// The child sees placeholders only, wherever the secret was; the markers name them; the
    /// secret goes back only into what is sent to a host it is bound to.
    #[test]
    fn secrets_are_masked_everywhere_and_unmasked_only_for_their_hosts() {
        let token = "ghp_realrealrealrealrealrealrealrealreal";
        let mut child = env(&[
            ("GITHUB_TOKEN", token),
            ("OTHER", &format!("x-{token}-y")),
            ("OPENAI_API_KEY", "sk-proj-key"),
            ("PATH", "/usr/bin"),
        ]);
        let masking = Masking::apply(&mut child, "/ca/bundle.pem", &[]);
        let placeholder = child["GITHUB_TOKEN"].clone();
        assert!(placeholder.starts_with("ghp_masked") && placeholder.len() == token.len());
        assert_eq!(child["OTHER"], format!("x-{placeholder}-y"));
        assert!(child.values().all(|value| !value.contains(token)));
        assert_eq!(child["SSL_CERT_FILE"], "/ca/bundle.pem");
        assert_eq!(child["CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE"], "1");
        let brokered: Vec<(String, String)> =
            serde_json::from_str(&child["CODEX_NETWORK_PROXY_BROKERED_CREDENTIALS"]).unwrap();
        let names: Vec<&str> = brokered.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            ["@alias:GITHUB_TOKEN", "@alias:OPENAI_API_KEY", "GITHUB_TOKEN", "OPENAI_API_KEY"]
        );
        assert_eq!(brokered[0].1, placeholder);
        assert_eq!(brokered[2].1, placeholder);
        let header = format!("Bearer {placeholder}");
        for host in ["api.github.com", "GitHub.com", "x.ghe.com"] {
            assert!(masking.binds(host, 443), "{host}");
            let unmasked = masking.unmask(host, header.as_bytes()).unwrap();
            assert_eq!(unmasked, format!("Bearer {token}").into_bytes());
        }
        for host in ["example.com", "ghe.com", "api.github.com.evil.test", "api.openai.com"] {
            assert_eq!(masking.unmask(host, header.as_bytes()), None, "{host}");
        }
        assert!(!masking.binds("example.com", 443));
    }

    #[test]
    fn an_enterprise_token_is_bound_to_gh_host_only() {
        let mut child =
            env(&[("GH_ENTERPRISE_TOKEN", "enterprise-value"), ("GH_HOST", "ghe.corp.test")]);
        let masking = Masking::apply(&mut child, "/b", &[]);
        assert!(masking.binds("ghe.corp.test", 443));
        assert!(!masking.binds("github.com", 443));
        let mut without_host = env(&[("GH_ENTERPRISE_TOKEN", "enterprise-value")]);
        assert!(!Masking::apply(&mut without_host, "/b", &[]).binds("github.com", 443));
    }
}
