//! HS256 JWTs as WebSocket credentials (`--ws-auth signed-bearer-token`), checked as the
//! reference checks them: the signature over the shared secret, then `exp`, `nbf`, and — when
//! configured — the issuer and the audience, each failure with the reference's own words.
//!
//! Only `exp` is required (an integer); `nbf` is optional; `iat`, `sub` and `jti` are not
//! looked at; `iss` and `aud` must have the right types even when not checked. A token is checked
//! when a connection opens; an open connection outlives its token's expiry.
//!
//! Signing lives here too ([`SharedSecret::mint`], for `tether token mint`), over the same key
//! and the same MAC as the check, so a minted token and a verified one cannot drift apart.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use tether_protocol::decode::parse_value;

/// Clock skew tolerated on `exp` and `nbf` when none is configured (the reference's default).
pub const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_secs(30);

/// Shortest shared secret accepted: HS256 is only as strong as its key.
pub const MIN_SECRET_BYTES: usize = 32;

/// Why an upgrade was refused: the body of the `401`, word for word the reference's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthRefusal(pub &'static str);

const INVALID: AuthRefusal = AuthRefusal("invalid websocket jwt");
const EXPIRED: AuthRefusal = AuthRefusal("expired websocket jwt");
const NOT_YET_VALID: AuthRefusal = AuthRefusal("websocket jwt is not valid yet");
const ISSUER_MISMATCH: AuthRefusal = AuthRefusal("websocket jwt issuer mismatch");
const AUDIENCE_MISMATCH: AuthRefusal = AuthRefusal("websocket jwt audience mismatch");
const TOO_LONG_LIVED: AuthRefusal =
    AuthRefusal("websocket jwt lives longer than this server accepts; mint a shorter-lived token");

/// The header of every token [`SharedSecret::mint`] signs.
const MINTED_HEADER: &str = r#"{"alg":"HS256","typ":"JWT"}"#;

/// An HS256 key, read from its file as the server reads `--ws-shared-secret-file`: whoever
/// mints with the same file signs with the same bytes the server checks with. Not `Debug`, so
/// that no log or error can show it.
#[derive(Clone)]
pub struct SharedSecret(Arc<[u8]>);

impl SharedSecret {
    /// The key in a secret file's `contents`: text (UTF-8) is trimmed, as the reference trims
    /// it, so a trailing newline is not part of the key; anything else is a binary key (`head
    /// -c 32 /dev/urandom`), used byte for byte — the reference refuses it.
    pub fn from_file_contents(contents: &[u8]) -> Result<Self, SecretError> {
        let secret = match std::str::from_utf8(contents) {
            Ok(text) => text.trim().as_bytes(),
            Err(_) => contents,
        };
        if secret.is_empty() {
            return Err(SecretError::Empty);
        }
        if secret.len() < MIN_SECRET_BYTES {
            return Err(SecretError::TooShort);
        }
        Ok(Self(secret.into()))
    }

    /// A token with the header `{"alg":"HS256","typ":"JWT"}` and `claims`, signed with this key.
    pub fn mint(&self, claims: &serde_json::Map<String, Value>) -> String {
        let header = URL_SAFE_NO_PAD.encode(MINTED_HEADER);
        // A map of JSON values always serialises.
        let claims = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).unwrap_or_default());
        let signed = format!("{header}.{claims}");
        let mut mac = self.mac();
        mac.update(signed.as_bytes());
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()))
    }

    /// Whether `token`'s last part is the HS256 signature, with this key, of the rest (compared
    /// in constant time). Nothing else about the token is checked.
    pub fn signed(&self, token: &str) -> bool {
        let Some((signed, signature)) = token.rsplit_once('.') else { return false };
        let Ok(signature) = URL_SAFE_NO_PAD.decode(signature) else { return false };
        let mut mac = self.mac();
        mac.update(signed.as_bytes());
        mac.verify_slice(&signature).is_ok()
    }

    fn mac(&self) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC accepts any key length")
    }
}

