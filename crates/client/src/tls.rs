//! What a `wss://` connection trusts: the system's root certificates, or — for a server whose
//! certificate a private CA signed, or a self-signed one — exactly the CA in a file.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::error::{ClientError, ConnectError, ConnectErrorKind};

/// The rustls settings for one connection.
pub(crate) fn client_config(
    ca_file: Option<&Path>,
) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(file) => {
            let certs = CertificateDer::pem_file_iter(file)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    let message = format!("cannot read the CA file {}: {e}", file.display());
                    ConnectError::new(ConnectErrorKind::TlsSetup, message).caused_by(e)
                })?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                let message = format!("the CA file {} holds no usable certificate", file.display());
                return Err(ConnectError::new(ConnectErrorKind::TlsSetup, message).into());
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                let message = "no system root certificates were found: pass a CA file";
                return Err(ConnectError::new(ConnectErrorKind::TlsSetup, message).into());
            }
        }
    }
    let config =
        rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    Ok(Arc::new(config))
}
