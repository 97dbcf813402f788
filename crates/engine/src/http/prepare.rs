//! Turning `http/request` params into a request that can be sent, or refusing them. Nothing
//! here touches the network, so a refused request never reaches its peer.

use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use tether_protocol::http::{
    HttpHeader, HttpRedirectPolicy, HttpRequestParams, is_denied_header_env_var,
};

use super::InvalidHttpRequest;

/// A validated request.
#[derive(Debug)]
pub(crate) struct PreparedRequest {
    pub method: Method,
    /// As the client wrote it, fragment included: the HTTP client never sends a fragment, and
    /// its error messages name the URL as given (which is what the reference reports).
    pub url: Url,
    /// In the client's order; a repeated name keeps every value.
    pub headers: HeaderMap,
    pub body: Option<Bytes>,
    /// For the whole exchange, body included; `None` waits forever.
    pub timeout: Option<Duration>,
    pub redirect: HttpRedirectPolicy,
}

/// Validates `params` in the reference's order. `env` reads the executor's environment
/// (`valueEnvVar`); it is a parameter so the checks can be tested without touching the
/// process's own environment.
pub(crate) fn prepare(
    params: HttpRequestParams,
    env: impl Fn(&str) -> Option<String>,
) -> Result<PreparedRequest, InvalidHttpRequest> {
    let method = Method::from_bytes(params.method.as_bytes())
        .map_err(|e| InvalidHttpRequest::Method { reason: e.to_string() })?;
    let url =
        Url::parse(&params.url).map_err(|e| InvalidHttpRequest::Url { reason: e.to_string() })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(InvalidHttpRequest::Scheme { scheme: url.scheme().to_owned() });
    }
    let mut headers = HeaderMap::new();
    for header in &params.headers {
        let (name, value) = header_pair(header, &env)?;
        headers.append(name, value);
    }
    Ok(PreparedRequest {
        method,
        url,
        headers,
        body: params.body_base64.map(|body| body.into_bytes()),
        timeout: params.timeout_ms.map(Duration::from_millis),
        redirect: params.redirect_policy,
    })
}