/// Checks HS256 tokens against one shared secret.
#[derive(Clone)]
pub struct JwtVerifier {
    secret: SharedSecret,
    issuer: Option<String>,
    audience: Option<String>,
    max_clock_skew_secs: i64,
    /// The longest a token may be valid for, from now (and from its `iat`, when it has one).
    max_lifetime_secs: Option<i64>,
}

impl JwtVerifier {
    /// `secret` as read from its file (see [`SharedSecret::from_file_contents`]). `issuer` and
    /// `audience` are trimmed, and an empty one is no requirement.
    pub fn new(
        secret: &[u8],
        issuer: Option<String>,
        audience: Option<String>,
        max_clock_skew: Duration,
    ) -> Result<Self, SecretError> {
        let secret = SharedSecret::from_file_contents(secret)?;
        let max_clock_skew_secs =
            i64::try_from(max_clock_skew.as_secs()).map_err(|_| SecretError::SkewTooLarge)?;
        let required =
            |value: Option<String>| value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        Ok(Self {
            secret,
            issuer: required(issuer),
            audience: required(audience),
            max_clock_skew_secs,
            max_lifetime_secs: None,
        })
    }

    /// Refuses tokens valid for longer than `lifetime` (a Tether setting; the reference takes
    /// any `exp`): a leaked long-lived token then cannot open connections for days.
    pub fn with_max_lifetime(mut self, lifetime: Duration) -> Self {
        self.max_lifetime_secs = Some(i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX));
        self
    }

    pub fn verify(&self, token: &str) -> Result<(), AuthRefusal> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        self.verify_at(token, i64::try_from(now).unwrap_or(i64::MAX))
    }

    fn verify_at(&self, token: &str, now: i64) -> Result<(), AuthRefusal> {
        let DecodedToken { header, claims } = DecodedToken::decode(token).map_err(|_| INVALID)?;
        if header.get("alg").and_then(Value::as_str) != Some("HS256") {
            return Err(INVALID);
        }
        for name in ["typ", "kid"] {
            if header.get(name).is_some_and(|value| !value.is_string()) {
                return Err(INVALID);
            }
        }
        // `crit` names extensions the verifier must understand (RFC 7515 §4.1.11); this one
        // understands none, so any `crit` (an empty one is malformed) refuses the token.
        if header.contains_key("crit") {
            return Err(INVALID);
        }
        if !self.secret.signed(token) {
            return Err(INVALID);
        }

        let exp = claims.get("exp").and_then(Value::as_i64).ok_or(INVALID)?;
        // Not checked by the reference: only an integer `iat` counts, for the lifetime.
        let iat = claims.get("iat").and_then(Value::as_i64);
        let nbf = match claims.get("nbf") {
            None | Some(Value::Null) => None,
            Some(value) => Some(value.as_i64().ok_or(INVALID)?),
        };
        let iss = match claims.get("iss") {
            None | Some(Value::Null) => None,
            Some(Value::String(iss)) => Some(iss.as_str()),
            Some(_) => return Err(INVALID),
        };
        let aud: Vec<&str> = match claims.get("aud") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(aud)) => vec![aud.as_str()],
            Some(Value::Array(auds)) => {
                auds.iter().map(Value::as_str).collect::<Option<_>>().ok_or(INVALID)?
            }
            Some(_) => return Err(INVALID),
        };

        let skew = self.max_clock_skew_secs;
        if now > exp.saturating_add(skew) {
            return Err(EXPIRED);
        }
        if nbf.is_some_and(|nbf| now < nbf.saturating_sub(skew)) {
            return Err(NOT_YET_VALID);
        }
        if let Some(max) = self.max_lifetime_secs {
            let from_now = exp > now.saturating_add(max).saturating_add(skew);
            let from_issue = iat.is_some_and(|iat| exp.saturating_sub(iat) > max);
            if from_now || from_issue {
                return Err(TOO_LONG_LIVED);
            }
        }
        if let Some(issuer) = &self.issuer
            && iss != Some(issuer.as_str())
        {
            return Err(ISSUER_MISMATCH);
        }
        if let Some(audience) = &self.audience
            && !aud.contains(&audience.as_str())
        {
            return Err(AUDIENCE_MISMATCH);
        }
        Ok(())
    }
}

