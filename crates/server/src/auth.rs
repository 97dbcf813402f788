//! Who may open a WebSocket: the reference's two modes, checked on the upgrade request before a
//! connection exists.
//!
//! An exec-server is remote code execution by design; the credential on the upgrade is all that
//! stands between the port and the machine. Both modes read `Authorization: Bearer <token>`
//! (scheme case-insensitive, extra spaces tolerated, the first header if several) and refuse
//! with `401` and the reference's plain-text reasons. A presented token is compared in constant
//! time, and never logged.
//!
//! - **Capability token**: a shared secret, configured as a file or as its SHA-256. The presented
//!   token's SHA-256 is compared with the expected one, so neither the token nor its length
//!   leaks through timing.
//! - **Signed bearer token**: an HS256 JWT signed with a shared secret ([`crate::jwt`]), so a
//!   control plane can mint short-lived tokens without the server storing each one.
//!
//! A connection's [`ClientId`] is who it is for the server's per-client bounds: with
//! authentication, whoever the credential names (a signed token's subject, else the token);
//! without, the peer's address.

use axum::http::{HeaderMap, header};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub use crate::jwt::AuthRefusal;
use crate::jwt::JwtVerifier;

/// How WebSocket clients must authenticate.
#[derive(Clone, Default)]
pub enum WsAuth {
    /// Anyone who reaches the port may connect (loopback only, unless the operator insists).
    #[default]
    None,
    /// A bearer token whose SHA-256 is this.
    CapabilityToken { sha256: [u8; 32] },
    /// A bearer HS256 JWT.
    SignedBearerToken(JwtVerifier),
}

impl std::fmt::Debug for WsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the digest or the secret.
        f.write_str(match self {
            WsAuth::None => "None",
            WsAuth::CapabilityToken { .. } => "CapabilityToken",
            WsAuth::SignedBearerToken(_) => "SignedBearerToken",
        })
    }
}

impl WsAuth {
    /// A capability token from the contents of a token file (trimmed, as the reference does).
    pub fn capability_token(token: &str) -> Result<Self, String> {
        let token = token.trim();
        if token.is_empty() {
            return Err("the capability-token file is empty".into());
        }
        Ok(WsAuth::CapabilityToken { sha256: Sha256::digest(token.as_bytes()).into() })
    }

    /// A capability token given as the hex SHA-256 of the token.
    pub fn capability_token_sha256(hex_digest: &str) -> Result<Self, String> {
        // The reference's words, whatever is wrong with it, then what to give.
        let refused = || {
            "--ws-token-sha256 must be a 64-character hex SHA-256 digest; give the token's \
             (`printf %s TOKEN | sha256sum`)"
                .to_string()
        };
        let bytes = hex::decode(hex_digest.trim()).map_err(|_| refused())?;
        let sha256: [u8; 32] = bytes.try_into().map_err(|_| refused())?;
        Ok(WsAuth::CapabilityToken { sha256 })
    }

    pub fn is_enabled(&self) -> bool {
        !matches!(self, WsAuth::None)
    }

    /// Checks an upgrade request's headers.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), AuthRefusal> {
        if let WsAuth::None = self {
            return Ok(());
        }
        let token = bearer_token(headers)?;
        match self {
            WsAuth::None => Ok(()),
            WsAuth::CapabilityToken { sha256 } => {
                let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
                if bool::from(presented.ct_eq(sha256)) {
                    Ok(())
                } else {
                    Err(AuthRefusal("invalid websocket bearer token"))
                }
            }
            WsAuth::SignedBearerToken(verifier) => verifier.verify(token),
        }
    }
}

/// Who a connection is, for the bounds the server keeps per client (`--max-sessions-per-client`).
///
/// With authentication the credential decides, not the address: clients behind one proxy or
/// NAT are told apart by their tokens, and one client cannot slip past its bound by connecting
/// from many addresses. Without authentication the address is all there is.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum ClientId {
    /// No authentication: the peer's IP address (any port).
    Address(std::net::IpAddr),
    /// A signed bearer token's subject (`sub`): every token minted for it is one client.
    Subject(String),
    /// A credential that names no subject, by its SHA-256: a capability token (shared by all
    /// who hold it), or a signed token without `sub`.
    Credential([u8; 32]),
    /// The stdio connection: the one client of a server that serves a pipe.
    Stdio,
}

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientId::Address(ip) => write!(f, "address {ip}"),
            ClientId::Subject(subject) => write!(f, "subject {subject:?}"),
            // Never the digest: it stands for a secret.
            ClientId::Credential(_) => f.write_str("this credential"),
            ClientId::Stdio => f.write_str("stdio"),
        }
    }
}

