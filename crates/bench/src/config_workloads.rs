//! `environmentConfig/read`, as Codex sends it at every session start: `mcp_servers` from a
//! realistic executor — a user config with a few dozen MCP servers and trusted projects, and a
//! three-level repository with a `.codex/config.toml` at each level.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use tether_client::{ClientOptions, ExecServerClient};
use tether_protocol::environment_config::EnvironmentConfigReadParams;

use crate::report::median;
use crate::servers::Server;

/// Reads per round. One takes well under a millisecond on Tether and a few on the reference;
/// 200 make a median that one slow call does not move.
pub const READ_RUNS: usize = 200;

/// MCP servers in the user's config: more than most people declare.
const USER_SERVERS: usize = 30;

/// The repository the reads run in; [`Repository::remove`] removes it.
pub struct Repository {
    root: PathBuf,
}

impl Repository {
    pub fn prepare() -> anyhow::Result<Self> {
        let root = PathBuf::from(format!("/var/tmp/tether-bench-config-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("repo/.git"))?;
        std::fs::write(root.join("repo/.git/HEAD"), "ref: refs/heads/main\n")?;
        let mut dir = root.join("repo");
        for level in 0..3 {
            std::fs::create_dir_all(dir.join(".codex"))?;
            std::fs::write(
                dir.join(".codex/config.toml"),
                format!(
                    "model = \"level-{level}\"\n[mcp_servers.level{level}]\nurl = \
                     \"http://127.0.0.1:9/level{level}\"\n[mcp_servers.level{level}.tools.t]\n\
                     enabled = false\n"
                ),
            )?;
            dir = dir.join(format!("sub{level}"));
        }
        std::fs::create_dir_all(&dir)?;
        Ok(Self { root })
    }

    /// The deepest directory: Codex's cwd.
    fn cwd(&self) -> PathBuf {
        self.root.join("repo/sub0/sub1/sub2")
    }

    /// The user config a server's `CODEX_HOME` gets: MCP servers, other settings, and the
    /// repository trusted.
    fn user_config(&self) -> String {
        let mut text = String::from("model = \"gpt-5\"\napproval_policy = \"on-request\"\n");
        for n in 0..USER_SERVERS {
            text.push_str(&format!(
                "[mcp_servers.server{n}]\nurl = \"http://127.0.0.1:9/mcp{n}\"\n\
                 bearer_token_env_var = \"TOKEN_{n}\"\n"
            ));
        }
        text.push_str(&format!(
            "[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
            self.root.join("repo").display()
        ));
        text
    }
}

impl Repository {
    /// Removes the repository (the benchmark keeps it for the whole run, so it is not
    /// dropped).
    pub fn remove(&self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The median milliseconds of one `environmentConfig/read`; every answer must hold the user
/// layer and the three project layers.
pub async fn read(server: &Server, repository: &Repository, runs: usize) -> anyhow::Result<f64> {
    write_config(server.codex_home(), &repository.user_config())?;
    let client = ExecServerClient::connect(&server.url, ClientOptions::default()).await?;
    let params = EnvironmentConfigReadParams {
        cwd: format!("file://{}", repository.cwd().display()),
        config_paths: vec![vec!["mcp_servers".into()]],
        requirements_paths: vec![vec!["mcp_servers".into()]],
    };
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let read = client.read_environment_config(&params).await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(read.config.layers.len() == 4, "layers: {:?}", read.config.layers);
    }
    Ok(median(&mut times))
}

fn write_config(codex_home: &Path, text: &str) -> anyhow::Result<()> {
    let path = codex_home.join("config.toml");
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
}
