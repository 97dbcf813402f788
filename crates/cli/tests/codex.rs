//! The real Codex CLI (0.171.0, and 0.169.0 for the older client), pointed at the server with `CODEX_EXEC_SERVER_URL`, works
//! through it end to end: commands, patches, images. The model is a local stand-in
//! ([`tether_testkit::MockModel`]) that scripts the tool calls; everything else — Codex, its exec-server client,
//! the server, the processes and files — is real.

use std::path::{Path, PathBuf};

use tether_testkit::{McpEverything, ServerProcess, Target, ToolCall, against_both};

use common::codex::Workspace;

mod common;

against_both!(
    codex_exec_runs_a_command_on_the_executor,
    codex_applies_patches_through_the_executor,
    codex_views_an_image_through_the_executor,
    codex_reaches_an_mcp_server_through_the_executor,
    codex_reaches_an_mcp_server_the_executor_declares,
    codex_workspace_write_confines_commands_to_the_workspace,
    codex_workspace_write_applies_patches_in_the_sandbox,
    codex_read_only_denies_a_command_that_writes,
    codex_tells_the_model_about_a_skill_installed_on_the_executor,
    codex_commands_have_the_executor_users_bashrc,
    codex_copies_a_40_mb_file_to_and_from_the_executor,
    codex_managed_network_reaches_allowed_origins_only,
    codex_credential_masking_keeps_the_token_from_the_command,
    codex_masks_a_key_of_a_custom_credential_provider,
    codex_transparent_tcp_carries_a_command_that_ignores_the_proxy,
);

async fn codex_exec_runs_a_command_on_the_executor(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let workspace = Workspace::new(target, "exec");
    let marker = workspace.work().join("created-on-the-executor");
    let cmd = format!("echo hello-from-the-executor; pwd; touch {}", marker.display());
    let outputs = workspace.run_codex(&server, vec![ToolCall::Exec { cmd }]).await;
    let reported = &outputs[0];
    assert!(reported.contains("Process exited with code 0"), "{reported}");
    assert!(reported.contains("hello-from-the-executor"), "{reported}");
    assert!(
        reported.contains(workspace.work().to_str().unwrap()),
        "ran in the requested cwd: {reported}"
    );
    assert!(marker.exists(), "the command ran for real");
}

async fn codex_applies_patches_through_the_executor(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let workspace = Workspace::new(target, "patch");
    let work = workspace.work();
    std::fs::write(work.join("existing.txt"), "keep\nold line\n").unwrap();
    std::fs::write(work.join("doomed.txt"), "bye\n").unwrap();
    let patch = "*** Begin Patch\n\
                 *** Add File: brand/new/dir/added.txt\n+hello patch\n\
                 *** Update File: existing.txt\n@@\n keep\n-old line\n+new line\n\
                 *** Delete File: doomed.txt\n\
                 *** End Patch\n";
    let outputs =
        workspace.run_codex(&server, vec![ToolCall::ApplyPatch { patch: patch.into() }]).await;
    assert!(outputs[0].contains("Success"), "{}", outputs[0]);
    assert_eq!(read(&work.join("brand/new/dir/added.txt")), "hello patch\n");
    assert_eq!(read(&work.join("existing.txt")), "keep\nnew line\n");
    assert!(!work.join("doomed.txt").exists());
}

async fn codex_views_an_image_through_the_executor(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let workspace = Workspace::new(target, "image");
    let image = workspace.work().join("pixel.png");
    std::fs::write(&image, SMALL_PNG).unwrap();
    let calls = vec![ToolCall::ViewImage { path: image.to_str().unwrap().into() }];
    let outputs = workspace.run_codex(&server, calls).await;
    assert!(
        outputs[0].contains("data:image/png;base64,"),
        "the image reached the model: {}",
        outputs[0]
    );
}

