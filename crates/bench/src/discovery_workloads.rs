//! `capabilities/discoverV2` and `capabilityRoots/discoverV1` on a realistic executor: 50
//! standalone skills (half with an `agents/openai.yaml`) and 5 cached plugins of 3 skills each,
//! as Codex asks for them at session start.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tether_client::{ClientOptions, ExecServerClient};
use tether_protocol::PathUri;
use tether_protocol::capabilities::{CapabilityRootRequest, DiscoverRootsParams, DiscoverV2Params};

use crate::report::median;
use crate::servers::Server;

/// Calls per round: one takes a few milliseconds, so 100 make a steady median.
pub const DISCOVERY_RUNS: usize = 100;
const SKILLS: usize = 50;
const PLUGINS: usize = 5;
const SKILLS_PER_PLUGIN: usize = 3;
/// How long a server that caches its inventory may take to notice the installed tree.
const SETTLE: Duration = Duration::from_secs(10);

/// Installs the skills and plugins into `codex_home`.
fn install(codex_home: &Path) -> anyhow::Result<()> {
    let write = |path: PathBuf, text: String| -> anyhow::Result<()> {
        std::fs::create_dir_all(path.parent().expect("a parent"))?;
        Ok(std::fs::write(path, text)?)
    };
    for n in 0..SKILLS {
        let dir = codex_home.join(format!("skills/skill-{n:02}"));
        write(
            dir.join("SKILL.md"),
            format!(
                "---\nname: skill-{n:02}\ndescription: Does task {n} well: carefully\nmetadata:\n  \
                 short-description: task {n}\n---\n# Skill {n}\n\n{}\n",
                "Instructions for the model. ".repeat(40)
            ),
        )?;
        if n % 2 == 0 {
            write(
                dir.join("agents/openai.yaml"),
                format!(
                    "interface:\n  display_name: Skill {n}\npolicy:\n  allow_implicit_invocation: \
                     true\ndependencies:\n  tools:\n    - type: mcp\n      value: server-{n}\n      \
                     url: http://127.0.0.1:9/mcp\n"
                ),
            )?;
        }
    }
    for p in 0..PLUGINS {
        let root = codex_home.join(format!("plugins/cache/market/plugin-{p}/1.0.{p}"));
        write(root.join(".codex-plugin/plugin.json"), format!("{{\"name\":\"plugin-{p}\"}}"))?;
        write(root.join(".mcp.json"), "{\"mcpServers\":{}}".to_owned())?;
        for s in 0..SKILLS_PER_PLUGIN {
            write(
                root.join(format!("skills/s{s}/SKILL.md")),
                format!("---\nname: s{s}\ndescription: plugin {p} skill {s}\n---\nbody\n"),
            )?;
        }
    }
    Ok(())
}

/// The median milliseconds of one `capabilities/discoverV2`; every answer must list every skill
/// and plugin.
pub async fn installed(server: &Server, runs: usize) -> anyhow::Result<f64> {
    install(server.codex_home())?;
    let client = ExecServerClient::connect(&server.url, ClientOptions::default()).await?;
    let params =
        DiscoverV2Params { cwd: PathUri::parse("file:///").expect("a URI"), sandbox: None };
    let complete = |found: &tether_protocol::capabilities::DiscoverV2Response| {
        found.skills.len() >= SKILLS && found.plugins.len() == PLUGINS
    };
    let settling = Instant::now();
    while !complete(&client.discover_capabilities(&params).await?) {
        anyhow::ensure!(settling.elapsed() < SETTLE, "the inventory never listed the install");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let found = client.discover_capabilities(&params).await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(
            complete(&found),
            "{} skills, {} plugins",
            found.skills.len(),
            found.plugins.len()
        );
    }
    Ok(median(&mut times))
}

/// The median milliseconds of one `capabilityRoots/discoverV1` over the skills root and the
/// five plugin roots.
pub async fn roots(server: &Server, runs: usize) -> anyhow::Result<f64> {
    install(server.codex_home())?;
    let client = ExecServerClient::connect(&server.url, ClientOptions::default()).await?;
    let uri = |path: PathBuf| PathUri::from_path(&path).expect("an absolute path");
    let mut roots = vec![CapabilityRootRequest {
        id: "skills".into(),
        path: uri(server.codex_home().join("skills")),
        sandbox: None,
    }];
    for p in 0..PLUGINS {
        roots.push(CapabilityRootRequest {
            id: format!("plugin-{p}"),
            path: uri(server.codex_home().join(format!("plugins/cache/market/plugin-{p}/1.0.{p}"))),
            sandbox: None,
        });
    }
    let params = DiscoverRootsParams { roots };
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let found = client.discover_capability_roots(&params).await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        let skills: usize = found.roots.iter().map(|root| root.skills.len()).sum();
        anyhow::ensure!(skills == SKILLS + PLUGINS * SKILLS_PER_PLUGIN, "{skills} skills");
    }
    Ok(median(&mut times))
}