impl std::fmt::Debug for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl WsAuth {
    /// Who an upgrade request that passed [`WsAuth::check`] comes from.
    pub fn client_id(&self, headers: &HeaderMap, peer: std::net::SocketAddr) -> ClientId {
        let Ok(token) = bearer_token(headers) else { return ClientId::Address(peer.ip()) };
        match self {
            WsAuth::None => ClientId::Address(peer.ip()),
            WsAuth::CapabilityToken { sha256 } => ClientId::Credential(*sha256),
            WsAuth::SignedBearerToken(_) => {
                let subject = crate::jwt::DecodedToken::decode(token).ok().and_then(|decoded| {
                    decoded.claims.get("sub").and_then(|sub| sub.as_str()).map(str::to_owned)
                });
                match subject {
                    Some(subject) => ClientId::Subject(subject),
                    None => ClientId::Credential(Sha256::digest(token.as_bytes()).into()),
                }
            }
        }
    }
}

/// The token of the first `Authorization` header: `Bearer`, in any case, then a space, then the
/// token (trimmed), as the reference reads it.
fn bearer_token(headers: &HeaderMap) -> Result<&str, AuthRefusal> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(AuthRefusal("missing websocket bearer token"));
    };
    let invalid = AuthRefusal("invalid authorization header");
    let value = value.to_str().map_err(|_| invalid)?.trim_start();
    let (scheme, token) = value.split_once(' ').ok_or(invalid)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(invalid);
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn capability_tokens_are_checked_as_the_reference_checks_them() {
        let auth = WsAuth::capability_token("s3cret\n").unwrap();
        assert_eq!(auth.check(&headers(&["Bearer s3cret"])), Ok(()));
        assert_eq!(auth.check(&headers(&["bearer    s3cret  "])), Ok(()));
        assert_eq!(auth.check(&headers(&["Bearer s3cret", "Bearer other"])), Ok(()));
        let wrong = Err(AuthRefusal("invalid websocket bearer token"));
        assert_eq!(auth.check(&headers(&["Bearer other"])), wrong);
        assert_eq!(auth.check(&headers(&["Bearer other", "Bearer s3cret"])), wrong);
        let missing = Err(AuthRefusal("missing websocket bearer token"));
        assert_eq!(auth.check(&headers(&[])), missing);
        let invalid = Err(AuthRefusal("invalid authorization header"));
        assert_eq!(auth.check(&headers(&["Basic czNjcmV0"])), invalid);
        assert_eq!(auth.check(&headers(&["s3cret"])), invalid);
        assert_eq!(auth.check(&headers(&["Bearer   "])), invalid);
        assert_eq!(auth.check(&headers(&["Bearer\ts3cret"])), invalid);
    }

    #[test]
    fn clients_are_told_apart_by_credential_when_there_is_one() {
        let peer: std::net::SocketAddr = "10.0.0.7:5000".parse().unwrap();
        let other: std::net::SocketAddr = "10.0.0.8:6000".parse().unwrap();
        let none = WsAuth::None;
        assert_eq!(none.client_id(&headers(&[]), peer).to_string(), "address 10.0.0.7");
        assert_ne!(none.client_id(&headers(&[]), peer), none.client_id(&headers(&[]), other));
        let shared = WsAuth::capability_token("s3cret").unwrap();
        let bearer = headers(&["Bearer s3cret"]);
        assert_eq!(shared.client_id(&bearer, peer), shared.client_id(&bearer, other));
        assert_eq!(shared.client_id(&bearer, peer).to_string(), "this credential");
    }

    #[test]
    fn a_signed_token_is_its_subject_wherever_it_connects_from() {
        let secret = b"a secret of at least thirty-two bytes";
        let verifier =
            JwtVerifier::new(secret, None, None, std::time::Duration::from_secs(30)).unwrap();
        let auth = WsAuth::SignedBearerToken(verifier);
        let minted = |claims: serde_json::Value| {
            let secret = crate::jwt::SharedSecret::from_file_contents(secret).unwrap();
            format!("Bearer {}", secret.mint(claims.as_object().unwrap()))
        };
        let id =
            |token: &str, peer: &str| auth.client_id(&headers(&[token]), peer.parse().unwrap());
        let alice = minted(serde_json::json!({"sub": "alice", "exp": 1}));
        let alice_later = minted(serde_json::json!({"sub": "alice", "exp": 2}));
        let bob = minted(serde_json::json!({"sub": "bob", "exp": 1}));
        let nobody = minted(serde_json::json!({"exp": 1}));
        assert_eq!(id(&alice, "10.0.0.1:1"), id(&alice_later, "10.0.0.2:2"));
        assert_eq!(id(&alice, "10.0.0.1:1").to_string(), r#"subject "alice""#);
        assert_ne!(id(&alice, "10.0.0.1:1"), id(&bob, "10.0.0.1:1"));
        assert!(matches!(id(&nobody, "10.0.0.1:1"), ClientId::Credential(_)));
    }

    #[test]
    fn a_digest_configures_the_same_token() {
        let digest = hex::encode(Sha256::digest(b"s3cret"));
        let auth = WsAuth::capability_token_sha256(&digest).unwrap();
        assert_eq!(auth.check(&headers(&["Bearer s3cret"])), Ok(()));
        assert!(WsAuth::capability_token_sha256("abcd").is_err());
        assert!(WsAuth::capability_token_sha256("zz").is_err());
        assert!(WsAuth::capability_token("  \n").is_err());
    }
}
