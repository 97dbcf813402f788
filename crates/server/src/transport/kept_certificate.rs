//! A self-signed certificate kept in a directory (`tether serve --tls-self-signed-dir DIR`), so
//! that its fingerprint — what clients pinned, or remembered on first use as ssh remembers a
//! host key — outlives a restart. The first start makes it as `--tls-self-signed` makes one
//! and writes `cert.pem` and `key.pem` into the directory; every later start serves those.
//!
//! The key is the server's identity: whoever reads it can be the server. So the directory
//! must be this user's own and closed to group and others (one that is missing is made
//! `0700`), the key is written `0600`, and a key found open to others is refused rather than
//! served — as ssh refuses an unprotected private key.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::tls::{self, SelfSigned};

/// The certificate's file in the directory (PEM; not secret, `0644`).
pub const CERTIFICATE_FILE: &str = "cert.pem";
/// The private key's file in the directory (PKCS#8 PEM, `0600`).
pub const KEY_FILE: &str = "key.pem";

/// Whether this start made the certificate or found it kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Made now (first start) and written into the directory.
    Made,
    /// Read from the directory, as an earlier start left it.
    Loaded,
}

/// The certificate kept in `dir` and the settings to serve it: loaded when `dir` holds one,
/// else made for `names` (as [`tls::self_signed`] makes one) and written there. Refused, in a
/// message that says what to do, when `dir` or the key in it is open to group or others or
/// not this user's, or when `dir` holds only one of the two files.
pub fn kept_self_signed(dir: &Path, names: Vec<String>) -> Result<(SelfSigned, Kept), String> {
    let dir = private_dir(dir)?;
    // Two servers started at once on one directory must not each write half of a pair.
    let lock = File::open(&dir).map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| format!("cannot lock {}: {e}", dir.display()))?;
    let (cert, key) = (dir.join(CERTIFICATE_FILE), dir.join(KEY_FILE));
    match (exists(&cert)?, exists(&key)?) {
        (true, true) => Ok((load(&cert, &key)?, Kept::Loaded)),
        (false, false) => Ok((make(&dir, names)?, Kept::Made)),
        (true, false) => Err(half_there(&cert, &key)),
        (false, true) => Err(half_there(&key, &cert)),
    }
}

/// `dir`, made `0700` if missing, checked to be this user's and closed to everyone else.
fn private_dir(dir: &Path) -> Result<PathBuf, String> {
    match std::fs::metadata(dir) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| {
                format!(
                    "cannot make {}: {e}; give a directory this user can write to",
                    dir.display()
                )
            })?;
        }
        Err(error) => return Err(format!("cannot read {}: {error}", dir.display())),
        Ok(metadata) if !metadata.is_dir() => {
            return Err(format!("{} is not a directory; give a directory", dir.display()));
        }
        Ok(metadata) => {
            private(dir, &metadata, "chmod 700")?;
        }
    }
    Ok(dir.to_path_buf())
}

/// Refuses `path` (with its `metadata`) unless it is this user's and closed to group and
/// others; `fix` is the command that closes it.
fn private(path: &Path, metadata: &std::fs::Metadata, fix: &str) -> Result<(), String> {
    let me = rustix::process::geteuid().as_raw();
    if metadata.uid() != me {
        return Err(format!(
            "{} belongs to another user (uid {}), who could read or replace the server's key; \
             give a directory of this user's own",
            path.display(),
            metadata.uid()
        ));
    }
    let mode = metadata.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{} is open to group or others (mode {mode:04o}), and the server's key must be \
             readable by this user alone: {fix} {}",
            path.display(),
            path.display()
        ));
    }
    Ok(())
}

fn exists(path: &Path) -> Result<bool, String> {
    path.try_exists().map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn half_there(present: &Path, missing: &Path) -> String {
    format!(
        "{} is there but {} is not; put it back, or remove {} to have a new certificate made \
         (with a new fingerprint, which clients that remembered the old one will refuse)",
        present.display(),
        missing.display(),
        present.display()
    )
}

/// The kept pair, its key checked first.
fn load(cert: &Path, key: &Path) -> Result<SelfSigned, String> {
    let metadata =
        std::fs::metadata(key).map_err(|e| format!("cannot read {}: {e}", key.display()))?;
    private(key, &metadata, "chmod 600")?;
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read the TLS certificate {}: {e}", cert.display()))?;
    let Some(first) = certs.first() else {
        return Err(format!("{} holds no PEM certificate", cert.display()));
    };
    let fingerprint = tls::fingerprint(first.as_ref());
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("cannot read the TLS private key {}: {e}", key.display()))?;
    let config = tls::server_config(
        certs,
        key,
        &format!("{} and {} do not go together", cert.display(), KEY_FILE),
    )?;
    Ok(SelfSigned { config, fingerprint })
}

/// A new pair, written into `dir`: the key first, the certificate last, each under a
/// temporary name and renamed into place, so a start cut short leaves no half-written file.
fn make(dir: &Path, names: Vec<String>) -> Result<SelfSigned, String> {
    let (made, pem) = tls::make_self_signed(names)?;
    write_new(dir, KEY_FILE, pem.key.as_bytes(), 0o600)?;
    write_new(dir, CERTIFICATE_FILE, pem.certificate.as_bytes(), 0o644)?;
    File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| format!("cannot sync {}: {e}", dir.display()))?;
    Ok(made)
}

fn write_new(dir: &Path, name: &str, contents: &[u8], mode: u32) -> Result<(), String> {
    let (path, temporary) = (dir.join(name), dir.join(format!(".{name}.new")));
    let failed = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    // One a start cut short left (the lock is ours now): made anew with this mode.
    match std::fs::remove_file(&temporary) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(failed(error)),
        _ => {}
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&temporary)
        .map_err(failed)?;
    file.write_all(contents).and_then(|()| file.sync_all()).map_err(failed)?;
    std::fs::rename(&temporary, &path).map_err(failed)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tether-kept-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o777
    }

    #[test]
    fn made_once_then_served_as_kept() {
        let dir = scratch("kept").join("made");
        let (first, kept) = kept_self_signed(&dir, vec!["localhost".into()]).unwrap();
        assert_eq!(kept, Kept::Made);
        assert_eq!((mode(&dir), mode(&dir.join(KEY_FILE))), (0o700, 0o600));
        let (again, kept) = kept_self_signed(&dir, vec!["other".into()]).unwrap();
        assert_eq!(kept, Kept::Loaded);
        assert_eq!(again.fingerprint, first.fingerprint);
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.starts_with('.'))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }

    #[test]
    fn an_open_directory_or_key_or_half_a_pair_is_refused() {
        let dir = scratch("open");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let error = kept_self_signed(&dir, vec![]).err().unwrap();
        assert!(error.ends_with(&format!(": chmod 700 {}", dir.display())), "{error}");
        assert!(error.contains("(mode 0755)"), "{error}");

        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        kept_self_signed(&dir, vec![]).unwrap();
        let key = dir.join(KEY_FILE);
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
        let error = kept_self_signed(&dir, vec![]).err().unwrap();
        assert!(error.ends_with(&format!(": chmod 600 {}", key.display())), "{error}");

        std::fs::remove_file(dir.join(CERTIFICATE_FILE)).unwrap();
        let error = kept_self_signed(&dir, vec![]).err().unwrap();
        assert!(error.starts_with(&format!("{} is there but ", key.display())), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
