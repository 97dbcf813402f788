//! Codex's configuration files on this executor, as the layers Codex stacks them in.
//!
//! Config, lowest precedence first: the system file, the user's (`$CODEX_HOME/config.toml`),
//! one per directory from the project root down to the cwd (`<dir>/.codex/config.toml`, only
//! where the user or system config trusts the project, and without the keys a repository may
//! not set), then the legacy managed file. Requirements: the system requirements file, then the
//! legacy managed file translated into requirements.

use std::io::Read;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

use super::ConfigError;

/// The largest configuration file read: far past any real config (they are a few KiB, a long
/// `projects` list some hundreds), small enough that a hostile repository cannot make one call
/// hold much memory.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Keys a repository's `.codex/config.toml` may not set (they would send the user's requests,
/// credentials or notifications somewhere the repository chose); removed before selection.
const PROJECT_DENYLIST: [&str; 12] = [
    "openai_base_url",
    "chatgpt_base_url",
    "apps_mcp_product_sku",
    "responses_api_metadata",
    "model_provider",
    "model_providers",
    "notify",
    "profile",
    "profiles",
    "experimental_realtime_webrtc_call_base_url",
    "experimental_realtime_ws_base_url",
    "otel",
];

/// What marks a project root when the config names none.
const DEFAULT_ROOT_MARKERS: [&str; 1] = [".git"];

/// Where the files are, and whose home it is.
#[derive(Debug, Clone)]
pub struct Sources {
    /// `/etc/codex`.
    pub system_dir: PathBuf,
    /// `$CODEX_HOME`.
    pub codex_home: PathBuf,
    /// The executor user's home, reported as `userHomeDir`.
    pub home: Option<PathBuf>,
}

/// Both stacks before selection, each with the index of its first layer after the system
/// one (where a client inserts its cloud layers).
#[derive(Debug)]
pub(super) struct Stacks {
    pub config: (Vec<Layer>, usize),
    pub requirements: (Vec<Layer>, usize),
}

/// Reads every file once: the legacy managed file is a layer of both stacks.
pub(super) fn stacks(sources: &Sources, cwd: &Path) -> Result<Stacks, ConfigError> {
    let managed_file = sources.system_dir.join("managed_config.toml");
    let managed = load(&managed_file, "managed")?;
    let config = config_layers(sources, cwd, &managed_file, managed.as_ref())?;
    let requirements = requirements_layers(sources, &managed_file, managed.as_ref())?;
    Ok(Stacks { config, requirements })
}

/// One layer before selection.
#[derive(Debug)]
pub(super) struct Layer {
    pub source: String,
    pub base_dir: PathBuf,
    /// The file it was read from.
    pub file: PathBuf,
    pub table: Table,
}

/// The config layers for `cwd`, and the index of the first layer after the system one.
fn config_layers(
    sources: &Sources,
    cwd: &Path,
    managed_file: &Path,
    managed: Option<&Table>,
) -> Result<(Vec<Layer>, usize), ConfigError> {
    let mut layers = Vec::new();
    let system_file = sources.system_dir.join("config.toml");
    let system = load(&system_file, "system")?;
    let user_file = sources.codex_home.join("config.toml");
    let user = load(&user_file, "user")?;
    let trust = Trust::of(&[system.as_ref(), user.as_ref()]);
    let markers = root_markers(&[system.as_ref(), user.as_ref()]);
    if let Some(table) = system {
        layers.push(Layer {
            source: format!("system ({})", system_file.display()),
            base_dir: sources.system_dir.clone(),
            file: system_file.clone(),
            table,
        });
    }
    let cloud_insertion = layers.len();
    if let Some(table) = user {
        let base_dir = user_file.parent().map(Path::to_path_buf).unwrap_or_default();
        let source = format!("user ({})", user_file.display());
        layers.push(Layer { source, base_dir, file: user_file.clone(), table });
    }
    // The cwd need not exist: its nearest marked ancestor is still its project.
    let root = project_root(cwd, &markers);
    for dir in dirs_from(&root, cwd) {
        if !(trust.trusts(&dir) || trust.trusts(&root)) {
            continue;
        }
        let base_dir = dir.join(".codex");
        let file = base_dir.join("config.toml");
        if file == user_file {
            continue;
        }
        let Some(mut table) = load(&file, "project")? else { continue };
        for key in PROJECT_DENYLIST {
            table.remove(key);
        }
        layers.push(Layer {
            source: format!("project ({})", file.display()),
            base_dir,
            file,
            table,
        });
    }
    if let Some(table) = managed {
        layers.push(Layer {
            source: format!("legacy managed_config.toml ({})", managed_file.display()),
            base_dir: sources.system_dir.clone(),
            file: managed_file.to_path_buf(),
            table: table.clone(),
        });
    }
    Ok((layers, cloud_insertion))
}