async fn codex_reaches_an_mcp_server_through_the_executor(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let mcp = McpEverything::start().await.unwrap();
    let workspace = Workspace::new(target, "mcp");
    // `environment_id = "remote"`: the MCP server is reached from the executor's side, over
    // `http/request` with streamed bodies.
    let config =
        format!("[mcp_servers.everything]\nurl = \"{}\"\nenvironment_id = \"remote\"\n", mcp.url);
    let call = ToolCall::Mcp {
        namespace: "mcp__everything".into(),
        name: "echo".into(),
        arguments: serde_json::json!({"message": "hello-through-the-executor"}),
    };
    let outputs = workspace.run_codex_with(&server, vec![call], &config).await;
    assert!(outputs[0].contains("Echo: hello-through-the-executor"), "{}", outputs[0]);
}

/// An HTTP MCP server that only the executor's own configuration declares (its
/// `$CODEX_HOME/config.toml`, which Codex cannot see): Codex learns it with
/// `environmentConfig/read` and the model can call it.
async fn codex_reaches_an_mcp_server_the_executor_declares(target: Target) {
    let mcp = McpEverything::start().await.unwrap();
    let executor_home = Outside::new(target, "executor-home");
    let config = format!("[mcp_servers.executor_everything]\nurl = \"{}\"\n", mcp.url);
    std::fs::write(executor_home.0.join("config.toml"), config).unwrap();
    let home = executor_home.0.display().to_string();
    let server =
        ServerProcess::start_with_env(target, &[], &[("CODEX_HOME", &home)]).await.unwrap();
    let workspace = Workspace::new(target, "executor-mcp");
    let call = ToolCall::Mcp {
        namespace: "mcp__executor_everything".into(),
        name: "echo".into(),
        arguments: serde_json::json!({"message": "declared-by-the-executor"}),
    };
    let outputs = workspace.run_codex(&server, vec![call]).await;
    assert!(outputs[0].contains("Echo: declared-by-the-executor"), "{}", outputs[0]);
}

/// `-s workspace-write`: a command writes in the workspace, and is refused outside it (a
/// directory outside `/tmp`, which the mode leaves writable) and in the workspace's `.git`.
async fn codex_workspace_write_confines_commands_to_the_workspace(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let workspace = Workspace::new(target, "ww-exec");
    let outside = Outside::new(target, "ww-exec");
    std::fs::create_dir(workspace.work().join(".git")).unwrap();
    let inside = workspace.work().join("made-inside");
    let cmd = format!(
        "touch {inside}; touch {outside}/escaped; touch .git/hook; echo $$",
        inside = inside.display(),
        outside = outside.0.display()
    );
    let outputs = workspace
        .run_codex_sandboxed(&server, "workspace-write", vec![ToolCall::Exec { cmd }])
        .await;
    let reported = &outputs[0];
    assert!(inside.exists(), "the workspace is writable: {reported}");
    assert!(!outside.0.join("escaped").exists(), "outside is not: {reported}");
    assert!(!workspace.work().join(".git/hook").exists(), ".git is not: {reported}");
    assert_eq!(reported.matches("Read-only file system").count(), 2, "{reported}");
}

/// `-s workspace-write`: `apply_patch` goes through the sandboxed file writes (a missing
/// parent is created, as Codex expects from the `-32004` it gets first), and removes a file.
async fn codex_workspace_write_applies_patches_in_the_sandbox(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let workspace = Workspace::new(target, "ww-patch");
    let work = workspace.work();
    std::fs::write(work.join("existing.txt"), "keep\nold line\n").unwrap();
    std::fs::write(work.join("obsolete.txt"), "gone soon\n").unwrap();
    let patch = "*** Begin Patch\n\
                 *** Add File: brand/new/dir/added.txt\n+hello patch\n\
                 *** Update File: existing.txt\n@@\n keep\n-old line\n+new line\n\
                 *** Delete File: obsolete.txt\n\
                 *** End Patch\n";
    let calls = vec![ToolCall::ApplyPatch { patch: patch.into() }];
    let outputs = workspace.run_codex_sandboxed(&server, "workspace-write", calls).await;
    assert!(outputs[0].contains("Success"), "{}", outputs[0]);
    assert_eq!(read(&work.join("brand/new/dir/added.txt")), "hello patch\n");
    assert_eq!(read(&work.join("existing.txt")), "keep\nnew line\n");
    assert!(!work.join("obsolete.txt").exists(), "the deleted file is gone");
}

