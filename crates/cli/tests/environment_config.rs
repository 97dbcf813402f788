//! `environmentConfig/read` (spec: `codex-capabilities.md` §2) against Tether and the
//! reference: each server runs with its own `HOME` and `CODEX_HOME`, and reads configuration
//! files this test writes, as Codex would find them on an executor.
//!
//! Layers are compared by source, base directory and the TOML *value* they carry (Codex
//! parses the text; its spelling is not the contract).

use serde_json::{Value, json};
use tether_testkit::{RpcClient, RpcError, ServerProcess, Target, against_both};

mod common;
/// The executor home every scenario here runs its servers with.
type Fixture = common::ExecutorHome;

against_both!(
    the_capability_is_advertised,
    params_are_checked_in_the_reference_order,
    the_handshake_gate_names_environment_config,
    trusted_projects_add_their_layers_from_the_root_down,
    trust_is_per_directory_and_a_git_file_marks_a_root,
    untrusted_projects_add_nothing,
    repositories_may_not_set_denied_keys,
    selection_keeps_what_was_asked_for,
    a_cwd_that_is_missing_or_a_file_still_belongs_to_its_project,
    a_broken_project_file_fails_the_read,
    a_broken_user_file_fails_the_read_with_its_place,
);

impl Fixture {
    /// The user's config, with `trusted` directories (relative to the fixture) trusted.
    fn user_config(&self, body: &str, trusted: &[&str]) {
        let mut text = body.to_owned();
        for dir in trusted {
            text.push_str(&format!(
                "\n[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
                self.path(dir).display()
            ));
        }
        self.write("home/.codex/config.toml", &text);
    }

    /// A repository at `relative` (a `.git` directory with a `HEAD`).
    fn repo(&self, relative: &str) {
        self.write(&format!("{relative}/.git/HEAD"), "ref: refs/heads/main\n");
    }
}

/// Codex's own request: `mcp_servers` from both stacks.
fn mcp_request(cwd: String) -> Value {
    json!({"cwd": cwd, "configPaths": [["mcp_servers"]], "requirementsPaths": [["mcp_servers"]]})
}

/// A layer as `(source, baseDir, value)`, the value parsed from its TOML.
fn layers(stack: &Value) -> Vec<(String, String, toml::Table)> {
    stack["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|layer| {
            let text = layer["toml"].as_str().unwrap();
            (
                layer["source"].as_str().unwrap().to_owned(),
                layer["baseDir"].as_str().unwrap().to_owned(),
                toml::from_str(text).unwrap_or_else(|e| panic!("{text:?} is TOML: {e}")),
            )
        })
        .collect()
}

fn table(text: &str) -> toml::Table {
    toml::from_str(text).unwrap()
}

#[track_caller]
fn assert_error(error: RpcError, code: i64, message: &str) {
    assert_eq!((error.code, error.message.as_str()), (code, message));
}

/// The user layer's `(source, baseDir)`.
fn user_layer(fixture: &Fixture) -> (String, String) {
    (
        format!("user ({})", fixture.path("home/.codex/config.toml").display()),
        fixture.uri("home/.codex"),
    )
}

fn project_layer(fixture: &Fixture, dir: &str, value: &str) -> (String, String, toml::Table) {
    (
        format!("project ({})", fixture.path(&format!("{dir}/.codex/config.toml")).display()),
        fixture.uri(&format!("{dir}/.codex")),
        table(value),
    )
}

// ---------------------------------------------------------------------------------------------

