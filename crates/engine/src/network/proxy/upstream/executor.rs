//! The executor's own proxies, read from its environment as the reference's proxy reads them
//! (Codex 0.171, measured on the wire):
//!
//! - three slots, each the first usable of its two names, the upper-case one first:
//!   `HTTP_PROXY`/`http_proxy`, `HTTPS_PROXY`/`https_proxy`, `ALL_PROXY`/`all_proxy`. An
//!   empty value, one that is not a URL, or one of another scheme than `http://` or
//!   `https://` (a `socks5://` `ALL_PROXY`, say) is passed over for the next name;
//! - a tunnel takes the first of HTTPS, HTTP, ALL; a forward request the first of HTTP, ALL
//!   (so an `HTTPS_PROXY` alone carries tunnels, and plain HTTP goes directly);
//! - `NO_PROXY` is not read: the reference sends what it exempts through the upstream all the
//!   same, and the destinations it keeps off an upstream are those [`super::route`] names.
//!
//! A proxy is spoken to in plain HTTP whatever its scheme, as the reference speaks to an
//! `https://` one: a proxy that insists on TLS then refuses the tunnel, and the connection
//! fails rather than going around it. Credentials in the URL go as `Proxy-Authorization:
//! Basic`.

use base64::Engine as _;
use tracing::debug;

use super::Upstream;

/// The executor's upstream proxies, by the traffic each carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Upstreams {
    http: Option<Upstream>,
    https: Option<Upstream>,
    all: Option<Upstream>,
}

impl Upstreams {
    /// From the executor's environment.
    pub fn from_env(env: &[(String, String)]) -> Self {
        let slot = |names: [&str; 2]| {
            names.iter().find_map(|name| {
                let (_, value) = env.iter().find(|(key, _)| key == name)?;
                let parsed = parse(value.trim());
                if parsed.is_none() && !value.trim().is_empty() {
                    debug!(variable = name, "upstream proxy passed over: not an http(s) URL");
                }
                parsed
            })
        };
        Self {
            http: slot(["HTTP_PROXY", "http_proxy"]),
            https: slot(["HTTPS_PROXY", "https_proxy"]),
            all: slot(["ALL_PROXY", "all_proxy"]),
        }
    }

    /// The proxy a forward request (plain HTTP) goes through, if any.
    pub fn for_request(&self) -> Option<&Upstream> {
        self.http.as_ref().or(self.all.as_ref())
    }

    /// The proxy a tunnel (`CONNECT`) goes through, if any.
    pub fn for_tunnel(&self) -> Option<&Upstream> {
        self.https.as_ref().or(self.http.as_ref()).or(self.all.as_ref())
    }
}

/// An upstream from `[http[s]://][user[:password]@]host[:port]`; `None` for anything else.
/// Without a port, the scheme's (80, or 443 for `https://`).
fn parse(value: &str) -> Option<Upstream> {
    if value.is_empty() {
        return None;
    }
    let with_scheme =
        if value.contains("://") { value.to_owned() } else { format!("http://{value}") };
    let url = url::Url::parse(&with_scheme).ok()?;
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    let host = url.host_str()?.trim_start_matches('[').trim_end_matches(']').to_owned();
    let authorization = (!url.username().is_empty()).then(|| {
        let user = percent_decoded(url.username());
        let password = percent_decoded(url.password().unwrap_or_default());
        let credentials =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {credentials}")
    });
    Some(Upstream { host, port: url.port_or_known_default()?, authorization })
}

fn percent_decoded(text: &str) -> String {
    url::form_urlencoded::parse(format!("x={text}").as_bytes())
        .next()
        .map(|(_, value)| value.into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// The proxies a forward request and a tunnel go through, as `host:port`.
    fn chosen(upstreams: &Upstreams) -> (Option<String>, Option<String>) {
        let show = |u: Option<&Upstream>| u.map(|u| format!("{}:{}", u.host, u.port));
        (show(upstreams.for_request()), show(upstreams.for_tunnel()))
    }

    /// Each environment, and the proxies a forward request and a tunnel then go through, as
    /// the reference chose them.
    #[test]
    fn proxies_are_chosen_as_the_reference_chooses_them() {
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>, Option<&'a str>);
        let cases: [Case; 11] = [
            (&[("HTTPS_PROXY", "http://s.test:1")], None, Some("s.test:1")),
            (&[("HTTP_PROXY", "http://h.test:1")], Some("h.test:1"), Some("h.test:1")),
            (&[("ALL_PROXY", "http://a.test:1")], Some("a.test:1"), Some("a.test:1")),
            (&[("ALL_PROXY", "socks5://a.test:1")], None, None),
            (
                &[("HTTP_PROXY", "http://up.test:1"), ("http_proxy", "http://low.test:1")],
                Some("up.test:1"),
                Some("up.test:1"),
            ),
            (&[("http_proxy", "http://low.test:1")], Some("low.test:1"), Some("low.test:1")),
            (
                &[("HTTPS_PROXY", " "), ("https_proxy", "http://low.test:1")],
                None,
                Some("low.test:1"),
            ),
            (
                &[("HTTPS_PROXY", "socks5://s.test:1"), ("https_proxy", "http://low.test:1")],
                None,
                Some("low.test:1"),
            ),
            (
                &[("HTTPS_PROXY", "::bad::"), ("HTTP_PROXY", "http://h.test:1")],
                Some("h.test:1"),
                Some("h.test:1"),
            ),
            (
                &[("HTTPS_PROXY", "https://tls.test"), ("HTTP_PROXY", "h.test:8080")],
                Some("h.test:8080"),
                Some("tls.test:443"),
            ),
            // `NO_PROXY` exempts nothing.
            (&[("HTTP_PROXY", "http://[::1]"), ("NO_PROXY", "*")], Some("::1:80"), Some("::1:80")),
        ];
        for (pairs, request, tunnel) in cases {
            let expected = (request.map(String::from), tunnel.map(String::from));
            assert_eq!(chosen(&Upstreams::from_env(&env(pairs))), expected, "{pairs:?}");
        }
    }

    #[test]
    fn credentials_in_the_url_become_basic_authorization() {
        let upstreams =
            Upstreams::from_env(&env(&[("HTTPS_PROXY", "http://user:p%40ss@secure.test")]));
        let upstream = upstreams.for_tunnel().unwrap();
        assert_eq!(upstream.authorization.as_deref(), Some("Basic dXNlcjpwQHNz"));
        assert_eq!((upstream.host.as_str(), upstream.port), ("secure.test", 80));
    }
}
