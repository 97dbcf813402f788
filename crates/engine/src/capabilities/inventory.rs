//! `capabilities/discoverV2`: every plugin in the cache (at its active version) and every
//! standalone skill in the executor's three skill roots, parsed.
//!
//! Each plugin and each root is one location, scanned as `capabilityRoots/discoverV1` scans a
//! root. What goes wrong inside a location is not detailed to the client (paths and reasons
//! stay on the executor): a location with any problem adds one generic warning, as the
//! reference words it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tether_protocol::PathUri;
use tether_protocol::capabilities::{
    CapabilityRootDiscovery, DiscoverV2Response, DiscoveryRoot, ExecutorPlugin, ExecutorSkill,
};

use super::front_matter;
use super::plugin_cache::{self, Installed};
use super::scan::{self, InlineMcp, Rules};
use super::skill_metadata;

/// Plugins and skills one answer lists (a plugin counts once, plus once per skill).
const MAX_CAPABILITIES: usize = 2_048;
/// Warnings one answer carries.
const MAX_WARNINGS: usize = 64;
/// The answer's encoded size. Session start waits on it; a bigger inventory is truncated
/// with a warning saying so.
const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;
/// The longest `<namespace>:<name>` of a plugin skill, in characters.
const MAX_QUALIFIED_NAME_CHARS: usize = 129;

const LOCATION_WARNING: &str =
    "some capability locations could not be resolved; discovery may be incomplete";
const METADATA_WARNING: &str =
    "some capability metadata could not be loaded; discovery may be incomplete";
const SIZE_WARNING: &str = "capability discovery size limit reached";

const RULES: Rules = Rules { inline_mcp: InlineMcp::Manifest, warn_missing_declared: true };

/// Where the executor's capabilities are installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Locations {
    /// `$CODEX_HOME`.
    pub(crate) codex_home: PathBuf,
    /// `$HOME`, when the executor has one.
    pub(crate) home: Option<PathBuf>,
    /// `/etc/codex`.
    pub(crate) system_dir: PathBuf,
}

impl Locations {
    pub(crate) fn of(sources: &crate::codex_config::Sources) -> Self {
        Locations {
            codex_home: sources.codex_home.clone(),
            home: sources.home.clone(),
            system_dir: sources.system_dir.clone(),
        }
    }
}

impl Locations {
    /// The standalone skill roots, in the order their skills are listed, each once.
    fn skill_roots(&self) -> Vec<(&'static str, PathBuf)> {
        let mut roots = vec![("codex-home-skills", self.codex_home.join("skills"))];
        if let Some(home) = &self.home {
            roots.push(("user-agent-skills", home.join(".agents/skills")));
        }
        roots.push(("system-skills", self.system_dir.join("skills")));
        let mut seen = Vec::new();
        roots.retain(|(_, path)| {
            let first = !seen.contains(path);
            seen.push(path.clone());
            first
        });
        roots
    }
}

/// Everything installed at `locations`.
pub(crate) fn inventory(locations: &Locations) -> DiscoverV2Response {
    inventory_noting(locations, &mut Vec::new())
}

/// As [`inventory`], noting in `directories` every directory whose change could change the
/// answer: each one read, and each location's parent (or, for a location that does not exist
/// yet, the nearest directory above it that does).
pub(crate) fn inventory_noting(
    locations: &Locations,
    directories: &mut Vec<PathBuf>,
) -> DiscoverV2Response {
    let mut answer = Answer::default();
    let cache = locations.codex_home.join("plugins/cache");
    note_location(&cache, directories);
    let (installed, truncated) = plugin_cache::installed(&cache, directories);
    let mut location_problem = truncated;
    for plugin in installed {
        location_problem |= plugin.remote_id.is_err();
        let (found, problems) = plugin_of(plugin, directories);
        answer.note(problems);
        if let Some(plugin) = found {
            answer.add_plugin(plugin);
        }
    }
    for (id, root) in locations.skill_roots() {
        note_location(&root, directories);
        let (skills, problems) = standalone_skills(id, &root, directories);
        answer.note(problems);
        for skill in skills {
            answer.add_skill(skill);
        }
    }
    answer.finish(location_problem)
}

/// A location's parent (where it would be created, removed or renamed), or for a location
/// that does not exist yet, the nearest directory above it that does.
fn note_location(location: &Path, directories: &mut Vec<PathBuf>) {
    if let Some(existing) = location.ancestors().skip(1).find(|dir| dir.is_dir()) {
        directories.push(existing.to_path_buf());
    }
}

/// The answer being built, and what it costs.
#[derive(Default)]
struct Answer {
    response: DiscoverV2Response,
    capabilities: usize,
    bytes: usize,
    troubled_locations: usize,
    over_size: bool,
}

impl Answer {
    fn note(&mut self, problems: bool) {
        self.troubled_locations += usize::from(problems);
    }

    fn fits(&mut self, capabilities: usize, item: &impl Serialize) -> bool {
        let bytes = super::encoded_len(item);
        if self.capabilities + capabilities > MAX_CAPABILITIES
            || self.bytes.saturating_add(bytes) > MAX_RESPONSE_BYTES
        {
            self.over_size = true;
            return false;
        }
        self.capabilities += capabilities;
        self.bytes += bytes;
        true
    }

    fn add_plugin(&mut self, plugin: ExecutorPlugin) {
        if self.fits(1 + plugin.skills.len(), &plugin) {
            self.response.plugins.push(plugin);
        }
    }

    fn add_skill(&mut self, skill: ExecutorSkill) {
        if self.fits(1, &skill) {
            self.response.skills.push(skill);
        }
    }