/// One header: its name, then the environment variable it takes its value from, then the
/// value itself (prefix and variable together).
fn header_pair(
    header: &HttpHeader,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<(HeaderName, HeaderValue), InvalidHttpRequest> {
    let name = HeaderName::from_bytes(header.name.as_bytes())
        .map_err(|e| InvalidHttpRequest::HeaderName { reason: e.to_string() })?;
    let value = match &header.value_env_var {
        None => header.value.clone(),
        Some(var) => {
            let (header, var, prefix) = (header.name.clone(), var.clone(), &header.value);
            if is_denied_header_env_var(&var) {
                return Err(InvalidHttpRequest::DeniedEnvVar { header, var });
            }
            match env(&var) {
                None => return Err(InvalidHttpRequest::MissingEnvVar { header, var }),
                Some(secret) if secret.is_empty() => {
                    return Err(InvalidHttpRequest::EmptyEnvVar { header, var });
                }
                Some(secret) => format!("{prefix}{secret}"),
            }
        }
    };
    let value = HeaderValue::from_str(&value).map_err(|e| InvalidHttpRequest::HeaderValue {
        name: header.name.clone(),
        reason: e.to_string(),
    })?;
    Ok((name, value))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn params(value: serde_json::Value) -> HttpRequestParams {
        let mut params = json!({"method": "GET", "url": "http://127.0.0.1:1/", "requestId": "r"});
        params.as_object_mut().unwrap().extend(value.as_object().unwrap().clone());
        serde_json::from_value(params).unwrap()
    }

    /// An executor environment with one credential, one empty variable and a denied one that
    /// is set (so refusing it is not an accident of its absence).
    fn env(name: &str) -> Option<String> {
        match name {
            "LINEAR_API_KEY" => Some("lin_123".into()),
            "EMPTY" => Some(String::new()),
            "AWS_SECRET_ACCESS_KEY" => Some("aws-secret".into()),
            _ => None,
        }
    }

    fn refused(value: serde_json::Value) -> String {
        prepare(params(value), env).unwrap_err().to_string()
    }

    #[test]
    fn methods_are_tokens_sent_verbatim() {
        assert_eq!(prepare(params(json!({"method": "get"})), env).unwrap().method.as_str(), "get");
        assert_eq!(prepare(params(json!({"method": "FOO"})), env).unwrap().method.as_str(), "FOO");
        for bad in ["G ET", "", "GET\n"] {
            assert_eq!(
                refused(json!({"method": bad})),
                "http/request method is invalid: invalid HTTP method",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn urls_must_be_absolute_http_or_https() {
        assert_eq!(
            refused(json!({"url": "nope"})),
            "http/request url is invalid: relative URL without a base"
        );
        assert_eq!(refused(json!({"url": "http://"})), "http/request url is invalid: empty host");
        for (url, scheme) in
            [("ftp://x/", "ftp"), ("file:///etc/passwd", "file"), ("mailto:a@b", "mailto")]
        {
            assert_eq!(
                refused(json!({"url": url})),
                format!("http/request only supports http and https URLs, got {scheme}")
            );
        }
        let https =
            prepare(params(json!({"url": "https://example.test/a?b=1#frag"})), env).unwrap();
        assert_eq!(https.url.fragment(), Some("frag"), "kept for messages; never sent");
    }

    #[test]
    fn unicode_host_names_are_idna_normalised() {
        let prepared = prepare(params(json!({"url": "http://bücher.example/"})), env).unwrap();
        assert_eq!(prepared.url.host_str(), Some("xn--bcher-kva.example"));
    }

    #[test]
    fn method_is_checked_before_url_and_url_before_headers() {
        let bad_everything = json!({"method": "G ET", "url": "nope", "headers": [{"name": "bad name", "value": "x"}]});
        assert!(refused(bad_everything).starts_with("http/request method is invalid"));
        let bad_url = json!({"url": "ftp://x", "headers": [{"name": "bad name", "value": "x"}]});
        assert!(refused(bad_url).starts_with("http/request only supports"));
    }

    #[test]
    fn header_names_and_values_are_checked_in_order() {
        assert_eq!(
            refused(
                json!({"headers": [{"name": "bad name", "value": "x"}, {"name": "x", "value": "a\nb"}]})
            ),
            "http/request header name is invalid: invalid HTTP header name"
        );
        assert_eq!(
            refused(
                json!({"headers": [{"name": "X-Thing", "value": "a\nb"}, {"name": "bad name", "value": "x"}]})
            ),
            "http/request header value is invalid for X-Thing: failed to parse header value"
        );
        assert_eq!(
            refused(json!({"headers": [{"name": "", "value": "x"}]})),
            "http/request header name is invalid: invalid HTTP header name"
        );
    }

    #[test]
    fn repeated_headers_keep_every_value_and_names_are_lowercased() {
        let prepared = prepare(
            params(json!({"headers": [
                {"name": "X-A", "value": "1"}, {"name": "x-b", "value": "2"}, {"name": "x-a", "value": "3"}
            ]})),
            env,
        )
        .unwrap();
        let a: Vec<_> = prepared.headers.get_all("x-a").iter().collect();
        assert_eq!(a, ["1", "3"]);
        assert_eq!(prepared.headers.get("x-b").unwrap(), "2");
        assert_eq!(prepared.headers.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["x-a", "x-b"]);
    }

    #[test]
    fn value_env_var_appends_the_executors_variable_to_the_prefix() {
        let prepared = prepare(
            params(json!({"headers": [{"name": "Authorization", "value": "Bearer ", "valueEnvVar": "LINEAR_API_KEY"}]})),
            env,
        )
        .unwrap();
        assert_eq!(prepared.headers.get("authorization").unwrap(), "Bearer lin_123");
    }

    #[test]
    fn value_env_var_must_be_set_non_empty_and_allowed() {
        let header = |var: &str| json!({"headers": [{"name": "Authorization", "value": "x", "valueEnvVar": var}]});
        assert_eq!(
            refused(header("NOPE")),
            "http/request header Authorization requires executor environment variable NOPE"
        );
        assert_eq!(
            refused(header("")),
            "http/request header Authorization requires executor environment variable "
        );
        assert_eq!(
            refused(header("EMPTY")),
            "http/request header Authorization requires a non-empty executor environment variable EMPTY"
        );
        for denied in ["AWS_SECRET_ACCESS_KEY", "aws_secret_access_key", "OpenAI_Api_Key"] {
            assert_eq!(
                refused(header(denied)),
                format!(
                    "http/request header Authorization cannot use executor environment variable {denied}"
                )
            );
        }
    }

    #[test]
    fn header_name_then_variable_then_value() {
        // A bad name wins over a missing variable; a missing variable over a bad value prefix.
        assert!(
            refused(
                json!({"headers": [{"name": "bad name", "value": "a", "valueEnvVar": "NOPE"}]})
            )
            .starts_with("http/request header name is invalid")
        );
        assert_eq!(
            refused(json!({"headers": [{"name": "x", "value": "a\n", "valueEnvVar": "NOPE"}]})),
            "http/request header x requires executor environment variable NOPE"
        );
        assert_eq!(
            refused(
                json!({"headers": [{"name": "x", "value": "a\n", "valueEnvVar": "LINEAR_API_KEY"}]})
            ),
            "http/request header value is invalid for x: failed to parse header value"
        );
        // Headers are checked one after the other: the first bad one is reported.
        assert_eq!(
            refused(json!({"headers": [
                {"name": "y", "value": "z", "valueEnvVar": "NOPE"}, {"name": "bad name", "value": "x"}
            ]})),
            "http/request header y requires executor environment variable NOPE"
        );
    }

    #[test]
    fn body_timeout_and_redirect_policy_carry_over() {
        let prepared = prepare(
            params(json!({"bodyBase64": "aGVsbG8=", "timeoutMs": 1500, "redirectPolicy": "stop"})),
            env,
        )
        .unwrap();
        assert_eq!(prepared.body.as_deref(), Some(&b"hello"[..]));
        assert_eq!(prepared.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(prepared.redirect, HttpRedirectPolicy::Stop);
        let defaults = prepare(params(json!({})), env).unwrap();
        assert_eq!((defaults.body, defaults.timeout), (None, None));
        assert_eq!(defaults.redirect, HttpRedirectPolicy::Follow);
    }
}
