//! `file:` URIs, the only way paths cross the wire.
//!
//! Paths travel as URIs so that a client on one OS can name paths on an executor running
//! another. A native path string (`/tmp/x`) is refused while decoding, with the URL parser's own
//! message (`invalid URI: relative URL without a base`), exactly as the reference refuses it.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use url::Url;

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PathUri(Url);

/// Why a URI does not name a path on this host. Decoding already guarantees the `file` scheme;
/// this is about the host part (`file://server/share`) and malformed percent-encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{uri}' is invalid on '{os}'")]
pub struct ForeignPathError {
    pub uri: String,
    pub os: &'static str,
}

impl PathUri {
    pub fn parse(text: &str) -> Result<Self, String> {
        let url = Url::parse(text).map_err(|e| format!("invalid URI: {e}"))?;
        if url.scheme() != "file" {
            return Err(format!("unsupported path URI scheme `{}`", url.scheme()));
        }
        Ok(Self(url))
    }

    /// The URI of an absolute native path. Bytes that are not valid UTF-8 are percent-encoded,
    /// so every name survives the trip.
    pub fn from_path(path: &Path) -> Option<Self> {
        Url::from_file_path(path).ok().map(Self)
    }

    /// The native path this URI names on this host. `file://localhost/…` is this host too.
    pub fn to_path(&self) -> Result<PathBuf, ForeignPathError> {
        let local_host = matches!(self.0.host_str(), None | Some("") | Some("localhost"));
        let foreign = || ForeignPathError { uri: self.0.to_string(), os: std::env::consts::OS };
        if !local_host {
            return Err(foreign());
        }
        let mut local = self.0.clone();
        // `to_file_path` refuses any host other than none or `localhost` spelled exactly.
        let _ = local.set_host(None);
        local.to_file_path().map_err(|()| foreign())
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Debug for PathUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PathUri({})", self.0)
    }
}

impl fmt::Display for PathUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

impl Serialize for PathUri {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.as_str())
    }
}

impl<'de> Deserialize<'de> for PathUri {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        PathUri::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_paths_are_refused_with_the_url_parsers_message() {
        assert_eq!(PathUri::parse("/tmp").unwrap_err(), "invalid URI: relative URL without a base");
        assert_eq!(PathUri::parse("tmp").unwrap_err(), "invalid URI: relative URL without a base");
        assert_eq!(PathUri::parse("http://x/y").unwrap_err(), "unsupported path URI scheme `http`");
    }

    #[test]
    fn decodes_percent_escapes_and_localhost() {
        let uri = PathUri::parse("file:///tmp/a%20b.txt").unwrap();
        assert_eq!(uri.to_path().unwrap(), PathBuf::from("/tmp/a b.txt"));
        let uri = PathUri::parse("file://localhost/tmp/x").unwrap();
        assert_eq!(uri.to_path().unwrap(), PathBuf::from("/tmp/x"));
    }

    #[test]
    fn other_hosts_are_foreign() {
        let uri = PathUri::parse("file://otherhost/tmp/x").unwrap();
        assert_eq!(
            uri.to_path().unwrap_err().to_string(),
            format!("'file://otherhost/tmp/x' is invalid on '{}'", std::env::consts::OS)
        );
    }

    #[test]
    fn non_utf8_names_survive() {
        use std::os::unix::ffi::OsStrExt;
        let path = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/\xff\xfe"));
        let uri = PathUri::from_path(path).unwrap();
        assert_eq!(uri.as_str(), "file:///tmp/%FF%FE");
        assert_eq!(uri.to_path().unwrap(), path);
    }
}
