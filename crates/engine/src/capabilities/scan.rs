//! One capability root, scanned: the `SKILL.md` files below it, the plugin manifests that name
//! their namespaces, and the root's own plugin files — the unit of work of
//! `capabilityRoots/discoverV1`, and of every location `capabilities/discoverV2` inventories.
//!
//! Every cost is bounded per root, as the reference bounds it: six directory levels, 2,000
//! directories, 20,000 entries, 1 MiB per file and 16 MiB of text in all. A limit reached is a
//! warning naming it, never a failure; a root that cannot be read at all is the root's `error`.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;
use tether_protocol::PathUri;
use tether_protocol::capabilities::{
    CapabilityRootDiscovery, CapabilityTextFile, DiscoveredSkillFiles, PluginFiles,
};
use tether_protocol::fs::{FsWalkEntryKind, FsWalkOptions};

use crate::fs::{metadata, regular_file, walk};

/// Directory levels below the root whose entries are read (the root's children are level 0).
const MAX_DEPTH: usize = 6;
/// Directories read per root, the root included.
const MAX_DIRECTORIES: usize = 2_000;
/// Entries examined per root.
const MAX_ENTRIES: usize = 20_000;
/// The largest file returned. Skills and manifests are prose and small JSON; a bigger file is
/// not one.
pub(crate) const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// The text one root may return in all, so 128 roots stay a bounded answer.
pub(crate) const MAX_ROOT_BYTES: u64 = 16 * 1024 * 1024;

const SKILL_FILE: &str = "SKILL.md";
const SKILL_METADATA: &str = "agents/openai.yaml";
/// The plugin manifests a directory may hold, in the order they are preferred.
pub(crate) const PLUGIN_MANIFESTS: [&str; 3] =
    [".codex-plugin/plugin.json", ".claude-plugin/plugin.json", ".cursor-plugin/plugin.json"];
const DEFAULT_MCP_CONFIG: &str = ".mcp.json";
const DEFAULT_APPS_CONFIG: &str = ".app.json";

/// How a declared config path (`mcpServers`, `apps`) is told apart from an inline one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InlineMcp {
    /// `capabilityRoots/discoverV1`: inline servers have no file.
    NoFile,
    /// `capabilities/discoverV2`: inline servers are their own JSON text, at the manifest's
    /// path.
    Manifest,
}

/// How `capabilityRoots/discoverV1` reads a root: inline MCP servers have no file of their own.
pub(crate) const ROOT_RULES: Rules =
    Rules { inline_mcp: InlineMcp::NoFile, warn_missing_declared: false };

/// Scans the root `uri` names, reading its plugin files by `rules`.
pub(crate) fn scan_root(id: String, uri: PathUri, rules: Rules) -> CapabilityRootDiscovery {
    scan_root_noting(id, uri, rules, &mut Vec::new())
}

