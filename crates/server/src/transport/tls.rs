//! TLS for the WebSocket listener (`wss://`), so a server can be exposed without a proxy in
//! front: rustls, with a certificate chain and key from PEM files, or a self-signed
//! certificate made at startup that clients pin by its fingerprint.
//!
//! The handshakes themselves run in [`super::accept`], each in its connection's task and
//! under [`HANDSHAKE_TIMEOUT`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Longest a TLS handshake may take: a few round trips on any real link.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The server's TLS settings from a certificate chain and its private key, both PEM.
pub fn load_server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read the TLS certificate chain {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("cannot read the TLS private key {}: {e}", key.display()))?;
    server_config(certs, key, "the TLS certificate and key do not go together")
}

/// The server's TLS settings for a certificate chain and its key; `mismatch` says what a
/// refusal of the pair means.
pub(crate) fn server_config(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    mismatch: &str,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let mut config = builder()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("{mismatch}: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.ignore_client_order = true;
    Ok(Arc::new(config))
}

/// `SHA256:` and the hex SHA-256 of a certificate's DER bytes, as clients'
/// `--tls-fingerprint` takes it.
pub(crate) fn fingerprint(der: &[u8]) -> String {
    use sha2::Digest as _;
    format!("SHA256:{}", hex::encode(sha2::Sha256::digest(der)))
}

/// A server certificate made for this run, and what clients pin it by.
pub struct SelfSigned {
    pub config: Arc<rustls::ServerConfig>,
    /// `SHA256:` and the hex SHA-256 of the certificate's DER bytes, as clients'
    /// `--tls-fingerprint` takes it.
    pub fingerprint: String,
}

/// A fresh self-signed certificate (ECDSA P-256, in memory only: it never touches the disk and
/// ends with the process) for `names` — host names or IP addresses — and the settings to
/// serve it. A client trusts it by pinning its fingerprint, as ssh trusts a host key; its names
/// matter only to clients that check them.
pub fn self_signed(names: Vec<String>) -> Result<SelfSigned, String> {
    Ok(make_self_signed(names)?.0)
}

/// A fresh self-signed certificate for `names` and the settings to serve it, with the
/// certificate and its key as PEM (for [`super::kept_certificate`] to write).
pub(crate) fn make_self_signed(names: Vec<String>) -> Result<(SelfSigned, MadePem), String> {
    let certified = rcgen::generate_simple_self_signed(names)
        .map_err(|e| format!("cannot make a self-signed certificate: {e}"))?;
    let der = certified.cert.der().clone();
    let fingerprint = fingerprint(der.as_ref());
    let pem =
        MadePem { certificate: certified.cert.pem(), key: certified.signing_key.serialize_pem() };
    let key = PrivateKeyDer::try_from(certified.signing_key.serialize_der())
        .map_err(|e| format!("cannot use the self-signed certificate's key: {e}"))?;
    let config = server_config(vec![der], key, "cannot use the self-signed certificate")?;
    Ok((SelfSigned { config, fingerprint }, pem))
}

/// A made certificate and its private key, PEM-encoded.
pub(crate) struct MadePem {
    pub certificate: String,
    pub key: String,
}

/// The server's settings on aws-lc-rs's safe defaults, preferring AES-128-GCM over the
/// default AES-256-GCM whatever the client prefers (with `ignore_client_order`): both are
/// TLS 1.3's own suites, and with AES instructions the 128-bit key's fewer rounds are a third
/// less cipher work per byte — the largest single cost of moving files over `wss://`.
fn builder() -> Result<rustls::ConfigBuilder<rustls::ServerConfig, rustls::WantsVerifier>, String> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    let preferred = rustls::CipherSuite::TLS13_AES_128_GCM_SHA256;
    provider.cipher_suites.sort_by_key(|suite| suite.suite() != preferred);
    rustls::ServerConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))
}
