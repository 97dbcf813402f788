//! The plugin cache, `$CODEX_HOME/plugins/cache/<marketplace>/<plugin>/<version>/`: which
//! plugins are installed, and which version of each is the active one.

use std::cmp::Ordering;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Marketplaces, and plugins per marketplace, looked at. A cache is a few dozen plugins; the
/// bound keeps a hostile tree from costing more than a bounded listing.
const MAX_LISTED: usize = 2_000;
/// Plugins listed in all: each is scanned on every inventory, so a cache of thousands would cost
/// seconds; real ones hold a few dozen.
const MAX_PLUGINS: usize = 512;
/// The largest remote-install record read; it holds one short id.
const MAX_REMOTE_RECORD_BYTES: u64 = 16 * 1024;
/// The longest remote plugin id, in bytes.
const MAX_REMOTE_ID_BYTES: usize = 1024;
/// The record a remote install leaves beside the plugin's versions.
const REMOTE_RECORD: &str = ".codex-remote-plugin-install.json";
/// The version directory a locally developed plugin uses; it wins over any numbered one.
const LOCAL_VERSION: &str = "local";

/// One installed plugin, at its active version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Installed {
    /// `<plugin>@<marketplace>`.
    pub(crate) id: String,
    pub(crate) version: String,
    /// The active version's directory.
    pub(crate) root: PathBuf,
    /// `None` when the plugin was not installed remotely; `Err` when its record is unusable.
    pub(crate) remote_id: Result<Option<String>, ()>,
}

/// What the cache holds, sorted by id, and whether listing it hit a bound. Every directory
/// listed is noted in `listed`.
pub(crate) fn installed(cache: &Path, listed: &mut Vec<PathBuf>) -> (Vec<Installed>, bool) {
    let mut plugins = Vec::new();
    let mut truncated = false;
    if cache.is_dir() {
        listed.push(cache.to_path_buf());
    }
    for marketplace in directories(cache, &mut truncated) {
        let Some(marketplace_name) = valid_name(&marketplace, false) else { continue };
        listed.push(marketplace.clone());
        for package in directories(&marketplace, &mut truncated) {
            if plugins.len() == MAX_PLUGINS {
                truncated = true;
                break;
            }
            let Some(plugin_name) = valid_name(&package, true) else { continue };
            listed.push(package.clone());
            let Some(version) = active_version(&package) else { continue };
            plugins.push(Installed {
                id: format!("{plugin_name}@{marketplace_name}"),
                root: package.join(&version),
                version,
                remote_id: remote_id(&package),
            });
        }
    }
    plugins.sort_by(|a, b| a.id.cmp(&b.id).then_with(|| a.root.cmp(&b.root)));
    (plugins, truncated)
}

/// The directories in `dir` (links to directories included), sorted by name.
fn directories(dir: &Path, truncated: &mut bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        if found.len() == MAX_LISTED {
            *truncated = true;
            break;
        }
        let path = entry.path();
        if path.is_dir() {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// A marketplace or plugin name: ASCII letters, digits, `_` and `-` (plugins may add `.`).
fn valid_name(path: &Path, dots: bool) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-' || (dots && c == '.');
    (!name.is_empty() && !name.starts_with('.') && name.chars().all(allowed))
        .then(|| name.to_owned())
}

/// The version that is in use: `local` when present, else the greatest, comparing as semver
/// where both names are semver and as text otherwise. Only real directories count: a link in
/// the cache is not an installed version.
fn active_version(package: &Path) -> Option<String> {
    let entries = std::fs::read_dir(package).ok()?;
    let mut versions: Vec<String> = entries
        .flatten()
        .take(MAX_LISTED)
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| valid_version(name))
        .collect();
    if versions.iter().any(|name| name == LOCAL_VERSION) {
        return Some(LOCAL_VERSION.to_owned());
    }
    versions.sort();
    versions.into_iter().max_by(|a, b| compare_versions(a, b))
}

fn valid_version(name: &str) -> bool {
    name != "."
        && name != ".."
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '_' | '-'))
}

fn compare_versions(a: &str, b: &str) -> Ordering {
    match (semver::Version::parse(a), semver::Version::parse(b)) {
        (Ok(a), Ok(b)) => a.cmp(&b),
        _ => a.cmp(b),
    }
}

#[derive(Deserialize)]
struct RemoteRecord {
    schema_version: u32,
    remote_plugin_id: String,
}

/// The id a remote install recorded, if any.
fn remote_id(package: &Path) -> Result<Option<String>, ()> {
    let path = package.join(REMOTE_RECORD);
    let file = match crate::fs::regular_file::open_for_read(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(_) => return Err(()),
    };
    let mut text = Vec::new();
    file.take(MAX_REMOTE_RECORD_BYTES + 1).read_to_end(&mut text).map_err(drop)?;
    if text.len() as u64 > MAX_REMOTE_RECORD_BYTES {
        return Err(());
    }
    let record: RemoteRecord = serde_json::from_slice(&text).map_err(drop)?;
    let id = record.remote_plugin_id.trim();
    if record.schema_version != 1 || id.is_empty() || id.len() > MAX_REMOTE_ID_BYTES {
        return Err(());
    }
    Ok(Some(id.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_active_version_is_local_else_the_greatest() {
        let greatest = |names: &[&str]| {
            let mut names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            names.sort();
            names.into_iter().max_by(|a, b| compare_versions(a, b)).unwrap()
        };
        assert_eq!(greatest(&["1.9.0", "1.10.0", "1.10.0-beta"]), "1.10.0");
        assert_eq!(greatest(&["1.0.0", "abc"]), "abc");
        assert!(!valid_version("1 0") && !valid_version("..") && valid_version("1.0.0+b_1"));
    }
}