    fn finish(mut self, location_problem: bool) -> DiscoverV2Response {
        let warnings = &mut self.response.warnings;
        if self.over_size {
            warnings.push(SIZE_WARNING.to_owned());
        }
        if location_problem {
            warnings.push(LOCATION_WARNING.to_owned());
        }
        warnings.extend(std::iter::repeat_n(METADATA_WARNING.to_owned(), self.troubled_locations));
        warnings.truncate(MAX_WARNINGS);
        self.response
    }
}

/// The manifest keys discovery reads; anything else in it is the client's business.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    interface: Option<ManifestInterface>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManifestInterface {
    #[serde(default)]
    display_name: Option<String>,
}

/// One installed plugin, and whether anything in it could not be loaded. A plugin without a
/// manifest that parses is not listed.
fn plugin_of(
    installed: Installed,
    directories: &mut Vec<PathBuf>,
) -> (Option<ExecutorPlugin>, bool) {
    let Some(root_uri) = PathUri::from_path(&installed.root) else { return (None, true) };
    let scanned =
        scan::scan_root_noting(installed.id.clone(), root_uri.clone(), RULES, directories);
    let mut problems = scanned.error.is_some() || !scanned.warnings.is_empty();
    let Some(files) = scanned.plugin.clone() else { return (None, true) };
    let Ok(manifest) = serde_json::from_str::<Manifest>(&files.manifest.contents) else {
        return (None, true);
    };
    let dir_name = file_name(&installed.root);
    let namespace = nonempty(manifest.name.clone()).unwrap_or_else(|| dir_name.clone());
    let display_name = manifest
        .interface
        .and_then(|interface| nonempty(interface.display_name))
        .or_else(|| nonempty(manifest.name))
        .unwrap_or(dir_name);
    let namespaces = namespaces(&scanned, &installed.root, &namespace);
    let mut skills = Vec::new();
    for skill in skills_of(&scanned, &mut problems) {
        let name = format!("{}:{}", namespace_of(&skill, &namespaces), skill.name);
        if name.chars().count() > MAX_QUALIFIED_NAME_CHARS {
            problems = true;
            continue;
        }
        skills.push(ExecutorSkill { name, ..skill });
    }
    let plugin = ExecutorPlugin {
        id: installed.id,
        display_name,
        remote_plugin_id: installed.remote_id.ok().flatten(),
        version: installed.version,
        root: root_uri,
        files,
        skills,
    };
    (Some(plugin), problems)
}

/// The namespace of the deepest plugin directory holding `skill` (the plugin's own at least).
fn namespace_of<'a>(skill: &ExecutorSkill, namespaces: &'a [(PathBuf, String)]) -> &'a str {
    let path = skill.path.to_path().unwrap_or_default();
    namespaces
        .iter()
        .filter(|(dir, _)| path.starts_with(dir))
        .max_by_key(|(dir, _)| dir.components().count())
        .map_or("", |(_, name)| name.as_str())
}

/// The namespace each plugin directory under a plugin gives its skills: its manifest's name,
/// else the directory's own name.
fn namespaces(scanned: &CapabilityRootDiscovery, root: &Path, own: &str) -> Vec<(PathBuf, String)> {
    let mut namespaces = vec![(root.to_path_buf(), own.to_owned())];
    for manifest in &scanned.namespace_manifests {
        let Ok(path) = manifest.path.to_path() else { continue };
        let dir = scan::plugin_root_of(&path);
        if dir == root || !dir.starts_with(root) {
            continue;
        }
        let name = serde_json::from_str::<Manifest>(&manifest.contents)
            .ok()
            .and_then(|manifest| nonempty(manifest.name))
            .unwrap_or_else(|| file_name(&dir));
        namespaces.push((dir, name));
    }
    namespaces
}

/// The skills of a standalone root, each with the root it came from. A root that does not
/// exist has none, and no problem.
fn standalone_skills(
    id: &str,
    root: &Path,
    directories: &mut Vec<PathBuf>,
) -> (Vec<ExecutorSkill>, bool) {
    if !root.exists() {
        return (Vec::new(), false);
    }
    let Some(uri) = PathUri::from_path(root) else { return (Vec::new(), true) };
    let scanned = scan::scan_root_noting(id.to_owned(), uri.clone(), RULES, directories);
    let mut problems = scanned.error.is_some() || !scanned.warnings.is_empty();
    let discovery_root = DiscoveryRoot { id: id.to_owned(), path: uri };
    let skills = skills_of(&scanned, &mut problems)
        .into_iter()
        .map(|skill| ExecutorSkill { discovery_root: Some(discovery_root.clone()), ..skill })
        .collect();
    (skills, problems)
}

/// The skills whose `SKILL.md` describes one, parsed; `problems` is set for any that does not.
fn skills_of(scanned: &CapabilityRootDiscovery, problems: &mut bool) -> Vec<ExecutorSkill> {
    let mut skills = Vec::new();
    for files in &scanned.skills {
        let path = files.instructions.path.to_path().unwrap_or_default();
        let dir_name = path.parent().map(file_name).unwrap_or_else(|| "skill".to_owned());
        let Ok(front) = front_matter::parse(&files.instructions.contents, &dir_name) else {
            *problems = true;
            continue;
        };
        let (dependencies, policy) = files
            .metadata
            .as_ref()
            .map_or((None, None), |metadata| skill_metadata::parse(&metadata.contents));
        skills.push(ExecutorSkill {
            name: front.name,
            description: front.description,
            short_description: front.short_description,
            path: files.instructions.path.clone(),
            discovery_root: None,
            dependencies,
            policy,
        });
    }
    skills
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default()
}

fn nonempty(text: Option<String>) -> Option<String> {
    text.filter(|text| !text.trim().is_empty())
}
