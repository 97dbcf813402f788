//! Named executors, as `~/.ssh/config` names hosts and kubeconfig names contexts: a config file
//! (`$XDG_CONFIG_HOME/tether/config.toml`, else `~/.config/tether/config.toml`) with
//!
//! ```toml
//! [executors.build]
//! url = "wss://build-box:8443"
//! token_file = "~/.config/tether/build.token"
//! tls_fingerprint = "SHA256:…"      # or tls_ca_file = "…"
//! ```
//!
//! so that `--url build` (or `TETHER_URL=build`) means all of that. A flag given on the command
//! line wins over the file's value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde::Deserialize;
use tether_client::{ClientOptions, TlsFingerprint};

/// Where an executor is and how to trust and reach it.
#[derive(Debug, Clone, Default)]
pub struct Executor {
    /// Its name in the config file; `None` for one given as a URL.
    pub name: Option<String>,
    pub url: String,
    pub token_file: Option<PathBuf>,
    pub tls_ca_file: Option<PathBuf>,
    pub tls_fingerprint: Option<TlsFingerprint>,
    /// Remember a certificate nothing vouches for without asking, on its first use
    /// (`--accept-new-fingerprint`; see [`crate::trust`]).
    pub accept_new_fingerprint: bool,
}

/// The credential and trust flags that override a named executor's (`tether cp`, `tether
/// sessions`, `tether kill`).
#[derive(clap::Args)]
pub struct TrustFlags {
    /// Read the exec-server's bearer token from this file (default: TETHER_TOKEN).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// For `wss://`: trust only this CA certificate (PEM), or the server's own.
    #[arg(long, value_name = "PEM", env = "TETHER_TLS_CA_FILE")]
    pub tls_ca_file: Option<PathBuf>,

    /// For `wss://`: trust exactly the certificate with this fingerprint.
    #[arg(long, value_name = "SHA256:HEX", env = "TETHER_TLS_FINGERPRINT")]
    pub tls_fingerprint: Option<TlsFingerprint>,

    /// For `wss://`: a certificate not yet known for this executor is remembered and trusted
    /// without asking (ssh's accept-new); a changed one is still refused.
    #[arg(long)]
    pub accept_new_fingerprint: bool,
}

impl TrustFlags {
    /// `executor` with these flags winning over its config entry.
    pub fn over(&self, executor: Executor) -> Executor {
        executor.with_flags(
            self.token_file.clone(),
            self.tls_ca_file.clone(),
            self.tls_fingerprint,
            self.accept_new_fingerprint,
        )
    }
}

impl Executor {
    /// The same executor, with what the command line gives winning over the config file.
    pub fn with_flags(
        self,
        token_file: Option<PathBuf>,
        tls_ca_file: Option<PathBuf>,
        tls_fingerprint: Option<TlsFingerprint>,
        accept_new_fingerprint: bool,
    ) -> Self {
        Self {
            name: self.name,
            url: self.url,
            token_file: token_file.or(self.token_file),
            tls_ca_file: tls_ca_file.or(self.tls_ca_file),
            tls_fingerprint: tls_fingerprint.or(self.tls_fingerprint),
            accept_new_fingerprint,
        }
    }

