//! `environmentConfig/read`: the executor's own Codex configuration, as Codex would stack it
//! here, cut down to the keys the client asked for.
//!
//! Codex runs elsewhere and cannot see this machine's files, yet the executor's configuration
//! says which MCP servers live here. [`layers`] finds and parses the files (and decides which
//! project layers the user trusts); [`projection`] selects the keys. Everything is read fresh on
//! each call, on the blocking pool, bounded per file.
//!
//! The same files, and Codex's settings on `tether serve`'s command line ([`overrides`]: `-c`,
//! `--enable`, `--disable`), are what `--strict-config` checks ([`strict`]) against the names
//! Codex knows ([`known`]).

pub mod known;
mod layers;
pub mod overrides;
mod projection;
pub mod strict;

use std::path::{Path, PathBuf};

use tether_protocol::PathUri;
use tether_protocol::environment_config::{
    ConfigLayer, ConfigLayers, EnvironmentConfigReadParams, EnvironmentConfigReadResponse,
};

pub use layers::Sources;
use projection::Selection;

/// Where the system-wide files live.
pub const SYSTEM_DIR: &str = "/etc/codex";

/// Why a read failed; the kind decides the JSON-RPC code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    pub kind: ConfigErrorKind,
    pub message: String,
    /// What failed, without the prefix the wire's message carries: for a check at startup,
    /// which says it in the reference's startup words (`<path>:<line>:<column>: <what>`).
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigErrorKind {
    /// The request is malformed: `-32602`.
    InvalidParams,
    /// A file could not be read or parsed: `-32603`.
    Load,
}

impl ConfigError {
    fn invalid(message: impl Into<String>) -> Self {
        let message = message.into();
        Self { kind: ConfigErrorKind::InvalidParams, reason: message.clone(), message }
    }

    /// Prefixed as the reference prefixes every loading failure.
    fn load(reason: impl Into<String>) -> Self {
        let reason = reason.into();
        Self {
            kind: ConfigErrorKind::Load,
            message: format!("failed to load executor-local config: {reason}"),
            reason,
        }
    }
}

impl Sources {
    /// This executor's: `/etc/codex`, `$CODEX_HOME` or `~/.codex`, and the user's home.
    pub fn from_env() -> Self {
        let home = crate::environment::home_dir();
        let codex_home = std::env::var_os("CODEX_HOME")
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| home.as_deref().unwrap_or(Path::new("/")).join(".codex"));
        Self { system_dir: PathBuf::from(SYSTEM_DIR), codex_home, home }
    }
}

/// The checks the reference makes after decoding, in its order (the cwd first, then the
/// paths); the cwd as a path.
fn validate(params: &EnvironmentConfigReadParams) -> Result<PathBuf, ConfigError> {
    let cwd = PathUri::parse(&params.cwd).map_err(ConfigError::invalid)?;
    let path = cwd.to_path().map_err(|error| ConfigError::invalid(error.to_string()))?;
    if params.config_paths.is_empty() && params.requirements_paths.is_empty() {
        return Err(ConfigError::invalid("at least one config or requirements path is required"));
    }
    if params.config_paths.iter().chain(&params.requirements_paths).any(Vec::is_empty) {
        return Err(ConfigError::invalid("TOML paths must contain at least one key segment"));
    }
    Ok(path.components().collect())
}

/// Answers one read. Blocking: call it off the async threads.
pub fn read(
    params: &EnvironmentConfigReadParams,
    sources: &Sources,
) -> Result<EnvironmentConfigReadResponse, ConfigError> {
    let cwd = validate(params)?;
    let layers::Stacks {
        config: (config, config_insertion),
        requirements: (requirements, requirements_insertion),
    } = layers::stacks(sources, &cwd)?;
    let uri = |path: &Path| {
        PathUri::from_path(path)
            .ok_or_else(|| ConfigError::load(format!("`{}` is not absolute", path.display())))
    };
    Ok(EnvironmentConfigReadResponse {
        user_home_dir: sources.home.as_deref().and_then(PathUri::from_path),
        codex_home_dir: uri(&sources.codex_home)?,
        hostname: hostname(),
        config: select(config, config_insertion, &params.config_paths, &uri)?,
        requirements: select(
            requirements,
            requirements_insertion,
            &params.requirements_paths,
            &uri,
        )?,
    })
}