async fn the_capability_is_advertised(target: Target) {
    let fixture = Fixture::new("envconfig", target, "capability");
    let home = fixture.path("home").display().to_string();
    let server = ServerProcess::start_with_env(target, &[], &[("HOME", &home)]).await.unwrap();
    let (_client, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
    assert_eq!(init["environmentInfo"]["capabilities"]["environmentConfigRead"], true, "{init}");
}

async fn params_are_checked_in_the_reference_order(target: Target) {
    let fixture = Fixture::new("envconfig", target, "params");
    let (_server, mut client) = fixture.started(target).await;
    let cases = [
        (Value::Null, "invalid type: null, expected struct EnvironmentConfigReadParams"),
        (json!({"cwd": "file:///x", "configPaths": [["a"]]}), "missing field `requirementsPaths`"),
        (
            json!({"cwd": "file:///x", "configPaths": "model", "requirementsPaths": []}),
            "invalid type: string \"model\", expected a sequence",
        ),
        (
            json!({"cwd": "file:///x", "configPaths": [[1]], "requirementsPaths": []}),
            "invalid type: number, expected a string",
        ),
        // The cwd is checked first, then the paths.
        (
            json!({"cwd": "x", "configPaths": [], "requirementsPaths": []}),
            "invalid URI: relative URL without a base",
        ),
        (
            json!({"cwd": "file:///x", "configPaths": [], "requirementsPaths": []}),
            "at least one config or requirements path is required",
        ),
        (
            json!({"cwd": "file:///x", "configPaths": [["a"]], "requirementsPaths": [[]]}),
            "TOML paths must contain at least one key segment",
        ),
        (
            json!({"cwd": "/x", "configPaths": [["a"]], "requirementsPaths": []}),
            "invalid URI: relative URL without a base",
        ),
        (
            json!({"cwd": "http://x/", "configPaths": [["a"]], "requirementsPaths": []}),
            "unsupported path URI scheme `http`",
        ),
        (
            json!({"cwd": "file://host/x", "configPaths": [["a"]], "requirementsPaths": []}),
            "'file://host/x' is invalid on 'linux'",
        ),
    ];
    for (params, message) in cases {
        let error = client.err("environmentConfig/read", params.clone()).await.unwrap();
        assert_eq!((error.code, error.message.as_str()), (-32602, message), "{params}");
    }
}

async fn the_handshake_gate_names_environment_config(target: Target) {
    let fixture = Fixture::new("envconfig", target, "gate");
    let server = ServerProcess::start(target).await.unwrap();
    let mut client = RpcClient::connect(&server.url).await.unwrap();
    // Params are decoded before the gate.
    let error = client.err("environmentConfig/read", Value::Null).await.unwrap();
    assert_error(error, -32602, "invalid type: null, expected struct EnvironmentConfigReadParams");
    let request = mcp_request(fixture.uri(""));
    let error = client.err("environmentConfig/read", request.clone()).await.unwrap();
    assert_error(
        error,
        -32600,
        "client must call initialize before using environment config methods",
    );
    client.call("initialize", json!({"clientName": "gate"})).await.unwrap().unwrap();
    let error = client.err("environmentConfig/read", request).await.unwrap();
    assert_error(
        error,
        -32600,
        "client must send initialized before using environment config methods",
    );
}

async fn trusted_projects_add_their_layers_from_the_root_down(target: Target) {
    let fixture = Fixture::new("envconfig", target, "trusted");
    fixture.user_config(
        "model = \"gpt-5\"\n[mcp_servers.user_http]\nurl = \"http://127.0.0.1:9/mcp\"\n\
         bearer_token_env_var = \"TOK\"\n[mcp_servers.user_stdio]\ncommand = \"echo\"\n\
         args = [\"a\", \"b\"]\n",
        &["repo"],
    );
    fixture.repo("repo");
    fixture.write(
        "repo/.codex/config.toml",
        "[mcp_servers.repo_http]\nurl = \"http://127.0.0.1:9/repo\"\nhttp_headers = { \"X-A\" = \"1\" }\n\
         [mcp_servers.repo_http.tools.t1]\nenabled = false\n",
    );
    fixture.write(
        "repo/sub/.codex/config.toml",
        "[mcp_servers.sub_http]\nurl = \"http://127.0.0.1:9/sub\"\nstartup_timeout_sec = 1.5\n",
    );
    std::fs::create_dir_all(fixture.path("repo/sub/deeper")).unwrap();
    let (_server, mut client) = fixture.started(target).await;

    let read = client
        .ok("environmentConfig/read", mcp_request(fixture.uri("repo/sub/deeper")))
        .await
        .unwrap();
    assert_eq!(read["userHomeDir"], fixture.uri("home"));
    assert_eq!(read["codexHomeDir"], fixture.uri("home/.codex"));
    let hostname = host_name();
    assert_eq!(read["hostname"], hostname);
    let (user_source, user_dir) = user_layer(&fixture);
    assert_eq!(
        layers(&read["config"]),
        [
            (
                user_source,
                user_dir,
                table(
                    "[mcp_servers.user_http]\nurl = \"http://127.0.0.1:9/mcp\"\n\
                     bearer_token_env_var = \"TOK\"\n[mcp_servers.user_stdio]\n\
                     command = \"echo\"\nargs = [\"a\", \"b\"]\n"
                )
            ),
            project_layer(
                &fixture,
                "repo",
                "[mcp_servers.repo_http]\nurl = \"http://127.0.0.1:9/repo\"\n\
                 http_headers = { \"X-A\" = \"1\" }\n[mcp_servers.repo_http.tools.t1]\nenabled = false\n"
            ),
            project_layer(
                &fixture,
                "repo/sub",
                "[mcp_servers.sub_http]\nurl = \"http://127.0.0.1:9/sub\"\nstartup_timeout_sec = 1.5\n"
            ),
        ]
    );
    assert_eq!(read["config"]["cloudInsertionIndex"], 0);
    assert_eq!(read["requirements"], json!({"layers": [], "cloudInsertionIndex": 0}));
}

async fn trust_is_per_directory_and_a_git_file_marks_a_root(target: Target) {
    let fixture = Fixture::new("envconfig", target, "per-dir");
    // `gitfile` is a root (a `.git` file, as in a worktree); only `gitfile/a` is trusted.
    // `empty` has an empty `.git` directory, which marks nothing: `empty` is its own root.
    fixture.user_config("", &["gitfile/a", "empty"]);
    fixture.write("gitfile/.git", "gitdir: elsewhere\n");
    fixture.write("gitfile/.codex/config.toml", "model = \"root\"\n");
    fixture.write("gitfile/a/.codex/config.toml", "model = \"a\"\n");
    std::fs::create_dir_all(fixture.path("empty/.git")).unwrap();
    fixture.write("empty/.codex/config.toml", "model = \"e\"\n");
    let (_server, mut client) = fixture.started(target).await;
    let request =
        |cwd: String| json!({"cwd": cwd, "configPaths": [["model"]], "requirementsPaths": []});

    let read =
        client.ok("environmentConfig/read", request(fixture.uri("gitfile/a"))).await.unwrap();
    assert_eq!(layers(&read["config"]), [project_layer(&fixture, "gitfile/a", "model = \"a\"")]);
    let read = client.ok("environmentConfig/read", request(fixture.uri("empty"))).await.unwrap();
    assert_eq!(layers(&read["config"]), [project_layer(&fixture, "empty", "model = \"e\"")]);
}

async fn untrusted_projects_add_nothing(target: Target) {
    let fixture = Fixture::new("envconfig", target, "untrusted");
    fixture.user_config("[mcp_servers.u]\nurl = \"http://u\"\n", &[]);
    fixture.repo("repo");
    fixture.write("repo/.codex/config.toml", "[mcp_servers.r]\nurl = \"http://r\"\n");
    let (_server, mut client) = fixture.started(target).await;
    let read = client.ok("environmentConfig/read", mcp_request(fixture.uri("repo"))).await.unwrap();
    let (source, dir) = user_layer(&fixture);
    assert_eq!(
        layers(&read["config"]),
        [(source, dir, table("[mcp_servers.u]\nurl = \"http://u\"\n"))]
    );
}

async fn repositories_may_not_set_denied_keys(target: Target) {
    let fixture = Fixture::new("envconfig", target, "denied");
    fixture.user_config("notify = [\"user\"]\n", &["repo"]);
    fixture.repo("repo");
    fixture.write(
        "repo/.codex/config.toml",
        "model_provider = \"evil\"\nnotify = [\"evil\"]\nopenai_base_url = \"http://evil\"\nmodel = \"ok\"\n",
    );
    let (_server, mut client) = fixture.started(target).await;
    let request = json!({"cwd": fixture.uri("repo"),
        "configPaths": [["model_provider"], ["notify"], ["openai_base_url"], ["model"]],
        "requirementsPaths": []});
    let read = client.ok("environmentConfig/read", request).await.unwrap();
    let (source, dir) = user_layer(&fixture);
    assert_eq!(
        layers(&read["config"]),
        [
            (source, dir, table("notify = [\"user\"]")),
            project_layer(&fixture, "repo", "model = \"ok\"")
        ]
    );
}

async fn selection_keeps_what_was_asked_for(target: Target) {
    let fixture = Fixture::new("envconfig", target, "selection");
    fixture.user_config(
        "tbl = \"not-a-table\"\nmodel = \"m\"\n[mcp_servers.x]\nurl = \"http://x\"\n[other]\nk = 1\n",
        &[],
    );
    let (_server, mut client) = fixture.started(target).await;
    let (source, dir) = user_layer(&fixture);
    for (paths, expected) in [
        (json!([["tbl", "b", "c"]]), Some("tbl = \"not-a-table\"")),
        (json!([["mcp_servers", "nope"]]), Some("[mcp_servers]")),
        (
            json!([["mcp_servers", "x", "url"], ["mcp_servers"]]),
            Some("[mcp_servers.x]\nurl = \"http://x\""),
        ),
        (json!([["other", "k"], ["model"]]), Some("model = \"m\"\n[other]\nk = 1")),
        (json!([["absent"]]), None),
    ] {
        let request =
            json!({"cwd": fixture.uri(""), "configPaths": paths, "requirementsPaths": []});
        let read = client.ok("environmentConfig/read", request).await.unwrap();
        let expected: Vec<_> =
            expected.map(|text| (source.clone(), dir.clone(), table(text))).into_iter().collect();
        assert_eq!(layers(&read["config"]), expected, "{paths}");
    }
}

/// A cwd need not exist, or be a directory: its project is found from its nearest marked
/// ancestor all the same; without one, it has no project layers.
async fn a_cwd_that_is_missing_or_a_file_still_belongs_to_its_project(target: Target) {
    let fixture = Fixture::new("envconfig", target, "cwd");
    fixture.user_config("model = \"u\"\n", &["", "repo", "loose"]);
    fixture.repo("repo");
    fixture.write("repo/.codex/config.toml", "model = \"r\"\n");
    fixture.write("loose/.codex/config.toml", "model = \"l\"\n");
    let (_server, mut client) = fixture.started(target).await;
    let (source, dir) = user_layer(&fixture);
    let user = (source, dir, table("model = \"u\""));
    let in_repo = [user.clone(), project_layer(&fixture, "repo", "model = \"r\"")];
    for (cwd, expected) in [
        ("repo/missing/deeper", &in_repo[..]),
        ("repo/.codex/config.toml", &in_repo[..]),
        ("loose/missing", &in_repo[..1]),
        ("home/.codex/config.toml", &in_repo[..1]),
    ] {
        let request =
            json!({"cwd": fixture.uri(cwd), "configPaths": [["model"]], "requirementsPaths": []});
        let read = client.ok("environmentConfig/read", request).await.unwrap();
        assert_eq!(layers(&read["config"]), expected, "{cwd}");
    }
}

async fn a_broken_project_file_fails_the_read(target: Target) {
    let fixture = Fixture::new("envconfig", target, "broken");
    fixture.user_config("", &["broken"]);
    fixture.write("broken/.codex/config.toml", "this is = = bad\n");
    let (_server, mut client) = fixture.started(target).await;
    let error =
        client.err("environmentConfig/read", mcp_request(fixture.uri("broken"))).await.unwrap();
    let file = fixture.path("broken/.codex/config.toml");
    assert_error(
        error,
        -32603,
        &format!(
            "failed to load executor-local config: Error parsing project config file {}: \
             TOML parse error at line 1, column 6\n  |\n1 | this is = = bad\n  |      ^\n\
             key with no value, expected `=`\n",
            file.display()
        ),
    );
}

async fn a_broken_user_file_fails_the_read_with_its_place(target: Target) {
    let fixture = Fixture::new("envconfig", target, "broken-user");
    fixture.write("home/.codex/config.toml", "model = \"m\"\nbad = = 1\n");
    let (_server, mut client) = fixture.started(target).await;
    let error = client.err("environmentConfig/read", mcp_request(fixture.uri(""))).await.unwrap();
    let file = fixture.path("home/.codex/config.toml");
    assert_error(
        error,
        -32603,
        &format!(
            "failed to load executor-local config: {}:2:7: extra `=`, expected nothing",
            file.display()
        ),
    );
}

/// The host name, as `uname -n` prints it.
fn host_name() -> String {
    let output = std::process::Command::new("uname").arg("-n").output().unwrap();
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}
