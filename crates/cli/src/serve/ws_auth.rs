//! `--ws-auth` and its flags: who may open a WebSocket, checked (and refused) as the reference
//! checks them, in its order and words.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use tether_server::auth::WsAuth;
use tether_server::jwt::{DEFAULT_MAX_CLOCK_SKEW, JwtVerifier, MIN_SECRET_BYTES, SecretError};

/// The reference's WebSocket auth flags, and Tether's `--ws-max-token-lifetime-seconds`.
#[derive(Args)]
pub struct WsAuthArgs {
    /// How WebSocket clients authenticate: `Authorization: Bearer <token>` on the upgrade,
    /// checked against a capability token or as an HS256 JWT.
    #[arg(long, value_enum)]
    ws_auth: Option<WsAuthMode>,

    /// The capability token's file (its contents, trimmed, are the token).
    #[arg(long, value_name = "PATH")]
    ws_token_file: Option<PathBuf>,

    /// The capability token's SHA-256, in hex (instead of --ws-token-file).
    #[arg(long, value_name = "HEX")]
    ws_token_sha256: Option<String>,

    /// The file holding the secret signed bearer tokens are signed with.
    #[arg(long, value_name = "PATH")]
    ws_shared_secret_file: Option<PathBuf>,

    /// The issuer (`iss`) signed bearer tokens must name.
    #[arg(long, value_name = "ISSUER")]
    ws_issuer: Option<String>,

    /// An audience (`aud`) signed bearer tokens must include.
    #[arg(long, value_name = "AUDIENCE")]
    ws_audience: Option<String>,

    /// Clock skew tolerated on a signed bearer token's `exp` and `nbf`.
    #[arg(long, value_name = "SECONDS")]
    ws_max_clock_skew_seconds: Option<u64>,

    /// Refuse signed bearer tokens valid for longer than this (from now, and from their `iat`).
    #[arg(long, value_name = "SECONDS")]
    ws_max_token_lifetime_seconds: Option<u64>,
}

/// `--ws-auth`, in the reference's words.
#[derive(Clone, Copy, clap::ValueEnum)]
enum WsAuthMode {
    CapabilityToken,
    SignedBearerToken,
}

/// Why the WebSocket auth flags are refused as given, in the reference's words. Decided on the
/// flags alone: each names the flags to give instead.
#[derive(Debug, thiserror::Error)]
pub enum WsAuthFlagError {
    #[error(
        "websocket auth flags require `--ws-auth capability-token` or `--ws-auth signed-bearer-token`"
    )]
    NoMode,
    #[error(
        "`--ws-shared-secret-file`, `--ws-issuer`, `--ws-audience`, `--ws-max-clock-skew-seconds`, and `--ws-max-token-lifetime-seconds` require `--ws-auth signed-bearer-token`"
    )]
    SignedFlagsWithToken,
    #[error("`--ws-token-file` and `--ws-token-sha256` are mutually exclusive; give one of them")]
    TwoTokens,
    #[error(
        "--ws-token-file or --ws-token-sha256 is required when --ws-auth capability-token is set"
    )]
    NoToken,
    /// `--ws-token-sha256` that is not a SHA-256 in hex, in [`WsAuth`]'s words.
    #[error("{0}")]
    TokenSha256(String),
    #[error(
        "`--ws-token-file` and `--ws-token-sha256` require `--ws-auth capability-token`, not `signed-bearer-token`"
    )]
    TokenFlagsWithSigned,
    #[error("`--ws-shared-secret-file` is required when `--ws-auth signed-bearer-token` is set")]
    NoSecretFile,
}

/// Where the WebSocket auth setting comes from, as the flags name it; [`Self::load`] reads
/// what it names. Apart from the reading so that every mistake of the flags is found before a
/// file is opened.
pub enum WsAuthSource {
    /// A setting the flags give whole: none, or a token's digest.
    Given(WsAuth),
    /// A capability token, in this file.
    TokenFile(PathBuf),
    /// Signed bearer tokens, checked against the secret in `secret_file`.
    Signed {
        secret_file: PathBuf,
        issuer: Option<String>,
        audience: Option<String>,
        max_clock_skew: Duration,
        max_token_lifetime: Option<Duration>,
    },
}