/// Why a shared secret cannot be used (the caller adds the file's path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretError {
    Empty,
    TooShort,
    SkewTooLarge,
}

/// A token's header and claims, decoded and not verified: what the check reads, and what
/// `tether token inspect` shows.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedToken {
    pub header: serde_json::Map<String, Value>,
    pub claims: serde_json::Map<String, Value>,
}

impl DecodedToken {
    /// Splits `token` into its three base64url parts (no padding) and decodes the first two,
    /// each a JSON object (duplicate keys refused). The signature is only checked to be
    /// base64url; whether it is right is [`SharedSecret::signed`]'s question.
    pub fn decode(token: &str) -> Result<Self, MalformedToken> {
        let parts: Vec<&str> = token.split('.').collect();
        let [header, claims, signature] = parts[..] else {
            return Err(MalformedToken::Parts(parts.len()));
        };
        let header = decode_object(header, TokenPart::Header)?;
        let claims = decode_object(claims, TokenPart::Claims)?;
        if URL_SAFE_NO_PAD.decode(signature).is_err() {
            return Err(MalformedToken::NotBase64(TokenPart::Signature));
        }
        Ok(Self { header, claims })
    }
}

/// Why a string is not a JWT at all (as opposed to a JWT that is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MalformedToken {
    #[error("a JWT is three base64url parts joined by dots; this has {0} part(s)")]
    Parts(usize),
    #[error("its {0} is not base64url (unpadded)")]
    NotBase64(TokenPart),
    #[error("its {0} is not a JSON object")]
    NotAnObject(TokenPart),
}

/// One of a JWT's three parts, as an error names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenPart {
    Header,
    Claims,
    Signature,
}

impl std::fmt::Display for TokenPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Header => "header",
            Self::Claims => "claims part",
            Self::Signature => "signature",
        })
    }
}