/// The layers that keep something once `paths` are selected; the insertion index counts the
/// kept layers before `insertion`.
fn select(
    layers: Vec<layers::Layer>,
    insertion: usize,
    paths: &[Vec<String>],
    uri: &dyn Fn(&Path) -> Result<PathUri, ConfigError>,
) -> Result<ConfigLayers, ConfigError> {
    let selection = Selection::new(paths);
    let mut kept = ConfigLayers::default();
    if selection.is_empty() {
        return Ok(kept);
    }
    for (index, layer) in layers.into_iter().enumerate() {
        let table = selection.project(&layer.table);
        if table.is_empty() {
            continue;
        }
        if index < insertion {
            kept.cloud_insertion_index += 1;
        }
        let toml = toml::to_string(&table).map_err(|error| {
            ConfigError::load(format!("cannot write the {} layer: {error}", layer.source))
        })?;
        kept.layers.push(ConfigLayer {
            source: layer.source,
            base_dir: uri(&layer.base_dir)?,
            toml,
        });
    }
    Ok(kept)
}

/// This machine's host name.
fn hostname() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(
        cwd: &str,
        config: &[&[&str]],
        requirements: &[&[&str]],
    ) -> EnvironmentConfigReadParams {
        let paths = |list: &[&[&str]]| {
            list.iter().map(|p| p.iter().map(|k| k.to_string()).collect()).collect()
        };
        EnvironmentConfigReadParams {
            cwd: cwd.to_owned(),
            config_paths: paths(config),
            requirements_paths: paths(requirements),
        }
    }

    #[test]
    fn the_reference_checks_come_in_its_order() {
        let error = |p| validate(&p).unwrap_err().message;
        assert_eq!(error(params("x", &[], &[])), "invalid URI: relative URL without a base");
        assert_eq!(
            error(params("file:///x", &[], &[])),
            "at least one config or requirements path is required"
        );
        assert_eq!(
            error(params("file:///x", &[&[]], &[])),
            "TOML paths must contain at least one key segment"
        );
        assert_eq!(
            error(params("http://x/", &[&["a"]], &[])),
            "unsupported path URI scheme `http`"
        );
        assert_eq!(
            error(params("file://host/x", &[&["a"]], &[])),
            "'file://host/x' is invalid on 'linux'"
        );
    }

    #[test]
    fn system_layers_come_first_and_set_the_insertion_index() {
        let base = std::env::temp_dir().join(format!("tether-config-{}", std::process::id()));
        let system_dir = base.join("etc");
        let codex_home = base.join("home/.codex");
        std::fs::create_dir_all(&system_dir).unwrap();
        std::fs::create_dir_all(&codex_home).unwrap();
        std::fs::write(system_dir.join("config.toml"), "[mcp_servers.sys]\nurl = \"http://s\"\n")
            .unwrap();
        std::fs::write(
            codex_home.join("config.toml"),
            "[mcp_servers.usr]\nurl = \"http://u\"\nmodel = 1\n",
        )
        .unwrap();
        std::fs::write(
            system_dir.join("requirements.toml"),
            "[mcp_servers.sys]\nidentity = { command = \"x\" }\n",
        )
        .unwrap();
        std::fs::write(system_dir.join("managed_config.toml"), "approval_policy = \"never\"\n")
            .unwrap();
        let sources =
            Sources { system_dir: system_dir.clone(), codex_home: codex_home.clone(), home: None };
        let cwd = format!("file://{}", base.display());

        let read = read(
            &params(&cwd, &[&["mcp_servers"]], &[&["mcp_servers"], &["allowed_approval_policies"]]),
            &sources,
        )
        .unwrap();
        let sources_of = |layers: &ConfigLayers| {
            layers.layers.iter().map(|l| l.source.clone()).collect::<Vec<_>>()
        };
        assert_eq!(
            sources_of(&read.config),
            [
                format!("system ({})", system_dir.join("config.toml").display()),
                format!("user ({})", codex_home.join("config.toml").display()),
            ]
        );
        assert_eq!(read.config.cloud_insertion_index, 1);
        assert_eq!(
            read.config.layers[1].toml,
            "[mcp_servers.usr]\nurl = \"http://u\"\nmodel = 1\n"
        );
        assert_eq!(
            sources_of(&read.requirements),
            [
                system_dir.join("requirements.toml").display().to_string(),
                system_dir.join("managed_config.toml").display().to_string(),
            ]
        );
        assert_eq!(read.requirements.cloud_insertion_index, 1);
        assert_eq!(read.requirements.layers[1].toml, "allowed_approval_policies = [\"never\"]\n");
        assert_eq!(read.user_home_dir, None);

        // The managed file is the last config layer; a system layer that selects nothing is
        // dropped, and the insertion index with it.
        let read = super::read(&params(&cwd, &[&["approval_policy"]], &[]), &sources).unwrap();
        assert_eq!(
            sources_of(&read.config),
            [format!(
                "legacy managed_config.toml ({})",
                system_dir.join("managed_config.toml").display()
            )]
        );
        assert_eq!(read.config.cloud_insertion_index, 0);
        assert_eq!(read.requirements, ConfigLayers::default());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