/// As [`scan_root`], noting in `directories` every directory the answer depends on (the root
/// and each directory the walk met), so a cache can watch them.
pub(crate) fn scan_root_noting(
    id: String,
    uri: PathUri,
    rules: Rules,
    directories: &mut Vec<PathBuf>,
) -> CapabilityRootDiscovery {
    let mut discovery = CapabilityRootDiscovery::empty(id, uri.clone());
    let root = match uri.to_path() {
        Ok(root) => root.components().collect::<PathBuf>(),
        Err(error) => {
            discovery.error = Some(format!("failed to inspect capability root {uri}: {error}"));
            return discovery;
        }
    };
    match metadata::followed(&root) {
        Ok(found) if found.is_directory => {}
        Ok(_) => {
            discovery.error = Some(format!("capability root {uri} is not a directory"));
            return discovery;
        }
        Err(error) => {
            discovery.error = Some(format!("failed to inspect capability root {uri}: {error}"));
            return discovery;
        }
    }
    let options = FsWalkOptions {
        max_depth: MAX_DEPTH,
        max_directories: MAX_DIRECTORIES,
        max_entries: MAX_ENTRIES,
        follow_directory_symlinks: true,
        prune_hidden_directories: Some(false),
    };
    let walked = match walk::walk(&root, &options) {
        Ok(walked) => walked,
        Err(error) => {
            discovery.error = Some(format!("failed to scan capability root {uri}: {error}"));
            return discovery;
        }
    };
    let mut scan = Scan { warnings: Vec::new(), budget: 0, linked: Vec::new() };
    scan.warnings.extend(
        walked.errors.into_iter().map(|error| {
            format!("failed to scan capability path {}: {}", error.path, error.message)
        }),
    );
    if walked.truncated {
        scan.warnings.push(format!("capability scan reached its traversal limit (root: {uri})"));
    }

    directories.push(root.clone());
    let mut skill_files = Vec::new();
    let mut manifests = Vec::new();
    for entry in walked.entries {
        let Ok(path) = entry.path.to_path() else { continue };
        if entry.kind == FsWalkEntryKind::Directory {
            directories.push(path);
            continue;
        }
        if path.file_name().is_some_and(|name| name == SKILL_FILE) {
            skill_files.push((entry.path.to_string(), path));
        } else if let Some(priority) = manifest_priority(&path) {
            manifests.push((plugin_root_of(&path), priority, path));
        }
    }
    skill_files.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    manifests.sort_by_cached_key(|(plugin_root, priority, _)| (uri_text(plugin_root), *priority));

    let own_manifest = scan.first_manifest(&root);
    let inherited = match &own_manifest {
        Some(manifest) => Some((root.clone(), manifest.clone())),
        None => root
            .ancestors()
            .skip(1)
            .find_map(|dir| scan.first_manifest(dir).map(|manifest| (dir.to_path_buf(), manifest))),
    };
    let mut namespace_roots = Vec::new();
    if let Some((dir, manifest)) = inherited {
        namespace_roots.push(dir);
        discovery.namespace_manifests.push(manifest);
    }
    for (plugin_root, _, path) in manifests {
        if namespace_roots.contains(&plugin_root) {
            continue;
        }
        namespace_roots.push(plugin_root);
        if let Some(manifest) = scan.read_text(&path) {
            discovery.namespace_manifests.push(manifest);
        }
    }

    if let Some(manifest) = own_manifest {
        discovery.plugin = Some(scan.plugin_files(&root, manifest, rules));
    }
    for (_, path) in skill_files {
        let Some(instructions) = scan.read_text(&path) else { continue };
        let metadata = path.parent().and_then(|dir| scan.read_text(&dir.join(SKILL_METADATA)));
        discovery.skills.push(DiscoveredSkillFiles { instructions, metadata });
    }
    discovery.warnings = scan.warnings;
    directories.extend(scan.linked);
    discovery
}

/// The per-method differences in how a root's plugin files are read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    pub(crate) inline_mcp: InlineMcp,
    /// Warn when a config file the manifest declares does not exist.
    pub(crate) warn_missing_declared: bool,
}

/// One root's reads: what they cost so far and what went wrong.
struct Scan {
    warnings: Vec<String>,
    budget: u64,
    /// The directories of files read through a link: a change there changes the answer too.
    linked: Vec<PathBuf>,
}

impl Scan {
    /// The first plugin manifest `dir` holds that can be read.
    fn first_manifest(&mut self, dir: &Path) -> Option<CapabilityTextFile> {
        PLUGIN_MANIFESTS.iter().find_map(|manifest| self.read_text(&dir.join(manifest)))
    }

    fn plugin_files(
        &mut self,
        root: &Path,
        manifest: CapabilityTextFile,
        rules: Rules,
    ) -> PluginFiles {
        let declared: Declarations = serde_json::from_str(&manifest.contents).unwrap_or_default();
        let mcp_inline = declared.mcp_servers.as_ref().is_some_and(Value::is_object);
        let mcp_config = if mcp_inline {
            match rules.inline_mcp {
                InlineMcp::NoFile => None,
                InlineMcp::Manifest => inline_servers(&manifest.contents)
                    .map(|contents| CapabilityTextFile { path: manifest.path.clone(), contents }),
            }
        } else {
            self.config_file(
                root,
                &manifest.path,
                "mcpServers",
                declared.mcp_servers.as_ref(),
                DEFAULT_MCP_CONFIG,
                rules,
            )
        };
        let apps_config = self.config_file(
            root,
            &manifest.path,
            "apps",
            declared.apps.as_ref(),
            DEFAULT_APPS_CONFIG,
            rules,
        );
        PluginFiles { manifest, mcp_config, apps_config }
    }