/// A base64url part (no padding) holding a JSON object; duplicate keys are refused.
fn decode_object(
    part: &str,
    which: TokenPart,
) -> Result<serde_json::Map<String, Value>, MalformedToken> {
    let bytes = URL_SAFE_NO_PAD.decode(part).map_err(|_| MalformedToken::NotBase64(which))?;
    match parse_value(&bytes) {
        Ok(Value::Object(object)) => Ok(object),
        _ => Err(MalformedToken::NotAnObject(which)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";
    const NOW: i64 = 1_800_000_000;

    /// An HS256 (or any `alg`) token over `claims`, signed with `secret`.
    fn mint(secret: &str, header: &Value, claims: &Value) -> String {
        let header = URL_SAFE_NO_PAD.encode(serde_json::to_vec(header).unwrap());
        let claims = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).unwrap());
        let signed = format!("{header}.{claims}");
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(signed.as_bytes());
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()))
    }

    fn token(claims: Value) -> String {
        mint(SECRET, &json!({"alg": "HS256", "typ": "JWT"}), &claims)
    }

    fn verifier(issuer: Option<&str>, audience: Option<&str>, skew: u64) -> JwtVerifier {
        let issuer = issuer.map(str::to_owned);
        let audience = audience.map(str::to_owned);
        JwtVerifier::new(
            format!("{SECRET}\n").as_bytes(),
            issuer,
            audience,
            Duration::from_secs(skew),
        )
        .unwrap()
    }

    #[test]
    fn signature_and_shape_failures_are_invalid() {
        let v = verifier(None, None, 0);
        assert_eq!(v.verify_at(&token(json!({"exp": NOW})), NOW), Ok(()));
        let claims = json!({"exp": NOW + 60});
        let other = mint("another secret, thirty-two bytes!", &json!({"alg": "HS256"}), &claims);
        let none = mint(SECRET, &json!({"alg": "none"}), &claims);
        let lower = mint(SECRET, &json!({"alg": "hs256"}), &claims);
        let kid = mint(SECRET, &json!({"alg": "HS256", "kid": 1}), &claims);
        for bad in [other, none, lower, kid, "a.b".into(), format!("{}.", token(claims.clone()))] {
            assert_eq!(v.verify_at(&bad, NOW), Err(INVALID), "{bad}");
        }
        for claims in [
            json!({}),
            json!({"exp": 1.5e9}),
            json!({"exp": "1"}),
            json!({"exp": NOW, "iss": 3}),
            json!({"exp": NOW, "aud": ["a", 5]}),
            json!({"exp": NOW, "nbf": "0"}),
        ] {
            assert_eq!(v.verify_at(&token(claims.clone()), NOW), Err(INVALID), "{claims}");
        }
        let extra = json!({"alg": "HS256", "kid": "k1", "typ": "foo", "x-other": 1});
        assert_eq!(v.verify_at(&mint(SECRET, &extra, &json!({"exp": NOW})), NOW), Ok(()));
        for crit in [json!(["x"]), json!([]), json!(["exp"])] {
            let header = json!({"alg": "HS256", "crit": crit, "x": 1});
            let token = mint(SECRET, &header, &json!({"exp": NOW}));
            assert_eq!(v.verify_at(&token, NOW), Err(INVALID), "{header}");
        }
    }

    #[test]
    fn the_time_window_is_exact_to_the_second_with_the_skew() {
        let v = verifier(None, None, 30);
        assert_eq!(v.verify_at(&token(json!({"exp": NOW - 30})), NOW), Ok(()));
        assert_eq!(v.verify_at(&token(json!({"exp": NOW - 31})), NOW), Err(EXPIRED));
        assert_eq!(v.verify_at(&token(json!({"exp": NOW, "nbf": NOW + 30})), NOW), Ok(()));
        assert_eq!(
            v.verify_at(&token(json!({"exp": NOW, "nbf": NOW + 31})), NOW),
            Err(NOT_YET_VALID)
        );
        assert_eq!(v.verify_at(&token(json!({"exp": 0})), NOW), Err(EXPIRED));
        assert_eq!(v.verify_at(&token(json!({"exp": i64::MAX, "iat": "whenever"})), NOW), Ok(()));
    }

    #[test]
    fn a_maximum_lifetime_bounds_exp_from_now_and_from_iat() {
        let v = verifier(None, None, 30).with_max_lifetime(Duration::from_secs(3600));
        assert_eq!(v.verify_at(&token(json!({"exp": NOW + 3600 + 30})), NOW), Ok(()));
        assert_eq!(v.verify_at(&token(json!({"exp": NOW + 3600 + 31})), NOW), Err(TOO_LONG_LIVED));
        let issued = json!({"exp": NOW + 60, "iat": NOW - 3600});
        assert_eq!(v.verify_at(&token(issued), NOW), Err(TOO_LONG_LIVED));
        assert_eq!(v.verify_at(&token(json!({"exp": NOW, "iat": "x"})), NOW), Ok(()));
        // Without the setting, any exp is accepted, as by the reference.
        let open = verifier(None, None, 30);
        assert_eq!(open.verify_at(&token(json!({"exp": NOW + 10 * 365 * 86400})), NOW), Ok(()));
    }

    #[test]
    fn issuer_and_audience_are_checked_only_when_configured_and_in_that_order() {
        let open = verifier(None, None, 0);
        assert_eq!(
            open.verify_at(&token(json!({"exp": NOW, "iss": "x", "aud": "y"})), NOW),
            Ok(())
        );
        let v = verifier(Some(" control "), Some("executor"), 0);
        let good = json!({"exp": NOW, "iss": "control", "aud": ["other", "executor"]});
        assert_eq!(v.verify_at(&token(good), NOW), Ok(()));
        let both_wrong = json!({"exp": NOW, "iss": "else", "aud": "else"});
        assert_eq!(v.verify_at(&token(both_wrong), NOW), Err(ISSUER_MISMATCH));
        let no_aud = json!({"exp": NOW, "iss": "control"});
        assert_eq!(v.verify_at(&token(no_aud), NOW), Err(AUDIENCE_MISMATCH));
        let expired_and_wrong = json!({"exp": NOW - 1, "iss": "else"});
        assert_eq!(v.verify_at(&token(expired_and_wrong), NOW), Err(EXPIRED));
    }

    /// `SharedSecret::mint` signs what the verifier accepts, byte for byte the token a
    /// hand-rolled HS256 signer makes; a changed claim or signature is refused.
    #[test]
    fn a_minted_token_verifies_and_a_tampered_one_does_not() {
        let secret = SharedSecret::from_file_contents(format!("{SECRET}\n").as_bytes()).unwrap();
        let claims =
            json!({"exp": NOW + 60, "iat": NOW, "iss": "control", "aud": "executor", "sub": "ci"});
        let token = secret.mint(claims.as_object().unwrap());
        assert_eq!(token, mint(SECRET, &json!({"alg": "HS256", "typ": "JWT"}), &claims));
        let v = verifier(Some("control"), Some("executor"), 0);
        assert_eq!(v.verify_at(&token, NOW), Ok(()));
        assert!(secret.signed(&token));

        let [header, claims, signature] = token.split('.').collect::<Vec<_>>()[..] else {
            panic!("{token}")
        };
        let forged = json!({"exp": NOW + 86_400, "iss": "control", "aud": "executor"});
        let forged = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        // Another first character changes the signature's first byte, and stays base64url.
        let swapped = if signature.starts_with('A') { "B" } else { "A" };
        for tampered in [
            format!("{header}.{forged}.{signature}"),
            format!("{header}.{claims}.{swapped}{}", &signature[1..]),
        ] {
            assert_eq!(v.verify_at(&tampered, NOW), Err(INVALID), "{tampered}");
            assert!(!secret.signed(&tampered));
        }
        let other = SharedSecret::from_file_contents(b"another secret, thirty-two bytes!").unwrap();
        assert!(!other.signed(&token));
    }

    #[test]
    fn decoding_names_the_part_that_is_not_a_jwts() {
        let token = token(json!({"exp": NOW}));
        let decoded = DecodedToken::decode(&token).unwrap();
        assert_eq!(Value::Object(decoded.header), json!({"alg": "HS256", "typ": "JWT"}));
        assert_eq!(Value::Object(decoded.claims), json!({"exp": NOW}));
        for (bad, error) in [
            ("a.b", MalformedToken::Parts(2)),
            ("a.b.c.d", MalformedToken::Parts(4)),
            ("e30=.e30.", MalformedToken::NotBase64(TokenPart::Header)),
            ("e30.W10.", MalformedToken::NotAnObject(TokenPart::Claims)),
            ("e30.e30.!", MalformedToken::NotBase64(TokenPart::Signature)),
        ] {
            assert_eq!(DecodedToken::decode(bad), Err(error), "{bad}");
        }
    }

    #[test]
    fn secrets_are_trimmed_and_must_be_long_enough() {
        assert_eq!(
            JwtVerifier::new(b" \n", None, None, Duration::ZERO).err(),
            Some(SecretError::Empty)
        );
        assert_eq!(
            JwtVerifier::new(b"short", None, None, Duration::ZERO).err(),
            Some(SecretError::TooShort)
        );
        let v = verifier(None, None, 0);
        let untrimmed =
            mint(&format!("{SECRET}\n"), &json!({"alg": "HS256"}), &json!({"exp": NOW}));
        assert_eq!(v.verify_at(&untrimmed, NOW), Err(INVALID));
    }
}
