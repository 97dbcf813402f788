//! Custom credential providers (`networkProxy.proxy.credentialProviders`, Codex's
//! `[features.network_proxy.credentials.NAME]`): secrets of the caller's naming, masked as the
//! built-in ones are, each put back only into the header its provider names and only on the
//! way to the URL prefixes it lists.
//!
//! A provider is compiled once per launch ([`Provider::compile`]). One that cannot be honoured
//! — no variable, no pattern, a pattern that does not compile, no destination that may carry
//! a secret — is left out and named in the server's log, and its variables reach the command
//! as they are: the reference runs such a start too (and 0.171's masks no custom provider at
//! all), so refusing it would stop a Codex command the reference runs.
//!
//! What a provider promises, and how it is kept:
//! - **Which values.** A variable listed in `env` is masked when its whole value matches one
//!   of `patterns`; the placeholder matches that pattern too where one can be made by
//!   changing only letters and digits ([`placeholder_matching`]), so a tool that checks a
//!   key's shape accepts it.
//! - **Where.** `url_prefixes` (and the value of `url_prefix_from_env`): `https://` to any
//!   host, `http://` only to a loopback one — a secret never crosses a network in the clear.
//!   A request matches a destination by scheme, host, port and a path prefix that ends at a
//!   segment (`/v1` covers `/v1` and `/v1/…`, not `/v10`).
//! - **In what.** Only the header `auth` names (`Authorization` as `Bearer`, `token` or
//!   `Basic`; or the provider's `header` with its `prefix`): the placeholder anywhere else in
//!   the request goes on as it is.

use std::net::IpAddr;

use base64::Engine as _;
use http::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use tether_protocol::network_proxy::{CredentialAuthMethod, CredentialProviderConfig};

/// Providers one launch may name. Codex sends the few a user configured; past this many, the
/// rest are left out rather than compiled (each costs regular expressions).
pub const MAX_PROVIDERS: usize = 64;

/// Longest pattern compiled: secrets' shapes are short expressions; a long one is a mistake
/// or an attempt to make the proxy build a large automaton.
const MAX_PATTERN_BYTES: usize = 1024;

/// The most memory one compiled pattern may take (the regex crate's own limits, which keep
/// matching linear in the value's length whatever the pattern).
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// Variables, patterns and destinations one provider may list: far more than a provider
/// needs, few enough that a launch's masking stays cheap.
const MAX_ENTRIES: usize = 32;

/// Tries at a placeholder that matches the secret's pattern before settling for one that
/// keeps only its prefix and length.
const PLACEHOLDER_TRIES: usize = 32;

/// The built-in masked variables and the one that binds them: a provider may not take them.
pub(super) const BUILT_IN_VARIABLES: [&str; 6] = [
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "GH_ENTERPRISE_TOKEN",
    "GITHUB_ENTERPRISE_TOKEN",
    "OPENAI_API_KEY",
    "GH_HOST",
];

/// Why a provider is left out, in the reference's words where it has them.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unusable {
    #[error("credential provider `{0}` has no environment keys")]
    NoVariables(String),
    #[error("credential provider `{0}` has no credential patterns")]
    NoPatterns(String),
    #[error("credential provider `{0}` has no destination URL prefixes")]
    NoDestinations(String),
    #[error("credential provider `{0}` has an invalid environment key")]
    BadVariable(String),
    #[error("credential provider `{0}` overlaps a built-in credential source")]
    BuiltIn(String),
    #[error("credential provider `{0}` has an invalid host environment key")]
    BadDestinationVariable(String),
    #[error("invalid destination for credential provider `{0}`: {1}")]
    BadDestination(String, DestinationError),
    #[error("invalid header for credential provider `{0}`")]
    BadHeader(String),
    #[error(
        "credential provider `{0}` requires a header name exactly when using header authentication"
    )]
    HeaderWithoutMethod(String),
    #[error("credential provider `{0}` requires header authentication to use a header prefix")]
    PrefixWithoutHeader(String),
    #[error("invalid credential pattern for provider `{0}`")]
    BadPattern(String),
    #[error(
        "credential provider `{0}` lists more than {MAX_ENTRIES} variables, patterns or destinations"
    )]
    TooMany(String),
}

