//! Codex's configuration on `codex exec-server`'s command line: `-c key=value`,
//! `--enable`/`--disable FEATURE` and `--strict-config`.
//!
//! No setting of Codex's configuration changes what Tether does: the reference reads it for
//! its own telemetry and HTTP client, and `environmentConfig/read` answers from the files, not
//! from the command line, on both. So each setting is read as Codex reads it (a malformed
//! `-c` is refused), then named in a warning that says Tether ignores it. `--strict-config`
//! refuses the names Codex does not know, in the settings and in this executor's
//! configuration files, in the reference's words
//! ([`tether_engine::codex_config::strict`]).

use std::path::Path;

use clap::Args;
use tether_engine::codex_config::overrides::{Override, OverrideError};
use tether_engine::codex_config::strict::{self, StrictError};
use tether_engine::codex_config::{Sources, known};

#[derive(Args)]
#[command(next_help_heading = "Codex's configuration (read as Codex reads it; no setting changes \
                               what Tether does)")]
pub struct CodexSettingsArgs {
    /// A setting of Codex's configuration: a dotted key, then a TOML value (a value that is
    /// not TOML is a string), as `codex -c` reads it. Accepted with a warning: it changes
    /// nothing here.
    #[arg(short = 'c', long = "config", value_name = "key=value")]
    config: Vec<String>,

    /// `-c features.<FEATURE>=true` (repeatable).
    #[arg(long, value_name = "FEATURE")]
    enable: Vec<String>,

    /// `-c features.<FEATURE>=false` (repeatable).
    #[arg(long, value_name = "FEATURE")]
    disable: Vec<String>,

    /// Refuse a setting, feature or configuration-file key (system, user, trusted project)
    /// that Codex 0.171 does not know, as `codex exec-server --strict-config` does.
    #[arg(long)]
    strict_config: bool,
}

/// Why Codex's settings are refused as given: the reference's words, then what to do.
#[derive(Debug, thiserror::Error)]
pub enum CodexFlagError {
    #[error("{0}; write -c key=value: a dotted key, then a TOML value")]
    Malformed(#[source] OverrideError),
    #[error(
        "Unknown feature flag: {0}; name a feature of Codex 0.171 (`codex features list`), or \
         start without --strict-config"
    )]
    UnknownFeature(String),
    /// With `--strict-config`, a setting Codex does not know.
    #[error("{0}; {UNKNOWN_HINT}")]
    Unknown(#[source] StrictError),
}

/// What to do about a name Codex does not know, refused by `--strict-config`.
const UNKNOWN_HINT: &str =
    "remove it, or start without --strict-config to accept what Codex 0.171 does not know";

/// The settings as Codex reads them, each with the words it was given in (for the warning
/// that it changes nothing); [`Self::apply`] checks the configuration files and warns.
pub struct CodexSettings {
    settings: Vec<(String, Override)>,
    strict: bool,
}

impl CodexSettingsArgs {
    /// Reads the settings as Codex reads them and, with `--strict-config`, refuses a name
    /// Codex does not know. Reads no file: that is [`CodexSettings::apply`]'s.
    pub fn settings(&self) -> Result<CodexSettings, CodexFlagError> {
        let mut settings: Vec<(String, Override)> = Vec::new();
        for text in &self.config {
            let setting = Override::parse(text).map_err(CodexFlagError::Malformed)?;
            settings.push((format!("-c {text}"), setting));
        }
        let features = self.enable.iter().map(|name| ("--enable", name, true));
        let features = features.chain(self.disable.iter().map(|name| ("--disable", name, false)));
        for (flag, name, on) in features {
            if self.strict_config && !known::is_feature(name) {
                return Err(CodexFlagError::UnknownFeature(name.clone()));
            }
            settings.push((format!("{flag} {name}"), Override::feature(name, on)));
        }
        if self.strict_config {
            let overrides: Vec<Override> = settings.iter().map(|(_, s)| s.clone()).collect();
            strict::check_overrides(&overrides).map_err(CodexFlagError::Unknown)?;
        }
        Ok(CodexSettings { settings, strict: self.strict_config })
    }
}

impl CodexSettings {
    /// With `--strict-config`, checks the configuration files Codex would read here from
    /// `cwd`; then warns, once per setting, that it changes nothing.
    pub fn apply(&self, cwd: &Path) -> anyhow::Result<()> {
        if self.strict {
            strict::check_files(&Sources::from_env(), cwd).map_err(|error| {
                let hint = match error {
                    StrictError::Load(_) => {
                        "fix the file, or start without --strict-config (which reads no \
                         configuration file)"
                    }
                    StrictError::UnknownOverride(_) | StrictError::UnknownInFile { .. } => {
                        UNKNOWN_HINT
                    }
                };
                anyhow::anyhow!("{error}; {hint}")
            })?;
        }
        for (given, setting) in &self.settings {
            let unknown = strict::unknown_part(&setting.key)
                .map(|part| format!(" (`{part}` is not a setting of Codex 0.171)"))
                .unwrap_or_default();
            tracing::warn!(
                "{given}: Codex's setting `{}`{unknown} does not change what Tether does; ignored",
                setting.key
            );
        }
        Ok(())
    }
}
