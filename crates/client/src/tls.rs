//! What a `wss://` connection trusts, in one of three ways:
//! - the system's root certificates (a server with a public certificate);
//! - exactly the certificates in a CA file (a private CA, or the server's own self-signed
//!   certificate — which webpki alone refuses as `CaUsedAsEndEntity` when it is marked CA:TRUE,
//!   as the usual `openssl req -x509` recipe marks it, though curl and OpenSSL take it);
//! - a pinned certificate fingerprint (`SHA256:<hex>`, as `tether serve --tls-self-signed`
//!   prints it), as ssh pins a host key: that certificate and no other, whatever its names.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, RootCertStore, SignatureScheme};
use sha2::{Digest as _, Sha256};

use crate::error::{ClientError, ConnectError, ConnectErrorKind};

/// The SHA-256 of a certificate (its DER bytes), the identity a client can pin.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TlsFingerprint(pub [u8; 32]);

impl TlsFingerprint {
    /// The fingerprint of a DER-encoded certificate.
    pub fn of(certificate_der: &[u8]) -> Self {
        Self(Sha256::digest(certificate_der).into())
    }
}

/// Written `SHA256:` and 64 lowercase hex digits, as `ssh-keygen -l` and `tether serve` write
/// fingerprints.
impl fmt::Display for TlsFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SHA256:")?;
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for TlsFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl ConnectError {
    /// The fingerprint of the certificate a refused server presented (`UntrustedCertificate`,
    /// `WrongFingerprint`): what a person checks against the server's own, and pins — or
    /// remembers, as ssh remembers a host key — once it is.
    pub fn presented(&self) -> Option<TlsFingerprint> {
        self.presented.map(TlsFingerprint)
    }
}

/// Why a fingerprint could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a TLS fingerprint is `SHA256:` and 64 hex digits (as `tether serve --tls-self-signed` prints it), not {0:?}"
)]
pub struct InvalidFingerprint(String);

/// Reads `SHA256:<64 hex>`; case, colons and the `SHA256:` prefix itself are optional, so
/// `openssl x509 -fingerprint -sha256` output (`AB:CD:…`) pastes as it is.
impl FromStr for TlsFingerprint {
    type Err = InvalidFingerprint;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let trimmed = text.trim();
        let digits = match trimmed.get(..7) {
            Some(prefix) if prefix.eq_ignore_ascii_case("sha256:") => &trimmed[7..],
            _ => trimmed.strip_prefix("sha256 Fingerprint=").unwrap_or(trimmed),
        };
        let hex: String = digits.chars().filter(|c| *c != ':').collect();
        let mut bytes = [0u8; 32];
        if hex.len() != 64 || !hex.is_ascii() {
            return Err(InvalidFingerprint(text.to_owned()));
        }
        for (byte, pair) in bytes.iter_mut().zip(hex.as_bytes().chunks(2)) {
            let pair =
                std::str::from_utf8(pair).map_err(|_| InvalidFingerprint(text.to_owned()))?;
            *byte =
                u8::from_str_radix(pair, 16).map_err(|_| InvalidFingerprint(text.to_owned()))?;
        }
        Ok(Self(bytes))
    }
}

/// A server whose certificate is not the pinned one: both fingerprints, so a person can tell a
/// regenerated certificate (a restarted `--tls-self-signed` server) from an impostor.
#[derive(Debug, thiserror::Error)]
#[error("the server's certificate is {presented}, not the pinned {expected}")]
pub struct FingerprintMismatch {
    pub expected: TlsFingerprint,
    pub presented: TlsFingerprint,
}

/// A certificate the client does not trust, with the fingerprint of what the server presented:
/// shown to the person, as ssh shows an unknown host key, so that they can pin it once they
/// know it is their server's.
#[derive(Debug, thiserror::Error)]
#[error("{why:?}")]
pub struct Untrusted {
    pub why: CertificateError,
    pub presented: TlsFingerprint,
}

/// The rustls settings for one connection: pinned to `fingerprint` if given, else trusting the
/// certificates in `ca_file`, else the system's roots.
pub(crate) fn client_config(
    ca_file: Option<&Path>,
    fingerprint: Option<TlsFingerprint>,
) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    // AES-128-GCM before aws-lc-rs's default AES-256-GCM: both are TLS 1.3's own suites, and
    // with AES instructions the shorter key's fewer rounds are a third less cipher work per
    // byte, the largest single cost of moving files over `wss://`.
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    let preferred = rustls::CipherSuite::TLS13_AES_128_GCM_SHA256;
    provider.cipher_suites.sort_by_key(|suite| suite.suite() != preferred);
    let provider = Arc::new(provider);
    let algorithms = provider.signature_verification_algorithms;
    let verifier: Arc<dyn ServerCertVerifier> = match (fingerprint, ca_file) {
        (Some(expected), _) => Arc::new(Verifier { trust: Trust::Pinned(expected), algorithms }),
        (None, Some(file)) => {
            let certificates = read_ca_file(file)?;
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(certificates.iter().cloned());
            if added == 0 {
                let message = format!("the CA file {} holds no usable certificate", file.display());
                return Err(ConnectError::new(ConnectErrorKind::TlsSetup, message).into());
            }
            let webpki = webpki_verifier(roots, &provider)?;
            Arc::new(Verifier { trust: Trust::CaFile { webpki, certificates }, algorithms })
        }
        (None, None) => {
            let mut roots = RootCertStore::empty();
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if roots.is_empty() {
                let message = "no system root certificates were found: pass a CA file";
                return Err(ConnectError::new(ConnectErrorKind::TlsSetup, message).into());
            }
            let webpki = webpki_verifier(roots, &provider)?;
            Arc::new(Verifier { trust: Trust::Roots(webpki), algorithms })
        }
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConnectError::new(ConnectErrorKind::TlsSetup, e.to_string()).caused_by(e))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