/// Why a destination cannot carry a secret.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DestinationError {
    #[error("not a URL")]
    NotUrl,
    #[error("credential destination must use HTTPS unless it targets loopback over HTTP")]
    InClear,
    #[error("credential destination has no hostname")]
    NoHost,
    #[error("credential destination cannot include user information, a query, or a fragment")]
    Extras,
}

/// Where a secret may go: a scheme, an exact host, a port and a path prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    secure: bool,
    host: String,
    port: u16,
    /// Without a trailing `/`; empty for the whole host.
    path: String,
}

impl Destination {
    /// `https://host[:port][/path]`, `http://` to a loopback host, or a bare `host[:port][/path]`
    /// (`https://`, or `http://` when the host is a loopback one).
    pub fn parse(text: &str) -> Result<Self, DestinationError> {
        let text = text.trim();
        let url = match text.contains("://") {
            true => url::Url::parse(text),
            false => {
                let bare = url::Url::parse(&format!("https://{text}"))
                    .map_err(|_| DestinationError::NotUrl)?;
                let scheme = match bare.host().is_some_and(|host| is_loopback(&host)) {
                    true => "http",
                    false => "https",
                };
                url::Url::parse(&format!("{scheme}://{text}"))
            }
        }
        .map_err(|_| DestinationError::NotUrl)?;
        let host = url.host().ok_or(DestinationError::NoHost)?;
        if !url.username().is_empty()
            || url.password().is_some()
            || url.query().is_some()
            || url.fragment().is_some()
        {
            return Err(DestinationError::Extras);
        }
        let secure = match url.scheme() {
            "https" => true,
            "http" if is_loopback(&host) => false,
            _ => return Err(DestinationError::InClear),
        };
        let port = url.port_or_known_default().ok_or(DestinationError::NotUrl)?;
        let host = match host {
            url::Host::Ipv6(address) => address.to_string(),
            other => other.to_string().to_ascii_lowercase(),
        };
        Ok(Self { secure, host, port, path: url.path().trim_end_matches('/').to_owned() })
    }

    /// Whether a connection to `host:port` (over TLS when `secure`) may carry the secret to
    /// some path.
    fn reaches(&self, secure: bool, host: &str, port: u16) -> bool {
        self.secure == secure
            && self.port == port
            && self.host.eq_ignore_ascii_case(host.trim_start_matches('[').trim_end_matches(']'))
    }

    /// Whether a request to `path` on such a connection is within the prefix. A path with a
    /// dot segment (`..` or `.`, plain or percent-encoded) never is: the origin would resolve
    /// `/v1/../admin` out of the prefix that the text seems to be under.
    fn covers(&self, path: &str) -> bool {
        let path_only = path.split(['?', '#']).next().unwrap_or_default();
        let dotted = path_only.split('/').any(|segment| {
            let segment = segment.to_ascii_lowercase().replace("%2e", ".");
            segment == "." || segment == ".."
        });
        if dotted {
            return false;
        }
        match path.strip_prefix(self.path.as_str()) {
            Some(rest) => rest.is_empty() || rest.starts_with('/') || rest.starts_with('?'),
            None => false,
        }
    }
}

fn is_loopback(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Domain(name) => name.eq_ignore_ascii_case("localhost"),
        url::Host::Ipv4(address) => IpAddr::V4(*address).is_loopback(),
        url::Host::Ipv6(address) => IpAddr::V6(*address).is_loopback(),
    }
}

/// A request as the proxy sees it on its way out.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    /// Inside a tunnel the proxy opened (TLS to the host), or a plain forward request.
    pub secure: bool,
    pub host: &'a str,
    pub port: u16,
    /// The request target's path (and query).
    pub path: &'a str,
}

/// A provider ready to mask.
#[derive(Debug)]
pub struct Provider {
    variables: Vec<String>,
    patterns: Vec<regex::Regex>,
    destinations: Vec<Destination>,
    destination_variable: Option<String>,
    methods: Vec<CredentialAuthMethod>,
    header: Option<HeaderName>,
    prefix: String,
}

