//! `--ws-auth` and its flags: who may open a WebSocket, checked (and refused) as the reference
//! checks them, in its order and words.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use tether_server::ListenAddress;
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

impl WsAuthArgs {
    /// The setting, checked (and refused) as the reference checks it.
    pub fn settings(&self, listen: &ListenAddress) -> anyhow::Result<WsAuth> {
        let auth = self.checked()?;
        // After the settings are checked, as the reference checks them.
        if auth.is_enabled() && matches!(listen, ListenAddress::Stdio) {
            bail!(
                "WebSocket auth requires a WebSocket listener, not stdio; listen on \
                 ws://HOST:PORT, or leave out --ws-auth"
            );
        }
        Ok(auth)
    }

    /// The files that let a client in, which no sandbox may read.
    pub fn secret_files(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.ws_token_file, &self.ws_shared_secret_file].into_iter().flatten()
    }

    /// The flags as one setting, whatever the listener.
    fn checked(&self) -> anyhow::Result<WsAuth> {
        let token_flags = self.ws_token_file.is_some() || self.ws_token_sha256.is_some();
        let jwt_flags = self.ws_shared_secret_file.is_some()
            || self.ws_issuer.is_some()
            || self.ws_audience.is_some()
            || self.ws_max_clock_skew_seconds.is_some()
            || self.ws_max_token_lifetime_seconds.is_some();
        match self.ws_auth {
            None if token_flags || jwt_flags => bail!(
                "websocket auth flags require `--ws-auth capability-token` or `--ws-auth signed-bearer-token`"
            ),
            None => Ok(WsAuth::None),
            Some(WsAuthMode::CapabilityToken) => {
                if jwt_flags {
                    bail!(
                        "`--ws-shared-secret-file`, `--ws-issuer`, `--ws-audience`, `--ws-max-clock-skew-seconds`, and `--ws-max-token-lifetime-seconds` require `--ws-auth signed-bearer-token`"
                    );
                }
                match (&self.ws_token_file, &self.ws_token_sha256) {
                    (Some(_), Some(_)) => {
                        bail!(
                            "`--ws-token-file` and `--ws-token-sha256` are mutually exclusive; give one of them"
                        )
                    }
                    (Some(file), None) => {
                        let token = std::fs::read_to_string(file).with_context(|| {
                            format!("failed to read websocket auth secret {}", absolute(file))
                        })?;
                        WsAuth::capability_token(&token).map_err(anyhow::Error::msg)
                    }
                    (None, Some(digest)) => {
                        WsAuth::capability_token_sha256(digest).map_err(anyhow::Error::msg)
                    }
                    (None, None) => bail!(
                        "--ws-token-file or --ws-token-sha256 is required when --ws-auth capability-token is set"
                    ),
                }
            }
            Some(WsAuthMode::SignedBearerToken) => {
                if token_flags {
                    bail!(
                        "`--ws-token-file` and `--ws-token-sha256` require `--ws-auth capability-token`, not `signed-bearer-token`"
                    );
                }
                let Some(file) = &self.ws_shared_secret_file else {
                    bail!(
                        "`--ws-shared-secret-file` is required when `--ws-auth signed-bearer-token` is set"
                    );
                };
                let path = absolute(file);
                let secret = std::fs::read(file)
                    .with_context(|| format!("failed to read websocket auth secret {path}"))?;
                let skew = self
                    .ws_max_clock_skew_seconds
                    .map_or(DEFAULT_MAX_CLOCK_SKEW, Duration::from_secs);
                let issuer = self.ws_issuer.clone();
                let verifier = JwtVerifier::new(&secret, issuer, self.ws_audience.clone(), skew)
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
                let verifier = match self.ws_max_token_lifetime_seconds {
                    Some(seconds) => verifier.with_max_lifetime(Duration::from_secs(seconds)),
                    None => verifier,
                };
                Ok(WsAuth::SignedBearerToken(verifier))
            }
        }
    }
}

/// A path as an error shows it: made absolute against the current directory.
fn absolute(path: &std::path::Path) -> String {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned()).display().to_string()
}