/// The requirements layers, and the index after the system requirements file.
fn requirements_layers(
    sources: &Sources,
    managed_file: &Path,
    managed: Option<&Table>,
) -> Result<(Vec<Layer>, usize), ConfigError> {
    let mut layers = Vec::new();
    let file = sources.system_dir.join("requirements.toml");
    if let Some(table) = load(&file, "requirements")? {
        layers.push(Layer {
            source: file.display().to_string(),
            base_dir: sources.system_dir.clone(),
            file: file.clone(),
            table,
        });
    }
    let cloud_insertion = layers.len();
    if let Some(managed) = managed {
        layers.push(Layer {
            source: managed_file.display().to_string(),
            base_dir: sources.system_dir.clone(),
            file: managed_file.to_path_buf(),
            table: managed_requirements(managed),
        });
    }
    Ok((layers, cloud_insertion))
}

/// What a legacy managed config requires: its approval policy, sandbox mode and approvals
/// reviewer become the only ones allowed (read-only is always allowed as a sandbox mode, and
/// the user may always review what the automatic reviewer would).
fn managed_requirements(managed: &Table) -> Table {
    let mut required = Table::new();
    let text = |key: &str| managed.get(key).and_then(Value::as_str).map(str::to_owned);
    let list = |items: Vec<String>| Value::Array(items.into_iter().map(Value::String).collect());
    if let Some(policy) = text("approval_policy") {
        required.insert("allowed_approval_policies".into(), list(vec![policy]));
    }
    if let Some(mode) = text("sandbox_mode") {
        let mut modes = vec!["read-only".to_owned()];
        if mode != "read-only" {
            modes.push(mode);
        }
        required.insert("allowed_sandbox_modes".into(), list(modes));
    }
    if let Some(reviewer) = text("approvals_reviewer") {
        let mut reviewers = vec![reviewer.clone()];
        if reviewer == "auto_review" {
            reviewers.push("user".to_owned());
        }
        required.insert("allowed_approvals_reviewers".into(), list(reviewers));
    }
    required
}

/// Reads and parses one file; `None` when there is none. `kind` names it in errors.
fn load(path: &Path, kind: &str) -> Result<Option<Table>, ConfigError> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None);
        }
        Err(error) => {
            return Err(ConfigError::load(format!("failed to read {}: {error}", path.display())));
        }
    };
    if !file.metadata().is_ok_and(|meta| meta.is_file()) {
        return Ok(None);
    }
    let mut text = String::new();
    let read = file.take(MAX_FILE_BYTES + 1).read_to_string(&mut text);
    match read {
        Ok(_) if text.len() as u64 > MAX_FILE_BYTES => Err(ConfigError::load(format!(
            "{kind} config file {} is larger than {MAX_FILE_BYTES} bytes",
            path.display()
        ))),
        Ok(_) => {
            toml::from_str(&text).map(Some).map_err(|error| parse_error(path, kind, &text, &error))
        }
        Err(error) => Err(ConfigError::load(format!("failed to read {}: {error}", path.display()))),
    }
}

/// A file that does not parse, in the reference's words: a project file with the parser's
/// whole report (the line, a caret under the place), the others as `<path>:<line>:<column>:
/// <what>`.
fn parse_error(path: &Path, kind: &str, text: &str, error: &toml::de::Error) -> ConfigError {
    if kind == "project" {
        return ConfigError::load(format!(
            "Error parsing {kind} config file {}: {error}",
            path.display()
        ));
    }
    let at = error.span().map_or(0, |span| span.start).min(text.len());
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |last| last.chars().count()) + 1;
    ConfigError::load(format!("{}:{line}:{column}: {}", path.display(), error.message()))
}