impl Provider {
    /// Compiles `config`, or says why it cannot be honoured. `header` set with no `auth`
    /// means header authentication: what someone writing `header = "x-api-key"` meant.
    pub fn compile(name: &str, config: &CredentialProviderConfig) -> Result<Self, Unusable> {
        let named = || name.to_owned();
        if config.env.is_empty() {
            return Err(Unusable::NoVariables(named()));
        }
        if config.patterns.is_empty() {
            return Err(Unusable::NoPatterns(named()));
        }
        if config.url_prefixes.is_empty() && config.url_prefix_from_env.is_none() {
            return Err(Unusable::NoDestinations(named()));
        }
        if [config.env.len(), config.patterns.len(), config.url_prefixes.len()]
            .iter()
            .any(|count| *count > MAX_ENTRIES)
        {
            return Err(Unusable::TooMany(named()));
        }
        if !config.env.iter().all(|key| valid_variable(key)) {
            return Err(Unusable::BadVariable(named()));
        }
        if config.env.iter().any(|key| BUILT_IN_VARIABLES.contains(&key.as_str())) {
            return Err(Unusable::BuiltIn(named()));
        }
        if let Some(key) = &config.url_prefix_from_env
            && (!valid_variable(key) || config.env.contains(key))
        {
            return Err(Unusable::BadDestinationVariable(named()));
        }
        let destinations = config
            .url_prefixes
            .iter()
            .map(|prefix| Destination::parse(prefix))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| Unusable::BadDestination(named(), error))?;
        let header = config
            .header
            .as_deref()
            .map(|header| HeaderName::from_bytes(header.as_bytes()))
            .transpose()
            .map_err(|_| Unusable::BadHeader(named()))?;
        let methods = match (config.auth.is_empty(), &header) {
            (true, Some(_)) => vec![CredentialAuthMethod::Header],
            (true, None) => vec![CredentialAuthMethod::Bearer],
            (false, _) => config.auth.clone(),
        };
        if methods.contains(&CredentialAuthMethod::Header) != header.is_some() {
            return Err(Unusable::HeaderWithoutMethod(named()));
        }
        if config.prefix.is_some() && header.is_none() {
            return Err(Unusable::PrefixWithoutHeader(named()));
        }
        let patterns = config
            .patterns
            .iter()
            .map(|pattern| whole_value(pattern))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Unusable::BadPattern(named()))?;
        Ok(Self {
            variables: config.env.clone(),
            patterns,
            destinations,
            destination_variable: config.url_prefix_from_env.clone(),
            methods,
            header,
            prefix: config.prefix.clone().unwrap_or_default(),
        })
    }

    /// The variables this provider masks in `env`, each with the pattern its value matched.
    pub(super) fn secrets_in<'e>(
        &self,
        env: &'e std::collections::BTreeMap<String, String>,
    ) -> Vec<(&'e str, &'e str, &regex::Regex)> {
        self.variables
            .iter()
            .filter_map(|name| env.get_key_value(name))
            .filter_map(|(name, value)| {
                let pattern = self.patterns.iter().find(|pattern| pattern.is_match(value))?;
                Some((name.as_str(), value.as_str(), pattern))
            })
            .collect()
    }

    /// Where this launch's secrets of this provider may go: the listed prefixes and the one
    /// `url_prefix_from_env` names in `env`, if it is one.
    pub(super) fn binding(
        &self,
        env: &std::collections::BTreeMap<String, String>,
    ) -> Option<ProviderBinding> {
        let mut destinations = self.destinations.clone();
        let named = self.destination_variable.as_ref().and_then(|key| env.get(key));
        if let Some(destination) = named.and_then(|text| Destination::parse(text).ok())
            && !destinations.contains(&destination)
        {
            destinations.push(destination);
        }
        (!destinations.is_empty()).then(|| ProviderBinding {
            destinations,
            methods: self.methods.clone(),
            header: self.header.clone(),
            prefix: self.prefix.clone(),
        })
    }
}

/// A pattern anchored at both ends, within this module's limits.
fn whole_value(pattern: &str) -> Option<regex::Regex> {
    if pattern.len() > MAX_PATTERN_BYTES {
        return None;
    }
    let whole = regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(PATTERN_SIZE_LIMIT)
        .dfa_size_limit(PATTERN_SIZE_LIMIT)
        .build()
        .ok()?;
    (!whole.is_match("")).then_some(whole)
}

