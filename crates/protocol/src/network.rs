//! The managed network's traffic from the executor to the client (`managed-network.md` §4): a
//! `network/policyDecision` notification for every decision a process's proxy makes, and
//! `network/policyRequest`, the one request the server sends the client (with ids of the
//! server's own), asking it to decide a destination nobody decided yet.

use serde::{Deserialize, Serialize};

use crate::ProcessId;

/// Server→client notification: a process's proxy decided a connection.
pub const POLICY_DECISION: &str = "network/policyDecision";
/// Server→client request: decide a destination the policy does not.
pub const POLICY_REQUEST: &str = "network/policyRequest";

/// `allow` or `deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Deny,
}

/// Whether the decision was about the destination (`domain`) or something else of the
/// connection (`non_domain`: a method `limited` mode refuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionScope {
    Domain,
    NonDomain,
}

/// Who decided: the launch's policy, the client (`decider`, through `network/policyRequest`),
/// the `limited` mode, or the proxy's own state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionSource {
    BaselinePolicy,
    Decider,
    ModeGuard,
    ProxyState,
}

/// How the process reached its proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyProtocol {
    Http,
    HttpsConnect,
    Socks5Tcp,
    Socks5Udp,
}

/// `network/policyDecision` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyDecisionNotification {
    pub process_id: ProcessId,
    /// RFC 3339, milliseconds, UTC.
    pub timestamp: String,
    pub scope: DecisionScope,
    pub decision: Decision,
    pub source: DecisionSource,
    /// `allow`, `denied`, `not_allowed`, `not_allowed_local`, `method_not_allowed`, …
    pub reason: String,
    pub protocol: ProxyProtocol,
    pub host: String,
    pub port: u16,
    /// The HTTP method; absent for SOCKS5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The process's end of the connection to its proxy (`127.0.0.1:PORT`).
    pub client: String,
    /// The client's decision overrode the policy's.
    pub policy_override: bool,
}

/// `network/policyRequest` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRequestParams {
    pub process_id: ProcessId,
    pub request: PolicyRequestTarget,
}

/// The destination to decide.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRequestTarget {
    pub protocol: ProxyProtocol,
    pub host: String,
    pub port: u16,
}

/// `network/policyRequest` result: the client's decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRequestResult {
    pub decision: ClientDecision,
}

/// `{"type": "allow"}`, or `{"type": "deny", "reason": …}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ClientDecision {
    Allow,
    Deny { reason: String },
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::fixtures::{Ordered, round_trip_in_order};

    /// Decisions and policy requests the reference's proxy sent (HTTP, CONNECT, SOCKS5, the
    /// `limited` mode's refusal, the client's decisions), each decoded, re-encoded to the same
    /// JSON in the same member order.
    #[test]
    fn the_references_decisions_and_requests_round_trip_in_order() {
        let text = fixture!("network_policy_decisions");
        let value: Value = serde_json::from_str(text).unwrap();
        let ordered = Ordered::parse(text);
        let notifications = value["notifications"].as_array().unwrap();
        let Ordered::Object(top) = &ordered else { panic!("an object") };
        let Ordered::Array(ordered_notifications) = &top[0].1 else { panic!("a list") };
        let mut seen_sources = Vec::new();
        for (notification, captured) in notifications.iter().zip(ordered_notifications) {
            assert_eq!(notification["method"], POLICY_DECISION);
            let decision: PolicyDecisionNotification =
                round_trip_in_order(&notification["params"], captured.get("params"));
            assert_eq!(decision.method.is_none(), decision.protocol == ProxyProtocol::Socks5Tcp);
            seen_sources.push(decision.source);
        }
        for source in
            [DecisionSource::BaselinePolicy, DecisionSource::ModeGuard, DecisionSource::Decider]
        {
            assert!(seen_sources.contains(&source), "{source:?} in the fixture");
        }
        let Ordered::Array(ordered_requests) = &top[1].1 else { panic!("a list") };
        for (exchange, captured) in
            value["server_requests"].as_array().unwrap().iter().zip(ordered_requests)
        {
            assert_eq!(exchange["request"]["method"], POLICY_REQUEST);
            let captured = captured.get("request").get("params");
            let _: PolicyRequestParams =
                round_trip_in_order(&exchange["request"]["params"], captured);
            let answer: PolicyRequestResult =
                serde_json::from_value(exchange["client_result"].clone()).unwrap();
            assert_eq!(serde_json::to_value(&answer).unwrap(), exchange["client_result"]);
        }
    }

    #[test]
    fn a_client_decision_is_tagged_by_its_type() {
        let deny = ClientDecision::Deny { reason: "not_allowed".into() };
        let text = serde_json::to_string(&PolicyRequestResult { decision: deny }).unwrap();
        assert_eq!(text, r#"{"decision":{"type":"deny","reason":"not_allowed"}}"#);
    }
}
