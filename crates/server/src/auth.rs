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
        let bytes = hex::decode(hex_digest.trim())
            .map_err(|e| format!("--ws-token-sha256 is not hex: {e}"))?;
        let sha256: [u8; 32] = bytes
            .try_into()
            .map_err(|_| "--ws-token-sha256 must be 64 hex digits (a SHA-256)".to_string())?;
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
    fn a_digest_configures_the_same_token() {
        let digest = hex::encode(Sha256::digest(b"s3cret"));
        let auth = WsAuth::capability_token_sha256(&digest).unwrap();
        assert_eq!(auth.check(&headers(&["Bearer s3cret"])), Ok(()));
        assert!(WsAuth::capability_token_sha256("abcd").is_err());
        assert!(WsAuth::capability_token_sha256("zz").is_err());
        assert!(WsAuth::capability_token("  \n").is_err());
    }
}
