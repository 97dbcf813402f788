//! The certificate authority a masking proxy signs its hosts' certificates with: ECDSA P-256,
//! made in memory once per server; its key is never written anywhere. Its certificate is
//! written, with the system's roots, as the bundle a masked child trusts:
//! `$CODEX_HOME/proxy/ca-<sha256>.pem` and `ca-bundle-<sha256>.pem`, named by their contents
//! as the reference names them, so a bundle never changes under a running command.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};

/// Hosts whose certificates are kept: masking binds a handful of hosts, so this only bounds
/// what a command naming many `*.ghe.com` hosts can make the server hold.
const MAX_CACHED_HOSTS: usize = 256;

/// The authority, and the server configurations made with it, by host.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    certificate_pem: String,
    configs: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
    bundle: Mutex<Option<PathBuf>>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").finish_non_exhaustive()
    }
}

/// The server's authority, made on first use.
pub fn authority() -> Result<Arc<Authority>, String> {
    static AUTHORITY: OnceLock<Result<Arc<Authority>, String>> = OnceLock::new();
    AUTHORITY.get_or_init(|| Authority::new().map(Arc::new).map_err(|e| e.to_string())).clone()
}

impl Authority {
    fn new() -> Result<Self, rcgen::Error> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, "Tether managed network proxy CA");
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let certificate = params.self_signed(&key)?;
        let certificate_pem = certificate.pem();
        Ok(Self {
            issuer: Issuer::new(params, key),
            certificate_pem,
            configs: Mutex::new(HashMap::new()),
            bundle: Mutex::new(None),
        })
    }

    /// A TLS server configuration presenting a certificate for `host`, signed by this
    /// authority.
    pub fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, String> {
        let mut configs = self.configs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(config) = configs.get(host) {
            return Ok(config.clone());
        }
        let key =
            KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| e.to_string())?;
        let params = CertificateParams::new(vec![host.to_owned()]).map_err(|e| e.to_string())?;
        let certificate = params.signed_by(&key, &self.issuer).map_err(|e| e.to_string())?;
        let chain = vec![CertificateDer::from(certificate.der().to_vec())];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if configs.len() >= MAX_CACHED_HOSTS {
            configs.clear();
        }
        configs.insert(host.to_owned(), config.clone());
        Ok(config)
    }

    /// The bundle a masked child trusts, under `codex_home/proxy`, written on first use.
    pub fn bundle(&self, codex_home: &Path) -> std::io::Result<PathBuf> {
        let mut written = self.bundle.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(path) = written.as_ref().filter(|path| path.starts_with(codex_home)) {
            return Ok(path.clone());
        }
        let dir = codex_home.join("proxy");
        std::fs::create_dir_all(&dir)?;
        write_named(&dir, "ca", self.certificate_pem.as_bytes())?;
        let mut bundle = system_roots_pem();
        bundle.push_str(&self.certificate_pem);
        let path = write_named(&dir, "ca-bundle", bundle.as_bytes())?;
        *written = Some(path.clone());
        Ok(path)
    }
}

/// Writes `contents` as `<dir>/<stem>-<sha256>.pem` (through a temporary name, so no reader
/// sees half a file) unless it is there already.
fn write_named(dir: &Path, stem: &str, contents: &[u8]) -> std::io::Result<PathBuf> {
    let path = dir.join(format!("{stem}-{}.pem", hex::encode(Sha256::digest(contents))));
    if !path.exists() {
        let temporary = dir.join(format!(".{stem}-{}.tmp", std::process::id()));
        std::fs::write(&temporary, contents)?;
        std::fs::rename(&temporary, &path)?;
    }
    Ok(path)
}

/// The system's roots, and the executor's `SSL_CERT_FILE`, which rustls-native-certs reads:
/// loaded once (a few hundred KiB to parse), for the bundle a masked child trusts and for the
/// proxy's own connections to masked hosts alike.
pub(super) fn native_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| rustls_native_certs::load_native_certs().certs)
}

/// [`native_roots`] as PEM.
fn system_roots_pem() -> String {
    let mut pem = String::new();
    for certificate in native_roots() {
        let text = base64::engine::general_purpose::STANDARD.encode(certificate.as_ref());
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in text.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).unwrap_or_default());
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    pem
}