fn valid_variable(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|first| first == '_' || first.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Where one provider's secret may go and in what.
#[derive(Debug, Clone)]
pub(super) struct ProviderBinding {
    destinations: Vec<Destination>,
    methods: Vec<CredentialAuthMethod>,
    header: Option<HeaderName>,
    prefix: String,
}

impl ProviderBinding {
    /// Whether a connection to `host:port` may carry the secret (the proxy then opens the
    /// tunnel, or rewrites the plain request).
    pub(super) fn reaches(&self, secure: bool, host: &str, port: u16) -> bool {
        self.destinations.iter().any(|d| d.reaches(secure, host, port))
    }

    /// Puts `secret` back for `placeholder` in the headers this binding names, when the
    /// request goes where it may.
    pub(super) fn unmask(
        &self,
        to: Outgoing<'_>,
        headers: &mut HeaderMap,
        placeholder: &str,
        secret: &str,
    ) {
        if !self
            .destinations
            .iter()
            .any(|d| d.reaches(to.secure, to.host, to.port) && d.covers(to.path))
        {
            return;
        }
        for method in &self.methods {
            let (name, value) = match method {
                CredentialAuthMethod::Header => {
                    let Some(name) = &self.header else { continue };
                    let Some(value) = headers.get(name).and_then(|v| v.to_str().ok()) else {
                        continue;
                    };
                    if value != format!("{}{placeholder}", self.prefix) {
                        continue;
                    }
                    (name.clone(), format!("{}{secret}", self.prefix))
                }
                scheme => {
                    let Some(value) = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok())
                    else {
                        continue;
                    };
                    let Some(value) = authorization(*scheme, value, placeholder, secret) else {
                        continue;
                    };
                    (AUTHORIZATION, value)
                }
            };
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        }
    }
}

/// An `Authorization` value of `scheme` carrying `placeholder`, with `secret` in its place.
fn authorization(
    scheme: CredentialAuthMethod,
    value: &str,
    placeholder: &str,
    secret: &str,
) -> Option<String> {
    let (given, credentials) = value.split_once(' ')?;
    let credentials = credentials.trim();
    let wanted = match scheme {
        CredentialAuthMethod::Bearer => "Bearer",
        CredentialAuthMethod::Token => "token",
        CredentialAuthMethod::Basic => "Basic",
        CredentialAuthMethod::Header => return None,
    };
    if !given.eq_ignore_ascii_case(wanted) {
        return None;
    }
    match scheme {
        CredentialAuthMethod::Basic => {
            let engine = base64::engine::general_purpose::STANDARD;
            let pair = String::from_utf8(engine.decode(credentials).ok()?).ok()?;
            // The secret is the whole pair, or one side of it.
            let restored = match pair.split_once(':') {
                _ if pair == placeholder => secret.to_owned(),
                Some((user, password)) if password == placeholder => format!("{user}:{secret}"),
                Some((user, password)) if user == placeholder => format!("{secret}:{password}"),
                _ => return None,
            };
            Some(format!("{given} {}", engine.encode(restored)))
        }
        _ => (credentials == placeholder).then(|| format!("{given} {secret}")),
    }
}