    /// The config file a manifest field declares (`./relative` below the root), else the
    /// default one.
    fn config_file(
        &mut self,
        root: &Path,
        manifest: &PathUri,
        field: &str,
        declared: Option<&Value>,
        default: &str,
        rules: Rules,
    ) -> Option<CapabilityTextFile> {
        let Some(Value::String(declared)) = declared else {
            return self.read_text(&root.join(default));
        };
        let Some(relative) = declared.strip_prefix("./") else {
            self.warnings
                .push(format!("ignoring {field} in {manifest}: path must start with `./`"));
            return None;
        };
        if relative.is_empty() || relative.split(['/', '\\']).any(|part| part == "..") {
            self.warnings.push(format!(
                "ignoring {field} in {manifest}: path must remain below the capability root"
            ));
            return None;
        }
        let path = root.join(relative);
        let found = self.read_text(&path);
        if found.is_none() && rules.warn_missing_declared && !path.exists() {
            self.warnings.push(format!("{field} in {manifest} names a file that does not exist"));
        }
        found
    }

    /// A regular file's text, or nothing: absent and non-files silently, everything else with
    /// a warning that names the file and the reason.
    fn read_text(&mut self, path: &Path) -> Option<CapabilityTextFile> {
        let uri = PathUri::from_path(path)?;
        let size = match metadata::followed(path) {
            Ok(found) if found.is_file => {
                if found.is_symlink
                    && let Some(dir) = std::fs::canonicalize(path)
                        .ok()
                        .and_then(|target| target.parent().map(Path::to_path_buf))
                {
                    self.linked.push(dir);
                }
                found.size
            }
            Ok(_) => return None,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return None,
            Err(error) => {
                self.warnings.push(format!("failed to inspect capability file {uri}: {error}"));
                return None;
            }
        };
        if size > MAX_FILE_BYTES {
            self.warnings
                .push(format!("capability file {uri} exceeds the {MAX_FILE_BYTES}-byte limit"));
            return None;
        }
        if self.budget + size > MAX_ROOT_BYTES {
            self.warnings
                .push(format!("capability root bundle exceeds the {MAX_ROOT_BYTES}-byte limit"));
            return None;
        }
        let mut bytes = Vec::with_capacity(size as usize);
        let read = regular_file::open_for_read(path)
            .and_then(|file| file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes));
        if let Err(error) = read {
            self.warnings.push(format!("failed to read capability file {uri}: {error}"));
            return None;
        }
        let read = bytes.len() as u64;
        if read > MAX_FILE_BYTES || self.budget + read > MAX_ROOT_BYTES {
            self.warnings.push(format!("capability file {uri} exceeded its read limit"));
            return None;
        }
        match String::from_utf8(bytes) {
            Ok(contents) => {
                self.budget += read;
                Some(CapabilityTextFile { path: uri, contents })
            }
            Err(error) => {
                self.warnings.push(format!("capability file {uri} is not UTF-8: {error}"));
                None
            }
        }
    }
}

/// The two manifest fields that name other files.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Declarations {
    #[serde(default)]
    mcp_servers: Option<Value>,
    #[serde(default)]
    apps: Option<Value>,
}

/// A manifest's inline `mcpServers` object as compact JSON, its keys in the order written.
fn inline_servers(manifest: &str) -> Option<String> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Inline<'a> {
        #[serde(borrow)]
        mcp_servers: &'a serde_json::value::RawValue,
    }
    let inline: Inline<'_> = serde_json::from_str(manifest).ok()?;
    Some(compact(inline.mcp_servers.get()))
}

/// `json` without the whitespace between its tokens.
fn compact(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if !c.is_ascii_whitespace() {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}

/// Where `path` ranks among [`PLUGIN_MANIFESTS`], if it is one.
pub(crate) fn manifest_priority(path: &Path) -> Option<usize> {
    if path.file_name()? != "plugin.json" {
        return None;
    }
    let dir = path.parent()?.file_name()?;
    PLUGIN_MANIFESTS
        .iter()
        .position(|manifest| manifest.strip_suffix("/plugin.json") == dir.to_str())
}

/// The plugin directory a manifest belongs to: the parent of its `.<vendor>-plugin` directory.
pub(crate) fn plugin_root_of(manifest: &Path) -> PathBuf {
    manifest.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default()
}

fn uri_text(path: &Path) -> String {
    PathUri::from_path(path).map(|uri| uri.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_servers_keep_their_order_and_their_strings() {
        let manifest = r#"{"name":"p", "mcpServers": { "zeta" : {"url":"http://z"},
            "alpha": {"s": "a \" b  c", "n": [1, 2.50]}}}"#;
        assert_eq!(
            inline_servers(manifest).unwrap(),
            r#"{"zeta":{"url":"http://z"},"alpha":{"s":"a \" b  c","n":[1,2.50]}}"#
        );
    }
}