/// Codex CLI 0.169.0, the older client, still works through Tether: it ignores what 0.171's
/// exec-server added (the new capability bit, spawn kinds), runs a command and applies a patch
/// in `-s workspace-write`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_0169_still_runs_commands_and_sandboxed_patches_through_tether() {
    let server = ServerProcess::start(Target::Tether).await.unwrap();
    let workspace = Workspace::previous_codex(Target::Tether, "codex-0169");
    let work = workspace.work();
    let marker = work.join("made-by-0169");
    let patch = "*** Begin Patch\n*** Add File: patched.txt\n+from 0.169\n*** End Patch\n";
    let calls = vec![
        ToolCall::Exec { cmd: format!("echo older-client; touch {}", marker.display()) },
        ToolCall::ApplyPatch { patch: patch.into() },
    ];
    let outputs = workspace.run_codex_sandboxed(&server, "workspace-write", calls).await;
    assert!(outputs[0].contains("older-client"), "{}", outputs[0]);
    assert!(outputs[1].contains("Success"), "{}", outputs[1]);
    assert!(marker.exists(), "the command ran for real");
    assert_eq!(read(&work.join("patched.txt")), "from 0.169\n");
}

/// `-s read-only` (Codex's default for `exec`): a command reads, and its write is refused by
/// the sandbox, as the reference refuses it.
async fn codex_read_only_denies_a_command_that_writes(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let workspace = Workspace::new(target, "ro-exec");
    std::fs::write(workspace.work().join("readable.txt"), "readable-content").unwrap();
    let marker = workspace.work().join("not-written");
    let cmd = format!("cat readable.txt; touch {}", marker.display());
    let outputs =
        workspace.run_codex_sandboxed(&server, "read-only", vec![ToolCall::Exec { cmd }]).await;
    let reported = &outputs[0];
    assert!(reported.contains("readable-content"), "{reported}");
    assert!(reported.contains("Read-only file system"), "{reported}");
    assert!(!marker.exists(), "the write was refused: {reported}");
}

/// An executor whose user has a home of their own (`HOME`, with `CODEX_HOME` in it), which
/// Codex's side cannot see.
async fn executor_with_home(target: Target, home: &Outside) -> ServerProcess {
    let codex_home = home.0.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    let (home, codex_home) = (home.0.display().to_string(), codex_home.display().to_string());
    let env = [("HOME", home.as_str()), ("CODEX_HOME", codex_home.as_str())];
    ServerProcess::start_with_env(target, &[], &env).await.unwrap()
}

/// With `executor_capability_discovery_v2`, a skill installed only on the executor
/// (`$CODEX_HOME/skills`) is among the skills the model is told about.
async fn codex_tells_the_model_about_a_skill_installed_on_the_executor(target: Target) {
    let executor_home = Outside::new(target, "skill-home");
    let skill = executor_home.0.join(".codex/skills/executor-skill");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: executor-skill\ndescription: Only-on-the-executor skill marker\n---\nUse it.\n",
    )
    .unwrap();
    let server = executor_with_home(target, &executor_home).await;
    let workspace = Workspace::new(target, "executor-skill");
    let features = "[features]\nexecutor_capability_discovery_v2 = true\n";
    let (_, requests) = workspace.run_seen(&server, "danger-full-access", vec![], features).await;
    let told = serde_json::to_string(&requests).unwrap();
    assert!(told.contains("Only-on-the-executor skill marker"), "the model was not told: {told}");
}