/// A placeholder for `secret` that `pattern` accepts: `secret`'s own prefix kept, every other
/// letter and digit replaced by a random one of its kind (upper, lower, digit), every other
/// character kept. `None` when no such placeholder matches within [`PLACEHOLDER_TRIES`].
pub(super) fn placeholder_matching(secret: &str, pattern: &regex::Regex) -> Option<String> {
    let keep = super::prefix_of(secret).len();
    let mut random = vec![0u8; secret.len()];
    (0..PLACEHOLDER_TRIES).find_map(|_| {
        super::fill_random(&mut random);
        let candidate: String = secret
            .char_indices()
            .zip(random.iter())
            .map(|((at, c), byte)| match c {
                _ if at < keep => c,
                'A'..='Z' => (b'A' + byte % 26) as char,
                'a'..='z' => (b'a' + byte % 26) as char,
                '0'..='9' => (b'0' + byte % 10) as char,
                other => other,
            })
            .collect();
        (candidate != secret && pattern.is_match(&candidate)).then_some(candidate)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(config: serde_json::Value) -> Result<Provider, Unusable> {
        Provider::compile("vendor", &serde_json::from_value(config).unwrap())
    }

    fn outgoing<'a>(host: &'a str, path: &'a str) -> Outgoing<'a> {
        Outgoing { secure: true, host, port: 443, path }
    }

    #[test]
    fn destinations_are_https_or_loopback_http_without_extras() {
        let parsed = |text: &str| Destination::parse(text);
        let https = parsed("https://API.vendor.example/v1/").unwrap();
        assert_eq!(
            (https.secure, https.host.as_str(), https.port),
            (true, "api.vendor.example", 443)
        );
        assert_eq!(https.path, "/v1");
        assert!(parsed("api.vendor.example").unwrap().secure);
        let loopback = parsed("127.0.0.1:8080/api").unwrap();
        assert_eq!((loopback.secure, loopback.port, loopback.path.as_str()), (false, 8080, "/api"));
        assert!(!parsed("http://[::1]:9/").unwrap().secure);
        assert_eq!(parsed("http://api.vendor.example/"), Err(DestinationError::InClear));
        assert_eq!(parsed("ftp://api.vendor.example/"), Err(DestinationError::InClear));
        assert_eq!(parsed("https://u:p@api.vendor.example/"), Err(DestinationError::Extras));
        assert_eq!(parsed("https://api.vendor.example/?q=1"), Err(DestinationError::Extras));
        assert_eq!(parsed("https://"), Err(DestinationError::NotUrl));
    }

    #[test]
    fn a_prefix_covers_its_own_segments_only() {
        let d = Destination::parse("https://api.vendor.example/v1").unwrap();
        for path in ["/v1", "/v1/", "/v1/charges", "/v1?x=1"] {
            assert!(d.covers(path), "{path}");
        }
        for path in ["/v10", "/v2/v1", "/", "", "/v1/../admin", "/v1/%2E%2e/admin", "/v1/./x"] {
            assert!(!d.covers(path), "{path}");
        }
        assert!(Destination::parse("api.vendor.example").unwrap().covers("/anything"));
        assert!(!d.reaches(true, "api.vendor.example", 8443));
        assert!(!d.reaches(false, "api.vendor.example", 443));
        assert!(d.reaches(true, "API.Vendor.Example", 443));
    }

    /// Each reason a provider cannot be honoured, in the reference's words.
    #[test]
    fn unusable_providers_say_why() {
        let base = serde_json::json!({"env": ["VENDOR_KEY"], "patterns": ["vk_[a-z]{8}"],
            "url_prefixes": ["https://api.vendor.example/v1"]});
        let with = |key: &str, value: serde_json::Value| {
            let mut config = base.clone();
            config[key] = value;
            provider(config).unwrap_err().to_string()
        };
        assert!(provider(base.clone()).is_ok());
        assert_eq!(
            with("env", serde_json::json!([])),
            "credential provider `vendor` has no environment keys"
        );
        assert_eq!(
            with("patterns", serde_json::json!([])),
            "credential provider `vendor` has no credential patterns"
        );
        assert_eq!(
            with("url_prefixes", serde_json::json!([])),
            "credential provider `vendor` has no destination URL prefixes"
        );
        assert_eq!(
            with("env", serde_json::json!(["1X"])),
            "credential provider `vendor` has an invalid environment key"
        );
        assert_eq!(
            with("env", serde_json::json!(["GITHUB_TOKEN"])),
            "credential provider `vendor` overlaps a built-in credential source"
        );
        assert_eq!(
            with("url_prefix_from_env", serde_json::json!("VENDOR_KEY")),
            "credential provider `vendor` has an invalid host environment key"
        );
        assert!(
            with("url_prefixes", serde_json::json!(["http://api.vendor.example"]))
                .ends_with("must use HTTPS unless it targets loopback over HTTP")
        );
        assert_eq!(
            with("header", serde_json::json!("bad header")),
            "invalid header for credential provider `vendor`"
        );
        let mut both = base.clone();
        both["header"] = serde_json::json!("x-api-key");
        assert_eq!(
            with_config(both, "auth", serde_json::json!(["bearer"])),
            "credential provider `vendor` requires a header name exactly when using header authentication"
        );
        assert_eq!(
            with("prefix", serde_json::json!("Key ")),
            "credential provider `vendor` requires header authentication to use a header prefix"
        );
        for pattern in ["(", ".*", &"a".repeat(MAX_PATTERN_BYTES + 1)] {
            assert_eq!(
                with("patterns", serde_json::json!([pattern])),
                "invalid credential pattern for provider `vendor`",
                "{pattern}"
            );
        }
    }

    fn with_config(mut config: serde_json::Value, key: &str, value: serde_json::Value) -> String {
        config[key] = value;
        provider(config).unwrap_err().to_string()
    }

    /// The secret goes back only into the header its methods name, only on the way to its
    /// destinations.
    #[test]
    fn each_method_restores_its_own_header_only() {
        let (secret, placeholder) = ("vk_realreal", "vk_fakefake");
        let restore = |config: serde_json::Value, to: Outgoing<'_>, name: &str, value: &str| {
            let provider = provider(config).unwrap();
            let binding = provider.binding(&Default::default()).unwrap();
            let mut headers = HeaderMap::new();
            headers
                .insert(HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
            binding.unmask(to, &mut headers, placeholder, secret);
            headers.get(name).unwrap().to_str().unwrap().to_owned()
        };
        let config = |auth: serde_json::Value, extra: serde_json::Value| {
            let mut config = serde_json::json!({"env": ["VENDOR_KEY"], "patterns": ["vk_[a-z]{8}"],
                "url_prefixes": ["https://api.vendor.example/v1"], "auth": auth});
            for (key, value) in extra.as_object().unwrap() {
                config[key] = value.clone();
            }
            config
        };
        let to = outgoing("api.vendor.example", "/v1/charges");
        let none = serde_json::json!({});
        let bearer = config(serde_json::json!([]), none.clone());
        assert_eq!(
            restore(bearer.clone(), to, "authorization", "Bearer vk_fakefake"),
            "Bearer vk_realreal"
        );
        assert_eq!(
            restore(bearer.clone(), to, "authorization", "token vk_fakefake"),
            "token vk_fakefake"
        );
        assert_eq!(restore(bearer.clone(), to, "x-other", "vk_fakefake"), "vk_fakefake");
        for (host, path) in [
            ("api.vendor.example", "/v2"),
            ("evil.example", "/v1"),
            ("api.vendor.example.evil.example", "/v1"),
        ] {
            assert_eq!(
                restore(
                    bearer.clone(),
                    outgoing(host, path),
                    "authorization",
                    "Bearer vk_fakefake"
                ),
                "Bearer vk_fakefake",
                "{host}{path}"
            );
        }
        let token = config(serde_json::json!(["token"]), none.clone());
        assert_eq!(restore(token, to, "authorization", "token vk_fakefake"), "token vk_realreal");
        let basic = config(serde_json::json!(["basic"]), none);
        let engine = base64::engine::general_purpose::STANDARD;
        let sent = format!("Basic {}", engine.encode("user:vk_fakefake"));
        assert_eq!(
            restore(basic, to, "authorization", &sent),
            format!("Basic {}", engine.encode("user:vk_realreal"))
        );
        let header = config(
            serde_json::json!([]),
            serde_json::json!({"header": "x-api-key", "prefix": "Key "}),
        );
        assert_eq!(restore(header.clone(), to, "x-api-key", "Key vk_fakefake"), "Key vk_realreal");
        assert_eq!(restore(header, to, "x-api-key", "vk_fakefake"), "vk_fakefake");
    }

    #[test]
    fn placeholders_match_the_secrets_pattern() {
        let pattern = whole_value("sk_live_[A-Za-z0-9]{24}").unwrap();
        let secret = "sk_live_0123456789abcdefABCDEFGH";
        let placeholder = placeholder_matching(secret, &pattern).unwrap();
        assert!(placeholder.starts_with("sk_live_") && pattern.is_match(&placeholder));
        assert_eq!(placeholder.len(), secret.len());
        assert_ne!(placeholder, secret);
        let fixed = whole_value("vk_exactly").unwrap();
        assert_eq!(placeholder_matching("vk_exactly", &fixed), None);
    }
}