    /// Client options that reach and trust it (the token read now: from its file, else from
    /// `TETHER_TOKEN`), the rest left at their defaults. A token file is read again before
    /// every reconnection, so a token renewed while a command runs is the one a recovery sends.
    pub fn client_options(&self, client_name: &str) -> anyhow::Result<ClientOptions> {
        let token_source = self.token_file.clone().map(|file| {
            let source: tether_client::TokenSource = std::sync::Arc::new(move || {
                crate::credentials::exec_server_token(Some(&file)).map_err(|e| e.to_string())
            });
            source
        });
        Ok(ClientOptions {
            client_name: client_name.into(),
            bearer_token: crate::credentials::exec_server_token(self.token_file.as_deref())?,
            token_source,
            tls_ca_file: self.tls_ca_file.clone(),
            tls_fingerprint: self.tls_fingerprint,
            ..ClientOptions::default()
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    executors: BTreeMap<String, ExecutorEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecutorEntry {
    url: String,
    token_file: Option<String>,
    tls_ca_file: Option<String>,
    tls_fingerprint: Option<String>,
}

/// The config file's path (whether or not it exists), or `None` without a home to put it in.
pub fn config_path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir,
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".config"),
    };
    Some(base.join("tether/config.toml"))
}

/// What `--url` names: a URL as it is (anything with `://`), else the executor of that name
/// in the config file.
pub fn resolve(url_or_name: &str) -> anyhow::Result<Executor> {
    if url_or_name.contains("://") {
        return Ok(Executor { url: url_or_name.to_owned(), ..Executor::default() });
    }
    let name = url_or_name;
    let path = config_path().with_context(|| {
        format!("--url {name}: no HOME to find the config file in; give a ws:// or wss:// URL")
    })?;
    let executors = read(&path).map_err(|error| match error {
        ReadError::Missing if looks_like_an_address(name) => anyhow::anyhow!(
            "--url {name} is not a URL (and {} does not exist to name it); give ws://{name}, or wss://{name} for a TLS server",
            path.display()
        ),
        ReadError::Missing => anyhow::anyhow!(
            "--url {name} is neither a URL nor a named executor: {} does not exist; give a ws:// or wss:// URL, or add [executors.{name}] with a url there",
            path.display()
        ),
        ReadError::Other(error) => error,
    })?;
    match executors.get(name) {
        Some(Ok(executor)) => Ok(Executor { name: Some(name.to_owned()), ..executor.clone() }),
        Some(Err(why)) => bail!("{why}; fix it there, or give a ws:// or wss:// URL"),
        None => {
            let known: Vec<&str> = executors.keys().map(String::as_str).collect();
            let known = match known.is_empty() {
                true => "it names none".to_owned(),
                false => format!("it names {}", known.join(", ")),
            };
            if looks_like_an_address(name) {
                bail!(
                    "--url {name} is not a URL nor an executor in {} ({known}); give ws://{name}, or wss://{name} for a TLS server",
                    path.display()
                )
            }
            bail!(
                "--url {name} is neither a URL nor an executor in {} ({known}); give a ws:// or wss:// URL, or add [executors.{name}] there",
                path.display()
            )
        }
    }
}

/// `HOST:PORT` (`127.0.0.1:4500`, `[::1]:4500`): an address given without its scheme, which
/// no executor is named like.
fn looks_like_an_address(name: &str) -> bool {
    name.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
    })
}

/// `tether executors`: the named executors, one per line (`NAME<TAB>URL`), or as a JSON array
/// of `{"name", "url"}` with `json`.
pub fn list(json: bool) -> anyhow::Result<()> {
    let path = config_path().context("no HOME to find the config file in")?;
    match read(&path) {
        Ok(executors) => {
            let mut usable = Vec::new();
            for (name, executor) in executors {
                match executor {
                    Ok(executor) => usable.push((name, executor.url)),
                    // Said, and left out: the others are usable all the same.
                    Err(why) => eprintln!("tether: {why}; {name} cannot be used until it is fixed"),
                }
            }
            if json {
                let listed: Vec<serde_json::Value> = usable
                    .iter()
                    .map(|(name, url)| serde_json::json!({"name": name, "url": url}))
                    .collect();
                crate::stdout::line(serde_json::Value::Array(listed))?;
                return Ok(());
            }
            for (name, url) in usable {
                crate::stdout::line(format_args!("{name}\t{url}"))?;
            }
            Ok(())
        }
        Err(ReadError::Missing) => {
            if json {
                crate::stdout::line("[]")?;
            }
            eprintln!(
                "tether: no named executors: {} does not exist; add [executors.NAME] with a url = \"ws://…\" there",
                path.display()
            );
            Ok(())
        }
        Err(ReadError::Other(error)) => Err(error),
    }
}

