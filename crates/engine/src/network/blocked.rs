//! The answer a process's proxy gives a request it refuses, as the reference's proxy gives it
//! (measured on the wire against Codex 0.171's): `403 Forbidden`, an `x-proxy-error` naming
//! which rule refused it, and a body saying why — JSON for a proxied HTTP request, the message
//! alone as text for a refused `CONNECT` (a client shows a tunnel's refusal as text).

use serde::Serialize;
use tether_protocol::network::{DecisionSource, ProxyProtocol};

use super::domains::Refusal;

/// Why a request was refused: by the domain policy, or by `limited` mode's methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockReason {
    Domain(Refusal),
    /// `limited` mode lets only GET, HEAD and OPTIONS through.
    MethodNotAllowed,
}

impl BlockReason {
    /// The decision's `reason`.
    pub fn reason(self) -> &'static str {
        match self {
            BlockReason::Domain(refusal) => refusal.reason(),
            BlockReason::MethodNotAllowed => "method_not_allowed",
        }
    }

    /// The body's `message`.
    pub fn message(self) -> &'static str {
        match self {
            BlockReason::Domain(refusal) => refusal.message(),
            BlockReason::MethodNotAllowed => "Method not allowed in limited mode.",
        }
    }

    /// `x-proxy-error`: the deny list, the method policy, or the allow list (which a local
    /// destination is refused by too).
    pub fn proxy_error(self) -> &'static str {
        match self {
            BlockReason::Domain(Refusal::Denied) => "blocked-by-denylist",
            BlockReason::Domain(Refusal::NotAllowed | Refusal::NotAllowedLocal) => {
                "blocked-by-allowlist"
            }
            BlockReason::MethodNotAllowed => "blocked-by-method-policy",
        }
    }
}

/// A refused request, and what is said of it.
#[derive(Debug, Clone, Copy)]
pub struct Blocked<'a> {
    pub host: &'a str,
    pub port: u16,
    pub reason: BlockReason,
    pub source: DecisionSource,
    pub protocol: ProxyProtocol,
}

/// The JSON body, its members in the reference's order.
#[derive(Serialize)]
struct Body<'a> {
    status: &'static str,
    host: &'a str,
    reason: &'static str,
    decision: &'static str,
    source: DecisionSource,
    protocol: ProxyProtocol,
    port: u16,
    message: &'static str,
}

/// An HTTP answer, before the date and framing the HTTP stack adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(&'static str, &'static str)>,
    pub body: Vec<u8>,
}

impl Blocked<'_> {
    /// The answer to the refused request: JSON for a proxied request, text for a tunnel.
    pub fn answer(&self) -> Answer {
        let (content_type, body) = match self.protocol {
            ProxyProtocol::HttpsConnect => {
                ("text/plain", self.reason.message().as_bytes().to_vec())
            }
            _ => ("application/json", self.json()),
        };
        let headers =
            vec![("content-type", content_type), ("x-proxy-error", self.reason.proxy_error())];
        Answer { status: 403, headers, body }
    }

    fn json(&self) -> Vec<u8> {
        let body = Body {
            status: "blocked",
            host: self.host,
            reason: self.reason.reason(),
            decision: "deny",
            source: self.source,
            protocol: self.protocol,
            port: self.port,
            message: self.reason.message(),
        };
        // A struct of strings and numbers always serializes.
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked(host: &str, port: u16, reason: BlockReason, source: DecisionSource) -> Answer {
        Blocked { host, port, reason, source, protocol: ProxyProtocol::Http }.answer()
    }

    /// The bodies and headers the reference's proxy answered, byte for byte.
    #[test]
    fn refusals_are_answered_as_the_reference_answers_them() {
        let cases = [
            (
                blocked(
                    "other.test",
                    81,
                    BlockReason::Domain(Refusal::NotAllowed),
                    DecisionSource::BaselinePolicy,
                ),
                "blocked-by-allowlist",
                r#"{"status":"blocked","host":"other.test","reason":"not_allowed","decision":"deny","source":"baseline_policy","protocol":"http","port":81,"message":"Domain not in allowlist."}"#,
            ),
            (
                blocked(
                    "deny.test",
                    80,
                    BlockReason::Domain(Refusal::Denied),
                    DecisionSource::BaselinePolicy,
                ),
                "blocked-by-denylist",
                r#"{"status":"blocked","host":"deny.test","reason":"denied","decision":"deny","source":"baseline_policy","protocol":"http","port":80,"message":"Domain denied by the sandbox policy."}"#,
            ),
            (
                blocked("127.0.0.1", 9, BlockReason::MethodNotAllowed, DecisionSource::ModeGuard),
                "blocked-by-method-policy",
                r#"{"status":"blocked","host":"127.0.0.1","reason":"method_not_allowed","decision":"deny","source":"mode_guard","protocol":"http","port":9,"message":"Method not allowed in limited mode."}"#,
            ),
            (
                blocked(
                    "localhost",
                    9,
                    BlockReason::Domain(Refusal::NotAllowedLocal),
                    DecisionSource::BaselinePolicy,
                ),
                "blocked-by-allowlist",
                r#"{"status":"blocked","host":"localhost","reason":"not_allowed_local","decision":"deny","source":"baseline_policy","protocol":"http","port":9,"message":"Sandbox policy blocks local/private network addresses."}"#,
            ),
        ];
        for (answer, proxy_error, body) in cases {
            assert_eq!(answer.status, 403);
            assert_eq!(
                answer.headers,
                vec![("content-type", "application/json"), ("x-proxy-error", proxy_error)]
            );
            assert_eq!(String::from_utf8(answer.body).unwrap(), body);
        }
    }

    #[test]
    fn a_refused_tunnel_is_told_in_text() {
        let reason = BlockReason::Domain(Refusal::NotAllowed);
        let protocol = ProxyProtocol::HttpsConnect;
        let source = DecisionSource::BaselinePolicy;
        let answer = Blocked { host: "other.test", port: 443, reason, source, protocol }.answer();
        assert_eq!(answer.headers[0], ("content-type", "text/plain"));
        assert_eq!(answer.body, b"Domain not in allowlist.");
    }
}
