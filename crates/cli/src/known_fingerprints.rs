//! The certificates a person has accepted, as ssh's `known_hosts` holds host keys: a file
//! beside the config file (`$XDG_CONFIG_HOME/tether/known_fingerprints`, else
//! `~/.config/tether/known_fingerprints`), one executor a line, its key then its certificate's
//! fingerprint:
//!
//! ```text
//! build SHA256:3f1c…
//! 127.0.0.1:8443 SHA256:9a0b…
//! ```
//!
//! An executor is known by its name in the config file, one given as a URL by the URL's
//! `HOST:PORT`. Blank lines and lines starting with `#` are skipped; a line is removed by hand
//! (with an editor) when its server's certificate changed on purpose.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use tether_client::TlsFingerprint;

/// The file's name, beside the config file.
const FILE_NAME: &str = "known_fingerprints";

/// The most of the file read: a line is under 200 bytes, so this is thousands of executors,
/// more than a person accepts by hand; a file larger is no list of theirs, and reading it
/// whole (it is read for every connection) would cost without end.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// A fingerprint remembered for an executor, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remembered {
    pub fingerprint: TlsFingerprint,
    /// Its line in the file, from 1: what to remove when the certificate changed on purpose.
    pub line: usize,
}

/// The file's path (whether or not it exists), or `None` without a home to put it in.
pub fn path() -> Option<PathBuf> {
    Some(crate::executors::config_path()?.with_file_name(FILE_NAME))
}

/// What `file` remembers for `key`: its first line for `key`. A missing file remembers
/// nothing; a line for `key` whose fingerprint cannot be read is an error naming it, since
/// taking it for nothing remembered would ask about a certificate the person already pinned.
pub fn lookup(file: &Path, key: &str) -> anyhow::Result<Option<Remembered>> {
    let opened = match std::fs::File::open(file) {
        Ok(opened) => opened,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(
                anyhow::Error::new(error).context(format!("cannot read {}", file.display()))
            );
        }
    };
    let mut text = String::new();
    std::io::Read::take(opened, MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read {}", file.display()))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        bail!(
            "{} is larger than {} KiB, more than a list of accepted certificates; remove the lines of executors you no longer use",
            file.display(),
            MAX_FILE_BYTES / 1024
        );
    }
    for (index, line) in text.lines().enumerate() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next().filter(|word| !word.starts_with('#')) else { continue };
        if first != key {
            continue;
        }
        let line = index + 1;
        let fingerprint = words.next().unwrap_or_default().parse().map_err(|error| {
            anyhow::anyhow!(
                "{}:{line}: {error}; correct that line, or remove it to be asked about {key}'s certificate again",
                file.display()
            )
        })?;
        return Ok(Some(Remembered { fingerprint, line }));
    }
    Ok(None)
}

/// Adds `key`'s `fingerprint` to the end of `file`, making the file (`0600`) and its directory
/// (`0700`) if missing. One `write` of one line to a file opened for appending, so two
/// commands remembering at once do not interleave their lines.
pub fn remember(file: &Path, key: &str, fingerprint: TlsFingerprint) -> anyhow::Result<()> {
    if key.is_empty() || key.starts_with('#') || key.contains(char::is_whitespace) {
        bail!(
            "cannot remember a fingerprint for {key:?} in {}: a key there is one word; pin it with --tls-fingerprint instead",
            file.display()
        );
    }
    let failed = || format!("cannot remember {key}'s fingerprint in {}", file.display());
    if let Some(dir) = file.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).with_context(failed)?;
    }
    let mut opened = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(file)
        .with_context(failed)?;
    // A last line a person left without its newline is ended first, so ours stands alone
    // (only the last byte is read, however large the file).
    let unended = last_byte(file).with_context(failed)?.is_some_and(|last| last != b'\n');
    let line = format!("{}{key} {fingerprint}\n", if unended { "\n" } else { "" });
    opened.write_all(line.as_bytes()).with_context(failed)
}

/// The file's last byte; `None` when it is empty.
fn last_byte(file: &Path) -> std::io::Result<Option<u8>> {
    use std::io::{Seek as _, SeekFrom};
    let mut opened = std::fs::File::open(file)?;
    if opened.seek(SeekFrom::End(0))? == 0 {
        return Ok(None);
    }
    opened.seek(SeekFrom::End(-1))?;
    let mut byte = [0u8];
    std::io::Read::read_exact(&mut opened, &mut byte)?;
    Ok(Some(byte[0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tether-known-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn remembered_lines_are_found_by_their_key() {
        let dir = scratch("found");
        let file = dir.join("tether").join(FILE_NAME);
        let (one, two) = (TlsFingerprint([1; 32]), TlsFingerprint([2; 32]));
        assert_eq!(lookup(&file, "build").unwrap(), None);
        remember(&file, "build", one).unwrap();
        std::fs::OpenOptions::new().append(true).open(&file).unwrap().write_all(b"# note").unwrap();
        remember(&file, "127.0.0.1:8443", two).unwrap();
        assert_eq!(lookup(&file, "build").unwrap(), Some(Remembered { fingerprint: one, line: 1 }));
        let address = lookup(&file, "127.0.0.1:8443").unwrap();
        assert_eq!(address, Some(Remembered { fingerprint: two, line: 3 }));
        assert_eq!(lookup(&file, "127.0.0.1").unwrap(), None);
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(remember(&file, "two words", one).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_spoilt_line_for_the_key_is_said_with_its_place() {
        let dir = scratch("spoilt");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(FILE_NAME);
        std::fs::write(&file, "other nonsense\nbuild SHA256:abc\n").unwrap();
        assert_eq!(lookup(&file, "nobody").unwrap(), None);
        let error = lookup(&file, "build").unwrap_err().to_string();
        assert!(error.starts_with(&format!("{}:2: ", file.display())), "{error}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A file past the bound is refused in one line saying what to do, not read whole.
    #[test]
    fn a_file_too_large_to_be_a_list_is_refused() {
        let dir = scratch("large");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(FILE_NAME);
        let line = format!("other {}\n", TlsFingerprint([3; 32]));
        let lines = (MAX_FILE_BYTES as usize / line.len()) + 1;
        std::fs::write(&file, line.repeat(lines)).unwrap();
        let error = lookup(&file, "build").unwrap_err().to_string();
        assert!(error.ends_with("remove the lines of executors you no longer use"), "{error}");
        assert!(!error.contains('\n'), "{error}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