enum ReadError {
    Missing,
    Other(anyhow::Error),
}

/// The executors a config file names, each usable or with what is wrong with it (a line naming
/// the file and entry): one mistaken entry leaves the others usable.
type Executors = BTreeMap<String, Result<Executor, String>>;

fn read(path: &Path) -> Result<Executors, ReadError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(ReadError::Missing);
        }
        Err(error) => {
            return Err(ReadError::Other(
                anyhow::Error::new(error).context(format!("cannot read {}", path.display())),
            ));
        }
    };
    parse(&text, path).map_err(ReadError::Other)
}

/// The executors `text` (the file at `path`) names; relative paths in it are relative to the
/// file's directory, and `~/` is the home directory.
fn parse(text: &str, path: &Path) -> anyhow::Result<Executors> {
    let file: ConfigFile = toml::from_str(text).map_err(|error| {
        let message = error.message().to_owned();
        let line = error.span().map(|span| text[..span.start].matches('\n').count() + 1);
        match line {
            Some(line) => anyhow::anyhow!("{}:{line}: {message}", path.display()),
            None => anyhow::anyhow!("{}: {message}", path.display()),
        }
    })?;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let mut executors = BTreeMap::new();
    for (name, entry) in file.executors {
        let tls_fingerprint = match &entry.tls_fingerprint {
            Some(text) => match text.parse::<TlsFingerprint>() {
                Ok(fingerprint) => Some(fingerprint),
                Err(error) => {
                    let why =
                        format!("{}: [executors.{name}] tls_fingerprint: {error}", path.display());
                    executors.insert(name, Err(why));
                    continue;
                }
            },
            None => None,
        };
        let executor = Executor {
            url: entry.url,
            token_file: entry.token_file.map(|file| expand(&file, dir)),
            tls_ca_file: entry.tls_ca_file.map(|file| expand(&file, dir)),
            tls_fingerprint,
            ..Executor::default()
        };
        executors.insert(name, Ok(executor));
    }
    Ok(executors)
}

fn expand(file: &str, dir: &Path) -> PathBuf {
    match (file.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => dir.join(file),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_resolve_their_paths_and_fingerprints() {
        let text = format!(
            "[executors.build]\nurl = \"wss://build:8443\"\ntoken_file = \"build.token\"\ntls_fingerprint = \"SHA256:{}\"\n\n[executors.local]\nurl = \"ws://127.0.0.1:4500\"\ntls_ca_file = \"/etc/ca.pem\"\n",
            "ab".repeat(32)
        );
        let executors = parse(&text, Path::new("/home/u/.config/tether/config.toml")).unwrap();
        let build = executors["build"].as_ref().unwrap();
        assert_eq!(build.url, "wss://build:8443");
        assert_eq!(
            build.token_file.as_deref(),
            Some(Path::new("/home/u/.config/tether/build.token"))
        );
        assert_eq!(build.tls_fingerprint, Some(TlsFingerprint([0xab; 32])));
        let local = executors["local"].as_ref().unwrap();
        assert_eq!(local.tls_ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
    }

    #[test]
    fn mistakes_name_the_file_and_line() {
        let path = Path::new("/c/config.toml");
        let error = parse("[executors.a]\nurl = \"ws://x:1\"\ntoken = \"t\"\n", path).unwrap_err();
        assert!(
            error.to_string().starts_with("/c/config.toml:3: unknown field `token`"),
            "{error}"
        );
        // A mistaken value spoils its own entry only.
        let text = "[executors.a]\nurl = \"ws://x:1\"\ntls_fingerprint = \"SHA256:…\"\n\n\
                    [executors.b]\nurl = \"ws://127.0.0.1:4500\"\n";
        let executors = parse(text, path).unwrap();
        let why = executors["a"].as_ref().unwrap_err();
        assert!(why.starts_with("/c/config.toml: [executors.a] tls_fingerprint: "), "{why}");
        assert_eq!(executors["b"].as_ref().unwrap().url, "ws://127.0.0.1:4500");
    }
}