/// Which projects the user (or the system) trusts: `[projects."<dir>"] trust_level =
/// "trusted"`, the user's entry winning over the system's.
struct Trust {
    levels: Vec<(PathBuf, String)>,
}

impl Trust {
    fn of(files: &[Option<&Table>]) -> Self {
        let mut levels: Vec<(PathBuf, String)> = Vec::new();
        for table in files.iter().flatten() {
            let Some(projects) = table.get("projects").and_then(Value::as_table) else { continue };
            for (dir, entry) in projects {
                let Some(level) = entry.get("trust_level").and_then(Value::as_str) else {
                    continue;
                };
                let dir: PathBuf = Path::new(dir).components().collect();
                levels.retain(|(known, _)| *known != dir);
                levels.push((dir, level.to_owned()));
            }
        }
        Self { levels }
    }

    fn trusts(&self, dir: &Path) -> bool {
        self.levels.iter().any(|(known, level)| known == dir && level == "trusted")
    }
}

/// The marker names, from the user's config, else the system's, else `.git`.
fn root_markers(files: &[Option<&Table>]) -> Vec<String> {
    files
        .iter()
        .rev()
        .flatten()
        .find_map(|table| table.get("project_root_markers").and_then(Value::as_array))
        .map(|markers| markers.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_else(|| DEFAULT_ROOT_MARKERS.map(str::to_owned).to_vec())
}

/// The nearest directory at or above `cwd` that holds a marker; `cwd` itself when none does.
/// A `.git` file counts whatever it holds (a worktree or submodule); a `.git` directory only
/// with a `HEAD` in it, so an empty one left by a sandbox does not make a project root.
fn project_root(cwd: &Path, markers: &[String]) -> PathBuf {
    let marked = |dir: &Path| {
        markers.iter().any(|marker| {
            let path = dir.join(marker);
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_dir() && marker == ".git" => path.join("HEAD").exists(),
                Ok(_) => true,
                Err(_) => false,
            }
        })
    };
    cwd.ancestors().find(|dir| marked(dir)).unwrap_or(cwd).to_path_buf()
}

/// `root`, then each directory below it down to `cwd`.
fn dirs_from(root: &Path, cwd: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        cwd.ancestors().take_while(|dir| dir.starts_with(root)).map(Path::to_path_buf).collect();
    dirs.reverse();
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_managed_config_requires_what_it_set() {
        let managed: Table = toml::from_str(
            "approval_policy = \"never\"\nsandbox_mode = \"workspace-write\"\napprovals_reviewer = \"auto_review\"\n",
        )
        .unwrap();
        assert_eq!(
            toml::to_string(&managed_requirements(&managed)).unwrap(),
            "allowed_approval_policies = [\"never\"]\n\
             allowed_sandbox_modes = [\"read-only\", \"workspace-write\"]\n\
             allowed_approvals_reviewers = [\"auto_review\", \"user\"]\n"
        );
        let read_only: Table = toml::from_str("sandbox_mode = \"read-only\"\n").unwrap();
        assert_eq!(
            toml::to_string(&managed_requirements(&read_only)).unwrap(),
            "allowed_sandbox_modes = [\"read-only\"]\n"
        );
    }

    #[test]
    fn the_project_root_is_the_nearest_marked_directory() {
        let base = std::env::temp_dir().join(format!("tether-root-{}", std::process::id()));
        let deep = base.join("repo/a/b");
        std::fs::create_dir_all(&deep).unwrap();
        let markers = vec![".git".to_owned()];
        assert_eq!(project_root(&deep, &markers), deep, "no marker: the cwd");
        std::fs::create_dir_all(base.join("repo/.git")).unwrap();
        assert_eq!(project_root(&deep, &markers), deep, "an empty .git dir is no marker");
        std::fs::write(base.join("repo/.git/HEAD"), "ref: x\n").unwrap();
        assert_eq!(project_root(&deep, &markers), base.join("repo"));
        std::fs::write(base.join("repo/a/.git"), "gitdir: y\n").unwrap();
        assert_eq!(project_root(&deep, &markers), base.join("repo/a"), "a .git file counts");
        assert_eq!(
            dirs_from(&base.join("repo"), &deep),
            vec![base.join("repo"), base.join("repo/a"), deep.clone()]
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