/// With `shell_snapshot_v2`, a command has the functions and exports of the executor user's
/// `~/.bashrc`, which a plain `bash -lc` does not read.
async fn codex_commands_have_the_executor_users_bashrc(target: Target) {
    let executor_home = Outside::new(target, "bashrc-home");
    std::fs::write(
        executor_home.0.join(".bashrc"),
        "rcfn() { echo \"rcfn says $1\"; }\nexport RC_EXPORT=from-the-bashrc\n",
    )
    .unwrap();
    let server = executor_with_home(target, &executor_home).await;
    let workspace = Workspace::new(target, "bashrc");
    let features = "[features]\nshell_snapshot_v2 = true\n";
    let cmd = "rcfn hello; echo export=$RC_EXPORT".to_owned();
    let outputs = workspace.run_codex_with(&server, vec![ToolCall::Exec { cmd }], features).await;
    assert!(outputs[0].contains("rcfn says hello"), "{}", outputs[0]);
    assert!(outputs[0].contains("export=from-the-bashrc"), "{}", outputs[0]);
}

/// With `multi_env_copy_file` and two environments (Codex's own, `local`, and the executor,
/// `remote`), the model's `multi_env_copy_file` moves 40 MB each way intact: into the executor
/// as streamed writes (`fs/open` replace + 1 MiB `fs/writeBlock`s, which `fileWriteStreaming`
/// asks for; one `fs/writeFile` of that size would not fit a frame), and back out, in answers
/// Tether sends as frames of 256 KiB, which Codex's client reassembles.
async fn codex_copies_a_40_mb_file_to_and_from_the_executor(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let workspace = Workspace::new(target, "copy");
    let environments = format!(
        "default = \"remote\"\ninclude_local = true\n\n[[environments]]\nid = \"remote\"\nurl = \"{}\"\n",
        server.url
    );
    workspace.environments(&environments);
    let data: Vec<u8> =
        (0..40_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let local = workspace.root.join("local.bin");
    std::fs::write(&local, &data).unwrap();
    let on_executor = workspace.work().join("copied.bin");
    let back = workspace.root.join("back.bin");
    let copy = |from: &str, source: &Path, to: &str, target: &Path| ToolCall::Function {
        name: "multi_env_copy_file".into(),
        arguments: serde_json::json!({
            "source_environment_id": from, "source_path": source,
            "target_environment_id": to, "target_path": target,
        }),
    };
    let calls = vec![
        copy("local", &local, "remote", &on_executor),
        copy("remote", &on_executor, "local", &back),
    ];
    let features = "[features]\nmulti_env_copy_file = true\n";
    let outputs = workspace.run_codex_with(&server, calls, features).await;
    for output in &outputs {
        assert_eq!(output, r#"{"bytes_copied":40000000}"#);
    }
    assert!(std::fs::read(&on_executor).unwrap() == data, "the executor's copy is intact");
    assert!(std::fs::read(&back).unwrap() == data, "the copy back is intact");
}

/// A directory outside `/tmp` and outside the workspace, removed when dropped.
struct Outside(PathBuf);

impl Outside {
    fn new(target: Target, name: &str) -> Self {
        let dir = PathBuf::from("/var/tmp")
            .join(format!("tether-codex-outside-{name}-{}-{target:?}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A valid 4×4 red PNG.
const SMALL_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x04, 0x08, 0x02, 0x00, 0x00, 0x00, 0x26, 0x93, 0x09,
    0x29, 0x00, 0x00, 0x00, 0x10, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x47, 0x0c, 0xc4, 0x71, 0x00, 0xae, 0x93, 0x0f, 0xf1, 0xd0, 0x5f, 0x23, 0x9e, 0x00, 0x00, 0x00,
    0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// Managed network (`[features.network_proxy]` with `network_access` in `-s workspace-write`):
/// Codex (0.171, then 0.169) launches each command behind a proxy of the executor's; an
/// allowed origin answers, a name the policy denies gets the proxy's `403`, and a connection
/// around the proxy (`--noproxy '*'`) reaches nothing.
async fn codex_managed_network_reaches_allowed_origins_only(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    for workspace in [
        Workspace::new(target, "managed-network"),
        Workspace::previous_codex(target, "managed-network-0169"),
    ] {
        managed_network_run(&server, &workspace).await;
    }
}

async fn managed_network_run(server: &ServerProcess, workspace: &Workspace) {
    let peer = tether_testkit::http_peer::HttpPeer::start().await.unwrap();
    let cmd = format!(
        "curl -sS -o /dev/null -w 'allowed %{{http_code}}\n' {url}/allowed; \
         curl -sS -o /dev/null -w 'denied %{{http_code}}\n' http://denied.example.test/; \
         curl -sS -m 5 -o /dev/null --noproxy '*' {url}/around; echo \"around exit $?\"",
        url = peer.base_url
    );
    let config = "[sandbox_workspace_write]\nnetwork_access = true\n\n\
                  [features.network_proxy]\nenabled = true\n\n\
                  [features.network_proxy.domains]\n\"127.0.0.1\" = \"allow\"\n\
                  \"denied.example.test\" = \"deny\"\n";
    let outputs =
        workspace.run(server, "workspace-write", vec![ToolCall::Exec { cmd }], config).await;
    let reported = &outputs[0];
    assert!(reported.contains("allowed 200"), "{reported}");
    assert!(reported.contains("denied 403"), "{reported}");
    assert!(reported.contains("around exit 7"), "{reported}");
    assert_eq!(peer.connections(), 1, "only the proxied request reached the origin: {reported}");
}

/// Transparent TCP (`transparent_tcp = true` in `[features.network_proxy]`, Codex 0.171): a
/// command that ignores the proxy variables (`curl --noproxy '*'`) still reaches an allowed
/// origin, through the proxy, and a denied name is reset (curl says 56, 55 or 7 as the reset
/// finds it reading, sending, or not yet through its connect).
async fn codex_transparent_tcp_carries_a_command_that_ignores_the_proxy(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let workspace = Workspace::new(target, "transparent-tcp");
    let host = tether_testkit::http_peer::host_address().unwrap();
    let peer = tether_testkit::http_peer::HttpPeer::start_at(host).await.unwrap();
    let cmd = format!(
        "curl -sS --noproxy '*' -o /dev/null -w 'around %{{http_code}}\n' {url}/around; \
         curl -sS --noproxy '*' http://denied.example.test/ 2>/dev/null; \
         case $? in 7|55|56) echo denied by a reset;; *) echo \"denied exit $?\";; esac",
        url = peer.base_url
    );
    let config = format!(
        "[sandbox_workspace_write]\nnetwork_access = true\n\n\
         [features.network_proxy]\nenabled = true\ntransparent_tcp = true\n\
         allow_local_binding = true\n\n\
         [features.network_proxy.domains]\n\"{host}\" = \"allow\"\n\
         \"denied.example.test\" = \"deny\"\n"
    );
    let outputs =
        workspace.run(&server, "workspace-write", vec![ToolCall::Exec { cmd }], &config).await;
    let reported = &outputs[0];
    assert!(reported.contains("around 200"), "{reported}");
    assert!(reported.contains("denied by a reset"), "{reported}");
    assert_eq!(peer.requests(), ["GET /around"], "{reported}");
}

/// Credential masking (`[features] credential_masking`, with the network proxy, a sandbox and
/// no login shell): the executor's `GITHUB_TOKEN` is a placeholder in the command, and the
/// real token reaches `api.github.com` (an HTTPS origin of the test's own, behind an upstream
/// proxy, trusted through the executor's `SSL_CERT_FILE`).
async fn codex_credential_masking_keeps_the_token_from_the_command(target: Target) {
    let mut workspace = Workspace::new(target, "masking");
    let masked = common::origins::MaskedHost::start(&workspace.root, "api.github.com").await;
    let token = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
    let executor_home = Outside::new(target, "masking-home");
    let home = executor_home.0.display().to_string();
    let mut env = masked.executor_env("GITHUB_TOKEN", token);
    env.push(("CODEX_HOME", home.as_str()));
    let server = ServerProcess::start_with_env(target, &[], &env).await.unwrap();
    workspace.top_level = "allow_login_shell = false\n".into();
    let cmd = "echo \"child: $GITHUB_TOKEN\"; \
               curl -sS -H \"Authorization: Bearer $GITHUB_TOKEN\" https://api.github.com/user; echo"
        .to_string();
    let config = "[sandbox_workspace_write]\nnetwork_access = true\n\n\
                  [features]\ncredential_masking = true\n\n\
                  [features.network_proxy]\nenabled = true\nallow_local_binding = true\n\n\
                  [features.network_proxy.domains]\n\"api.github.com\" = \"allow\"\n";
    let outputs =
        workspace.run(&server, "workspace-write", vec![ToolCall::Exec { cmd }], config).await;
    let reported = &outputs[0];
    assert!(reported.contains("child: ghp_masked"), "{reported}");
    assert!(!reported.contains(&format!("child: {token}")), "{reported}");
    assert!(reported.contains(&format!("Bearer {token}")), "the origin got the token: {reported}");
    assert_eq!(masked.upstream.seen(), ["CONNECT api.github.com:443 HTTP/1.1"], "{reported}");
}

/// A custom credential provider (`[features.network_proxy.credentials.NAME]` with `env`,
/// `patterns` and `url_prefixes`): the command reads a placeholder of the key's shape, listed
/// in the markers under the variable's name, and the key reaches the provider's URL prefix.
async fn codex_masks_a_key_of_a_custom_credential_provider(target: Target) {
    let mut workspace = Workspace::new(target, "provider");
    let masked = common::origins::MaskedHost::start(&workspace.root, "api.vendor.example").await;
    let key = "vk_live_0123456789abcdefABCDEF0123456789";
    let executor_home = Outside::new(target, "provider-home");
    let home = executor_home.0.display().to_string();
    let mut env = masked.executor_env("VENDOR_KEY", key);
    env.push(("CODEX_HOME", home.as_str()));
    let server = ServerProcess::start_with_env(target, &[], &env).await.unwrap();
    workspace.top_level = "allow_login_shell = false\n".into();
    let cmd = "echo \"child: $VENDOR_KEY\"; echo \"$CODEX_NETWORK_PROXY_BROKERED_CREDENTIALS\"; \
               curl -sS -H \"Authorization: Bearer $VENDOR_KEY\" https://api.vendor.example/v1/charges; echo"
        .to_string();
    let config = "[sandbox_workspace_write]\nnetwork_access = true\n\n\
                  [features]\ncredential_masking = true\n\n\
                  [features.network_proxy]\nenabled = true\nallow_local_binding = true\n\n\
                  [features.network_proxy.domains]\n\"api.vendor.example\" = \"allow\"\n\n\
                  [features.network_proxy.credentials.vendor]\nenv = [\"VENDOR_KEY\"]\n\
                  patterns = [\"vk_live_[A-Za-z0-9]{32}\"]\n\
                  url_prefixes = [\"https://api.vendor.example/v1\"]\n";
    let outputs =
        workspace.run(&server, "workspace-write", vec![ToolCall::Exec { cmd }], config).await;
    let reported = &outputs[0];
    let child = reported
        .lines()
        .find_map(|line| line.strip_prefix("child: "))
        .unwrap_or_else(|| panic!("{reported}"));
    assert!(
        child != key && child.starts_with("vk_live_") && child.len() == key.len(),
        "{reported}"
    );
    assert!(reported.contains(&format!("[\"VENDOR_KEY\",\"{child}\"]")), "{reported}");
    assert!(reported.contains(&format!("Bearer {key}")), "the origin got the key: {reported}");
}
