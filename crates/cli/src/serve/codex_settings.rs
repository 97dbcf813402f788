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
use tether_engine::codex_config::overrides::Override;
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

impl CodexSettingsArgs {
    /// Reads the settings and, with `--strict-config`, checks them and the configuration
    /// files Codex would read here from `cwd`; then warns, once per setting, that it changes
    /// nothing.
    pub fn apply(&self, cwd: &Path) -> anyhow::Result<()> {
        // Each setting with the words it was given in, for the warning.
        let mut settings: Vec<(String, Override)> = Vec::new();
        for text in &self.config {
            let setting = Override::parse(text).map_err(|error| {
                anyhow::anyhow!("{error}; write -c key=value: a dotted key, then a TOML value")
            })?;
            settings.push((format!("-c {text}"), setting));
        }
        let features = self.enable.iter().map(|name| ("--enable", name, true));
        let features = features.chain(self.disable.iter().map(|name| ("--disable", name, false)));
        for (flag, name, on) in features {
            if self.strict_config && !known::is_feature(name) {
                anyhow::bail!(
                    "Unknown feature flag: {name}; name a feature of Codex 0.171 (`codex \
                     features list`), or start without --strict-config"
                );
            }
            settings.push((format!("{flag} {name}"), Override::feature(name, on)));
        }
        if self.strict_config {
            let overrides: Vec<Override> = settings.iter().map(|(_, s)| s.clone()).collect();
            strict::check_overrides(&overrides)
                .and_then(|()| strict::check_files(&Sources::from_env(), cwd))
                .map_err(|error| {
                    let hint = match error {
                        StrictError::Load(_) => {
                            "fix the file, or start without --strict-config (which reads no \
                             configuration file)"
                        }
                        StrictError::UnknownOverride(_) | StrictError::UnknownInFile { .. } => {
                            "remove it, or start without --strict-config to accept what Codex \
                             0.171 does not know"
                        }
                    };
                    anyhow::anyhow!("{error}; {hint}")
                })?;
        }
        for (given, setting) in &settings {
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