fn read_ca_file(file: &Path) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let certificates = CertificateDer::pem_file_iter(file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            let message = format!("cannot read the CA file {}: {e}", file.display());
            ConnectError::new(ConnectErrorKind::TlsSetup, message).caused_by(e)
        })?;
    Ok(certificates)
}

fn webpki_verifier(
    roots: RootCertStore,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, ClientError> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build().map_err(
        |e| ConnectError::new(ConnectErrorKind::TlsSetup, e.to_string()).caused_by(e).into(),
    )
}

/// What a [`Verifier`] trusts beyond webpki's own rules.
#[derive(Debug)]
enum Trust {
    /// A CA file, as webpki does, and also a server certificate that is itself in the file
    /// although marked as a CA (the self-signed certificate of the common openssl recipe).
    /// That one must still carry the name connected to; it is trusted as the exact bytes the
    /// user put in the file, not as an issuer of anything.
    CaFile { webpki: Arc<WebPkiServerVerifier>, certificates: Vec<CertificateDer<'static>> },
    /// One certificate, by its SHA-256, whoever issued it and whatever names it carries.
    Pinned(TlsFingerprint),
    /// The system's roots, as webpki checks them.
    Roots(Arc<WebPkiServerVerifier>),
}

/// Checks the server's certificate by its [`Trust`]; the handshake's signatures are checked
/// against that certificate either way, so only the holder of its private key passes.
#[derive(Debug)]
struct Verifier {
    trust: Trust,
    algorithms: WebPkiSupportedAlgorithms,
}

/// A refusal of `end_entity` made to carry its fingerprint ([`Untrusted`]).
fn with_fingerprint(
    verified: Result<ServerCertVerified, rustls::Error>,
    end_entity: &CertificateDer<'_>,
) -> Result<ServerCertVerified, rustls::Error> {
    match verified {
        Err(rustls::Error::InvalidCertificate(why)) => {
            let untrusted = Untrusted { why, presented: TlsFingerprint::of(end_entity) };
            Err(rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(
                untrusted,
            )))))
        }
        other => other,
    }
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.trust {
            Trust::Pinned(expected) => {
                let presented = TlsFingerprint::of(end_entity);
                if presented != *expected {
                    let mismatch = FingerprintMismatch { expected: *expected, presented };
                    return Err(rustls::Error::InvalidCertificate(CertificateError::Other(
                        OtherError(Arc::new(mismatch)),
                    )));
                }
                Ok(ServerCertVerified::assertion())
            }
            Trust::CaFile { webpki, certificates } => {
                let verified = webpki.verify_server_cert(
                    end_entity,
                    intermediates,
                    server_name,
                    ocsp_response,
                    now,
                );
                match verified {
                    Err(rustls::Error::InvalidCertificate(CertificateError::Other(other)))
                        if other.0.downcast_ref::<webpki::Error>()
                            == Some(&webpki::Error::CaUsedAsEndEntity)
                            && certificates.iter().any(|c| c.as_ref() == end_entity.as_ref()) =>
                    {
                        // webpki checked its validity period before its role; its name is left.
                        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
                        rustls::client::verify_server_name(&parsed, server_name)?;
                        Ok(ServerCertVerified::assertion())
                    }
                    other => with_fingerprint(other, end_entity),
                }
            }
            Trust::Roots(webpki) => with_fingerprint(
                webpki.verify_server_cert(
                    end_entity,
                    intermediates,
                    server_name,
                    ocsp_response,
                    now,
                ),
                end_entity,
            ),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_read_as_printed_or_as_openssl_prints_them() {
        let fingerprint = TlsFingerprint([0xab; 32]);
        let printed = fingerprint.to_string();
        assert_eq!(printed, format!("SHA256:{}", "ab".repeat(32)));
        assert_eq!(printed.parse(), Ok(fingerprint));
        assert_eq!(printed.to_uppercase().parse(), Ok(fingerprint));
        let openssl = format!("sha256 Fingerprint={}", vec!["AB"; 32].join(":"));
        assert_eq!(openssl.parse(), Ok(fingerprint));
        assert_eq!("ab".repeat(32).parse(), Ok(fingerprint));
        for bad in ["SHA256:abc", "", &"zz".repeat(32), &format!("SHA256:{}", "é".repeat(32))] {
            assert!(bad.parse::<TlsFingerprint>().is_err(), "{bad}");
        }
    }
}