impl WsAuthSource {
    /// Whether a client must authenticate, which a stdio listener cannot ask of it.
    pub fn is_enabled(&self) -> bool {
        !matches!(self, Self::Given(WsAuth::None))
    }

    /// The setting, reading the file it names, refused in the reference's words.
    pub fn load(self) -> anyhow::Result<WsAuth> {
        match self {
            Self::Given(auth) => Ok(auth),
            Self::TokenFile(file) => {
                let token = std::fs::read_to_string(&file).with_context(|| {
                    format!("failed to read websocket auth secret {}", absolute(&file))
                })?;
                WsAuth::capability_token(&token).map_err(anyhow::Error::msg)
            }
            Self::Signed { secret_file, issuer, audience, max_clock_skew, max_token_lifetime } => {
                let path = absolute(&secret_file);
                let secret = std::fs::read(&secret_file)
                    .with_context(|| format!("failed to read websocket auth secret {path}"))?;
                let verifier = JwtVerifier::new(&secret, issuer, audience, max_clock_skew)
                    .map_err(|error| match error {
                        SecretError::Empty => {
                            anyhow::anyhow!("websocket auth secret {path} must not be empty")
                        }
                        SecretError::TooShort => anyhow::anyhow!(
                            "signed websocket bearer secret {path} must be at least {MIN_SECRET_BYTES} bytes"
                        ),
                        SecretError::SkewTooLarge => {
                            anyhow::anyhow!("websocket auth clock skew must fit in a signed 64-bit integer")
                        }
                    })?;
                let verifier = match max_token_lifetime {
                    Some(lifetime) => verifier.with_max_lifetime(lifetime),
                    None => verifier,
                };
                Ok(WsAuth::SignedBearerToken(verifier))
            }
        }
    }
}

impl WsAuthArgs {
    /// The files that let a client in, which no sandbox may read.
    pub fn secret_files(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.ws_token_file, &self.ws_shared_secret_file].into_iter().flatten()
    }

    /// The flags as one source, whatever the listener, checked in the reference's order.
    pub fn source(&self) -> Result<WsAuthSource, WsAuthFlagError> {
        let token_flags = self.ws_token_file.is_some() || self.ws_token_sha256.is_some();
        let jwt_flags = self.ws_shared_secret_file.is_some()
            || self.ws_issuer.is_some()
            || self.ws_audience.is_some()
            || self.ws_max_clock_skew_seconds.is_some()
            || self.ws_max_token_lifetime_seconds.is_some();
        match self.ws_auth {
            None if token_flags || jwt_flags => Err(WsAuthFlagError::NoMode),
            None => Ok(WsAuthSource::Given(WsAuth::None)),
            Some(WsAuthMode::CapabilityToken) => {
                if jwt_flags {
                    return Err(WsAuthFlagError::SignedFlagsWithToken);
                }
                match (&self.ws_token_file, &self.ws_token_sha256) {
                    (Some(_), Some(_)) => Err(WsAuthFlagError::TwoTokens),
                    (Some(file), None) => Ok(WsAuthSource::TokenFile(file.clone())),
                    (None, Some(digest)) => WsAuth::capability_token_sha256(digest)
                        .map(WsAuthSource::Given)
                        .map_err(WsAuthFlagError::TokenSha256),
                    (None, None) => Err(WsAuthFlagError::NoToken),
                }
            }
            Some(WsAuthMode::SignedBearerToken) => {
                if token_flags {
                    return Err(WsAuthFlagError::TokenFlagsWithSigned);
                }
                let Some(file) = &self.ws_shared_secret_file else {
                    return Err(WsAuthFlagError::NoSecretFile);
                };
                Ok(WsAuthSource::Signed {
                    secret_file: file.clone(),
                    issuer: self.ws_issuer.clone(),
                    audience: self.ws_audience.clone(),
                    max_clock_skew: self
                        .ws_max_clock_skew_seconds
                        .map_or(DEFAULT_MAX_CLOCK_SKEW, Duration::from_secs),
                    max_token_lifetime: self.ws_max_token_lifetime_seconds.map(Duration::from_secs),
                })
            }
        }
    }
}

/// A path as an error shows it: made absolute against the current directory.
fn absolute(path: &std::path::Path) -> String {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned()).display().to_string()
}
