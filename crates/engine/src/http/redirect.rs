//! Following a redirect by hand, one request per hop, as the reference does: the rules are the
//! browsers' (and reqwest's), and the errors are the reference's own.
//!
//! The HTTP client itself never follows redirects, so `redirectPolicy: "stop"` and `"follow"`
//! share one client and one connection pool, and one deadline spans every hop.

use reqwest::header::{
    AUTHORIZATION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, COOKIE, HeaderMap, LOCATION,
    PROXY_AUTHORIZATION, REFERER, TRANSFER_ENCODING, WWW_AUTHENTICATE,
};
use reqwest::{Method, Request, Response, StatusCode, Url};

/// Redirects followed in a row before giving up with `too many redirects`: the common limit
/// (reqwest's, browsers' order of magnitude, and the reference's).
pub const MAX_REDIRECTS: usize = 10;

/// The request that `response` redirects `previous` to, or `None` when the response is the
/// answer: not a redirect status, no usable `location`.
///
/// `previous` is a copy of the request that got `response`. A 303 (and a 301/302 to a POST)
/// turns into a GET without the body; 307 and 308 repeat the method and body. Credentials do
/// not follow a redirect to another origin, and the next request names the previous URL as
/// its `referer` unless that would leak an https URL to plain http.
pub(crate) fn redirected(mut previous: Request, response: &Response) -> Option<Request> {
    let location = response.headers().get(LOCATION)?.to_str().ok()?;
    let from = previous.url().clone();
    let next_url = from.join(location).ok()?;
    let drop_body = match response.status() {
        StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND if previous.method() == Method::POST => {
            *previous.method_mut() = Method::GET;
            true
        }
        StatusCode::SEE_OTHER => {
            if previous.method() != Method::HEAD {
                *previous.method_mut() = Method::GET;
            }
            true
        }
        StatusCode::MOVED_PERMANENTLY
        | StatusCode::FOUND
        | StatusCode::TEMPORARY_REDIRECT
        | StatusCode::PERMANENT_REDIRECT => false,
        _ => return None,
    };
    if drop_body {
        *previous.body_mut() = None;
        for header in [CONTENT_TYPE, CONTENT_LENGTH, CONTENT_ENCODING, TRANSFER_ENCODING] {
            previous.headers_mut().remove(header);
        }
    }
    remove_credentials_across_origins(previous.headers_mut(), &from, &next_url);
    insert_referer(previous.headers_mut(), &from, &next_url);
    *previous.url_mut() = next_url;
    Some(previous)
}

fn remove_credentials_across_origins(headers: &mut HeaderMap, from: &Url, to: &Url) {
    let same_origin = from.scheme() == to.scheme()
        && from.host_str() == to.host_str()
        && from.port_or_known_default() == to.port_or_known_default();
    if !same_origin {
        for header in [AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION, WWW_AUTHENTICATE] {
            headers.remove(header);
        }
        headers.remove("cookie2");
    }
}

fn insert_referer(headers: &mut HeaderMap, from: &Url, to: &Url) {
    if from.scheme() == "https" && to.scheme() == "http" {
        return;
    }
    let mut referer = from.clone();
    let _ = referer.set_username("");
    let _ = referer.set_password(None);
    referer.set_fragment(None);
    if let Ok(value) = referer.as_str().parse() {
        headers.insert(REFERER, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).unwrap()
    }

    #[test]
    fn credentials_stay_with_their_origin() {
        let credentials = || {
            let mut headers = HeaderMap::new();
            headers.insert(AUTHORIZATION, "Bearer t".parse().unwrap());
            headers.insert(COOKIE, "a=b".parse().unwrap());
            headers.insert("x-api-key", "k".parse().unwrap());
            headers
        };
        let mut same = credentials();
        remove_credentials_across_origins(&mut same, &url("http://a:80/x"), &url("http://a/y"));
        assert_eq!(same.len(), 3, "same origin, default port spelt out");
        for other in ["https://a/y", "http://b/y", "http://a:81/y"] {
            let mut headers = credentials();
            remove_credentials_across_origins(&mut headers, &url("http://a/x"), &url(other));
            assert_eq!(headers.keys().collect::<Vec<_>>(), ["x-api-key"], "{other}");
        }
    }

    #[test]
    fn referer_is_the_previous_url_without_credentials_or_fragment() {
        let mut headers = HeaderMap::new();
        insert_referer(&mut headers, &url("http://u:p@a/x?q=1#f"), &url("http://a/y"));
        assert_eq!(headers[REFERER], "http://a/x?q=1");
        let mut headers = HeaderMap::new();
        insert_referer(&mut headers, &url("https://a/x"), &url("http://a/y"));
        assert!(headers.is_empty(), "no https URL leaks to plain http");
    }
}
