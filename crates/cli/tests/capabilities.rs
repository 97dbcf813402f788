//! `capabilities/discoverV2` and `capabilityRoots/discoverV1` (spec: `codex-capabilities.md`
//! §3–§4) against Tether and the reference. Each server runs with its own `HOME` and
//! `CODEX_HOME`, holding skills and plugins this test installs, as Codex would find them on an
//! executor.

use serde_json::{Value, json};
use tether_testkit::{RpcClient, ServerProcess, Target, against_both};

mod common;
/// The executor home every scenario here runs its servers with.
type Fixture = common::ExecutorHome;

against_both!(
    the_capability_is_advertised,
    params_are_decoded_before_the_gate_names_capability_discovery,
    skills_come_from_the_executor_roots_with_their_metadata,
    plugins_are_listed_at_their_active_version,
    roots_return_their_skill_and_plugin_files,
    roots_fail_alone_and_files_over_their_limits_are_skipped,
    at_most_128_roots_are_scanned,
    a_root_scan_stops_at_its_traversal_limits,
    a_sandbox_intent_hides_what_it_hides_from_discovery,
);

const METADATA_WARNING: &str =
    "some capability metadata could not be loaded; discovery may be incomplete";

impl Fixture {
    /// A `SKILL.md` at `dir` with this front matter.
    fn skill(&self, dir: &str, front_matter: &str) {
        self.write(&format!("{dir}/SKILL.md"), format!("---\n{front_matter}\n---\nbody\n"));
    }

    /// A plugin version in the cache, with this manifest.
    fn cached_plugin(
        &self,
        marketplace: &str,
        name: &str,
        version: &str,
        manifest: &str,
    ) -> String {
        let dir = format!("home/.codex/plugins/cache/{marketplace}/{name}/{version}");
        self.write(&format!("{dir}/.codex-plugin/plugin.json"), manifest);
        dir
    }

    async fn installed(&self, client: &mut RpcClient) -> Value {
        client.ok("capabilities/discoverV2", json!({"cwd": self.uri("")})).await.unwrap()
    }
}

fn texts(values: &Value, key: &str) -> Vec<String> {
    values.as_array().unwrap().iter().map(|v| v[key].as_str().unwrap_or("").to_owned()).collect()
}

// ---------------------------------------------------------------------------------------------

async fn the_capability_is_advertised(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let (_client, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
    assert_eq!(init["environmentInfo"]["capabilities"]["capabilityDiscoveryV2"], true, "{init}");
    // Roots may carry a sandbox intent: discovery then reads inside it (tested below).
    assert_eq!(init["environmentInfo"]["capabilities"]["capabilityDiscoverySandbox"], true);
}

async fn params_are_decoded_before_the_gate_names_capability_discovery(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let mut client = RpcClient::connect(&server.url).await.unwrap();
    let cases = [
        (
            "capabilities/discoverV2",
            Value::Null,
            "invalid type: null, expected struct DiscoverV2CapabilitiesRequest",
        ),
        ("capabilities/discoverV2", json!({}), "missing field `cwd`"),
        (
            "capabilities/discoverV2",
            json!({"cwd": "rel"}),
            "invalid URI: relative URL without a base",
        ),
        (
            "capabilities/discoverV2",
            json!({"cwd": "http://x/"}),
            "unsupported path URI scheme `http`",
        ),
        (
            "capabilities/discoverV2",
            json!({"cwd": "file:///", "sandbox": {}}),
            "missing field `permissions`",
        ),
        (
            "capabilities/discoverV2",
            json!({"cwd": "file:///", "sandbox": {"permissions": {"type": "disabled"},
                "windowsSandboxLevel": "disabled"}}),
            "missing field `cwd`",
        ),
        (
            "capabilityRoots/discoverV1",
            Value::Null,
            "invalid type: null, expected struct WireCapabilityRootsDiscoverParams",
        ),
        ("capabilityRoots/discoverV1", json!({}), "missing field `roots`"),
        (
            "capabilityRoots/discoverV1",
            json!({"roots": 5}),
            "invalid type: number, expected a sequence",
        ),
        (
            "capabilityRoots/discoverV1",
            json!({"roots": [{"path": "file:///"}]}),
            "missing field `id`",
        ),
        (
            "capabilityRoots/discoverV1",
            json!({"roots": [{"id": "a", "path": "rel"}]}),
            "invalid URI: relative URL without a base",
        ),
    ];
    for (method, params, message) in cases {
        let error = client.err(method, params.clone()).await.unwrap();
        assert_eq!((error.code, error.message.as_str()), (-32602, message), "{method} {params}");
    }
    for (method, params) in [
        ("capabilities/discoverV2", json!({"cwd": "file:///"})),
        ("capabilityRoots/discoverV1", json!({"roots": []})),
    ] {
        let error = client.err(method, params.clone()).await.unwrap();
        assert_eq!(
            (error.code, error.message.as_str()),
            (-32600, "client must call initialize before using capability discovery methods")
        );
    }
    client.call("initialize", json!({"clientName": "gate"})).await.unwrap().unwrap();
    let error = client.err("capabilities/discoverV2", json!({"cwd": "file:///"})).await.unwrap();
    assert_eq!(
        (error.code, error.message.as_str()),
        (-32600, "client must send initialized before using capability discovery methods")
    );
}

async fn skills_come_from_the_executor_roots_with_their_metadata(target: Target) {
    let fixture = Fixture::new("capabilities", target, "skills");
    let skills = "home/.codex/skills";
    fixture.skill(
        &format!("{skills}/deploy"),
        "name: deploy\ndescription: |\n  Ship it\n  today\nmetadata:\n  short-description: ship",
    );
    fixture.write(
        &format!("{skills}/deploy/agents/openai.yaml"),
        "interface:\n  display_name: Deploy\npolicy:\n  allow_implicit_invocation: false\n  \
         products: [CODEX]\ndependencies:\n  tools:\n    - type: mcp\n      value: docs\n      \
         url: http://127.0.0.1:9/mcp\n      oauth:\n        callback_port: 8123\n    - type: mcp\n",
    );
    // Prose YAML refuses, a name from the directory, a hidden and a nested skill.
    fixture.skill(&format!("{skills}/aws"), "name: aws\ndescription: Build for AWS: ECS # note");
    fixture.skill(&format!("{skills}/unnamed"), "description: no name given");
    fixture.skill(&format!("{skills}/.hidden/h"), "name: hidden\ndescription: h");
    fixture.skill(&format!("{skills}/outer"), "name: outer\ndescription: o");
    fixture.skill(&format!("{skills}/outer/inner"), "name: inner\ndescription: i");
    // Not skills: no front matter, seven levels down, a differently spelled file.
    fixture.write(&format!("{skills}/plain/SKILL.md"), "no front matter\n");
    fixture.skill(&format!("{skills}/deep/a/b/c/d/e/f"), "name: deep\ndescription: too deep");
    fixture.write(&format!("{skills}/lower/skill.md"), "---\nname: lower\ndescription: l\n---\n");
    // A broken `agents/openai.yaml` costs the skill its metadata only.
    fixture.skill(&format!("{skills}/badmeta"), "name: badmeta\ndescription: b");
    fixture
        .write(&format!("{skills}/badmeta/agents/openai.yaml"), "policy:\n  products: [bogus]\n");
    fixture.skill("home/.agents/skills/agent", "name: agent\ndescription: from ~/.agents");
    let (_server, mut client) = fixture.started(target).await;

    let found = fixture.installed(&mut client).await;
    let skills = &found["skills"];
    assert_eq!(
        texts(skills, "name"),
        ["hidden", "aws", "badmeta", "deploy", "outer", "inner", "unnamed", "agent"],
        "{found}"
    );
    let deploy = &skills[3];
    assert_eq!(deploy["description"], "Ship it today");
    assert_eq!(deploy["shortDescription"], "ship");
    assert_eq!(deploy["path"], fixture.uri("home/.codex/skills/deploy/SKILL.md"));
    assert_eq!(
        deploy["discoveryRoot"],
        json!({"id": "codex-home-skills", "path": fixture.uri("home/.codex/skills")})
    );
    assert_eq!(deploy["policy"], json!({"allowImplicitInvocation": false, "products": ["codex"]}));
    assert_eq!(
        deploy["dependencies"],
        json!({"tools": [{"type": "mcp", "value": "docs", "description": null, "transport": null,
            "command": null, "url": "http://127.0.0.1:9/mcp", "oauthCallbackPort": 8123}]})
    );
    assert_eq!(skills[1]["description"], "Build for AWS: ECS");
    assert_eq!((&skills[2]["dependencies"], &skills[2]["policy"]), (&Value::Null, &Value::Null));
    assert_eq!(skills[6]["description"], "no name given");
    assert_eq!(skills[7]["discoveryRoot"]["id"], "user-agent-skills");
    assert_eq!(found["plugins"], json!([]));
    // The skill without front matter is reported only as a note that something is missing.
    assert_eq!(found["warnings"], json!([METADATA_WARNING]));
}

async fn plugins_are_listed_at_their_active_version(target: Target) {
    let fixture = Fixture::new("capabilities", target, "plugins");
    for version in ["1.0.0", "1.9.0", "1.10.0"] {
        let dir = fixture.cached_plugin(
            "mkt",
            "tools",
            version,
            &format!(r#"{{"name":"tools","v":"{version}"}}"#),
        );
        fixture.skill(
            &format!("{dir}/skills/lint"),
            &format!("name: lint\ndescription: lint {version}"),
        );
    }
    let dir = fixture.cached_plugin(
        "mkt",
        "pretty",
        "2.0.0",
        r#"{"name":"pname","interface":{"displayName":"Pretty Name"},"mcpServers":{"zeta":{"url":"http://z"},"alpha":{}}}"#,
    );
    fixture.write(&format!("{dir}/sub/.claude-plugin/plugin.json"), r#"{"name":"subns"}"#);
    fixture.skill(&format!("{dir}/sub/skills/s"), "name: s\ndescription: nested namespace");
    fixture.skill(&format!("{dir}/examples/e"), "name: e\ndescription: own namespace");
    fixture.cached_plugin("mkt", "dev", "9.0.0", r#"{"name":"dev"}"#);
    let local = fixture.cached_plugin("mkt", "dev", "local", r#"{"name":"dev"}"#);
    fixture.write(&format!("{local}/.app.json"), "{\"apps\":[]}\n");
    fixture.cached_plugin("other", "remote", "1.0.0", r#"{"name":"remote"}"#);
    fixture.write(
        "home/.codex/plugins/cache/other/remote/.codex-remote-plugin-install.json",
        r#"{"schema_version":1,"remote_plugin_id":"  plugin-123 "}"#,
    );
    // No manifest: not a plugin.
    fixture.skill(
        "home/.codex/plugins/cache/mkt/nomanifest/1.0.0/skills/x",
        "name: x\ndescription: x",
    );
    let (_server, mut client) = fixture.started(target).await;

    let found = fixture.installed(&mut client).await;
    let plugins = &found["plugins"];
    assert_eq!(
        texts(plugins, "id"),
        ["dev@mkt", "pretty@mkt", "remote@other", "tools@mkt"],
        "{found}"
    );
    assert_eq!(texts(plugins, "version"), ["local", "2.0.0", "1.0.0", "1.10.0"]);
    assert_eq!(texts(plugins, "displayName"), ["dev", "Pretty Name", "remote", "tools"]);
    let dev = &plugins[0];
    assert_eq!(dev["root"], fixture.uri("home/.codex/plugins/cache/mkt/dev/local"));
    assert_eq!(dev["files"]["appsConfig"]["contents"], "{\"apps\":[]}\n");
    assert_eq!(dev["remotePluginId"], Value::Null);
    let pretty = &plugins[1];
    assert_eq!(texts(&pretty["skills"], "name"), ["pname:e", "subns:s"]);
    assert_eq!(pretty["skills"][0].get("discoveryRoot"), None);
    assert_eq!(
        pretty["files"]["mcpConfig"],
        json!({"path": fixture.uri(&format!("{dir}/.codex-plugin/plugin.json")),
            "contents": r#"{"zeta":{"url":"http://z"},"alpha":{}}"#})
    );
    let tools = &plugins[3];
    assert_eq!(tools["skills"][0]["name"], "tools:lint");
    assert_eq!(tools["skills"][0]["description"], "lint 1.10.0");
    assert_eq!(tools["files"]["manifest"]["contents"], r#"{"name":"tools","v":"1.10.0"}"#);
    assert_eq!(plugins[2]["remotePluginId"], "plugin-123");
    assert_eq!(found["skills"], json!([]));
    assert_eq!(found["warnings"], json!([METADATA_WARNING]));
}

async fn roots_return_their_skill_and_plugin_files(target: Target) {
    let fixture = Fixture::new("capabilities", target, "roots");
    fixture.write("plug/.codex-plugin/plugin.json", "{\"name\":\"plug\",\"apps\":\"apps.json\"}\n");
    fixture.write("plug/.claude-plugin/plugin.json", "{\"name\":\"second choice\"}\n");
    fixture.write("plug/.mcp.json", "{\"mcpServers\":{}}\n");
    fixture.skill("plug/skills/s1", "name: s1\ndescription: one");
    fixture.write("plug/skills/s1/agents/openai.yaml", "policy: {}\n");
    fixture.write("plug/skills/s2/SKILL.md", "not parsed here");
    fixture.write("plug/nested/.cursor-plugin/plugin.json", "{\"name\":\"nested\"}");
    fixture.write("plug/nested/skills/n/SKILL.md", "n");
    fixture.write("plug/.hidden/SKILL.md", "hidden");
    let (_server, mut client) = fixture.started(target).await;

    let roots = json!({"roots": [
        {"id": "p", "path": fixture.uri("plug")},
        {"id": "inside", "path": fixture.uri("plug/skills"), "sandbox": null},
    ]});
    let found = client.ok("capabilityRoots/discoverV1", roots).await.unwrap();
    let plug = &found["roots"][0];
    assert_eq!((&plug["id"], &plug["path"]), (&json!("p"), &json!(fixture.uri("plug"))));
    let file = |relative: &str, contents: &str| json!({"path": fixture.uri(relative), "contents": contents});
    assert_eq!(
        plug["plugin"],
        json!({"manifest": file("plug/.codex-plugin/plugin.json", "{\"name\":\"plug\",\"apps\":\"apps.json\"}\n"),
            "mcpConfig": file("plug/.mcp.json", "{\"mcpServers\":{}}\n"), "appsConfig": null})
    );
    let instructions: Vec<&str> = plug["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|skill| skill["instructions"]["contents"].as_str().unwrap())
        .collect();
    assert_eq!(
        instructions,
        ["hidden", "n", "---\nname: s1\ndescription: one\n---\nbody\n", "not parsed here"]
    );
    assert_eq!(
        plug["skills"][2]["metadata"],
        file("plug/skills/s1/agents/openai.yaml", "policy: {}\n")
    );
    assert_eq!(plug["skills"][3]["metadata"], Value::Null);
    assert_eq!(
        plug["namespaceManifests"],
        json!([
            file("plug/.codex-plugin/plugin.json", "{\"name\":\"plug\",\"apps\":\"apps.json\"}\n"),
            file("plug/nested/.cursor-plugin/plugin.json", "{\"name\":\"nested\"}")
        ])
    );
    let manifest = fixture.uri("plug/.codex-plugin/plugin.json");
    assert_eq!(
        plug["warnings"],
        json!([format!("ignoring apps in {manifest}: path must start with `./`")])
    );
    assert_eq!(plug["error"], Value::Null);
    // A root inside a plugin is named by the nearest manifest above it.
    let inside = &found["roots"][1];
    assert_eq!((&inside["plugin"], inside["skills"].as_array().unwrap().len()), (&Value::Null, 2));
    assert_eq!(
        inside["namespaceManifests"],
        json!([file(
            "plug/.codex-plugin/plugin.json",
            "{\"name\":\"plug\",\"apps\":\"apps.json\"}\n"
        )])
    );
}

async fn roots_fail_alone_and_files_over_their_limits_are_skipped(target: Target) {
    let fixture = Fixture::new("capabilities", target, "limits");
    fixture.write("big/SKILL.md", vec![b'x'; 1024 * 1024 + 1]);
    fixture.write("big/exact/SKILL.md", vec![b'y'; 1024 * 1024]);
    fixture.write("big/latin1/SKILL.md", b"\xff\xfe caf\xe9");
    fixture.write("file", "x");
    let (_server, mut client) = fixture.started(target).await;

    let roots = json!({"roots": [
        {"id": "big", "path": fixture.uri("big")},
        {"id": "file", "path": fixture.uri("file")},
        {"id": "missing", "path": fixture.uri("missing")},
        {"id": "big", "path": fixture.uri("big")},
    ]});
    let found = client.ok("capabilityRoots/discoverV1", roots).await.unwrap();
    let big = &found["roots"][0];
    assert_eq!(big["skills"].as_array().unwrap().len(), 1);
    assert_eq!(big["skills"][0]["instructions"]["path"], fixture.uri("big/exact/SKILL.md"));
    assert_eq!(
        big["warnings"],
        json!([
            format!(
                "capability file {} exceeds the 1048576-byte limit",
                fixture.uri("big/SKILL.md")
            ),
            format!(
                "capability file {} is not UTF-8: invalid utf-8 sequence of 1 bytes from index 0",
                fixture.uri("big/latin1/SKILL.md")
            ),
        ])
    );
    assert_eq!(found["roots"][3], *big, "duplicate ids are answered each");
    assert_eq!(
        found["roots"][1]["error"],
        format!("capability root {} is not a directory", fixture.uri("file"))
    );
    let missing = &found["roots"][2];
    assert_eq!(
        missing["error"],
        format!(
            "failed to inspect capability root {}: No such file or directory (os error 2)",
            fixture.uri("missing")
        )
    );
    assert_eq!((&missing["skills"], &missing["namespaceManifests"]), (&json!([]), &json!([])));
}

async fn at_most_128_roots_are_scanned(target: Target) {
    let fixture = Fixture::new("capabilities", target, "count");
    let (_server, mut client) = fixture.started(target).await;
    let roots = |n: usize| {
        let root = json!({"id": "r", "path": fixture.uri("none")});
        json!({"roots": vec![root; n]})
    };
    let found = client.ok("capabilityRoots/discoverV1", roots(128)).await.unwrap();
    assert_eq!(found["roots"].as_array().unwrap().len(), 128);
    let error = client.err("capabilityRoots/discoverV1", roots(129)).await.unwrap();
    assert_eq!(
        (error.code, error.message.as_str()),
        (-32600, "capability root discovery accepts at most 128 roots")
    );
    assert_eq!(
        client.ok("capabilityRoots/discoverV1", json!({"roots": []})).await.unwrap(),
        json!({"roots": []})
    );
}

async fn a_root_scan_stops_at_its_traversal_limits(target: Target) {
    let fixture = Fixture::new("capabilities", target, "traversal");
    for level in ["a", "a/b", "a/b/c", "a/b/c/d", "a/b/c/d/e", "a/b/c/d/e/f", "a/b/c/d/e/f/g"] {
        fixture.write(&format!("deep/{level}/SKILL.md"), level);
    }
    for n in 0..2_100 {
        std::fs::create_dir_all(fixture.path(&format!("wide/d{n:04}"))).unwrap();
    }
    fixture.write("wide/SKILL.md", "top");
    fixture.write("wide/d2099/SKILL.md", "beyond the limit");
    let (_server, mut client) = fixture.started(target).await;

    let roots = json!({"roots": [
        {"id": "deep", "path": fixture.uri("deep")},
        {"id": "wide", "path": fixture.uri("wide")},
    ]});
    let found = client.ok("capabilityRoots/discoverV1", roots).await.unwrap();
    let deep: Vec<&str> = found["roots"][0]["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|skill| skill["instructions"]["contents"].as_str().unwrap())
        .collect();
    assert_eq!(deep, ["a", "a/b", "a/b/c", "a/b/c/d", "a/b/c/d/e", "a/b/c/d/e/f"]);
    assert_eq!(found["roots"][0]["warnings"], json!([]));
    let wide = &found["roots"][1];
    assert_eq!(wide["skills"].as_array().unwrap().len(), 1, "{}", wide["skills"]);
    assert_eq!(
        wide["warnings"],
        json!([format!(
            "capability scan reached its traversal limit (root: {})",
            fixture.uri("wide")
        )])
    );
}

async fn a_sandbox_intent_hides_what_it_hides_from_discovery(target: Target) {
    let fixture = Fixture::new("capabilities", target, "sandbox");
    fixture.skill("home/.codex/skills/open", "name: open\ndescription: visible");
    fixture.skill("home/.codex/skills/secret", "name: secret\ndescription: hidden");
    fixture.skill("root/visible", "name: v\ndescription: v");
    fixture.skill("root/secret", "name: s\ndescription: s");
    let (_server, mut client) = fixture.started(target).await;
    let intent = json!({
        "permissions": {"type": "managed", "network": "restricted", "file_system": {"type": "restricted",
            "entries": [
                {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
                {"path": {"type": "path", "path": fixture.uri("home/.codex/skills/secret")}, "access": "none"},
                {"path": {"type": "path", "path": fixture.uri("root/secret")}, "access": "none"},
            ]}},
        "cwd": fixture.uri(""),
        "windowsSandboxLevel": "disabled",
    });

    let found = client
        .ok("capabilities/discoverV2", json!({"cwd": fixture.uri(""), "sandbox": intent}))
        .await
        .unwrap();
    assert_eq!(texts(&found["skills"], "name"), ["open"], "{found}");
    assert_eq!(found["warnings"], json!([METADATA_WARNING]));
    let roots = json!({"roots": [{"id": "r", "path": fixture.uri("root"), "sandbox": intent}]});
    let found = client.ok("capabilityRoots/discoverV1", roots).await.unwrap();
    let root = &found["roots"][0];
    assert_eq!(root["skills"].as_array().unwrap().len(), 1, "{root}");
    assert_eq!(root["skills"][0]["instructions"]["path"], fixture.uri("root/visible/SKILL.md"));
    assert_eq!(
        root["warnings"],
        json!([format!(
            "failed to scan capability path {}: Permission denied (os error 13)",
            fixture.uri("root/secret")
        )])
    );
}

/// Tether keeps the inventory between calls (an unchanged one is answered at once, on the
/// connection's thread), and any change below a location is seen by the very next call. (The reference keeps answering with the first text it read of an edited
/// `SKILL.md`, so this is Tether's alone.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installs_edits_and_removals_are_seen_by_the_next_discovery() {
    let fixture = Fixture::new("capabilities", Target::Tether, "live");
    fixture.skill("home/.codex/skills/kept", "name: kept\ndescription: kept");
    let (_server, mut client) = fixture.started(Target::Tether).await;
    let descriptions = |found: &Value| texts(&found["skills"], "description");

    assert_eq!(descriptions(&fixture.installed(&mut client).await), ["kept"]);
    // Unchanged: the kept answer, sent at once; then a change is seen all the same.
    assert_eq!(descriptions(&fixture.installed(&mut client).await), ["kept"]);
    fixture.skill("home/.codex/skills/new", "name: new\ndescription: one");
    assert_eq!(descriptions(&fixture.installed(&mut client).await), ["kept", "one"]);
    fixture.skill("home/.codex/skills/new", "name: new\ndescription: two");
    assert_eq!(descriptions(&fixture.installed(&mut client).await), ["kept", "two"]);
    fixture.write("home/.codex/skills/new/agents/openai.yaml", "policy:\n  products: [atlas]\n");
    let found = fixture.installed(&mut client).await;
    assert_eq!(found["skills"][1]["policy"]["products"], json!(["atlas"]));
    std::fs::remove_dir_all(fixture.path("home/.codex/skills/new")).unwrap();
    assert_eq!(descriptions(&fixture.installed(&mut client).await), ["kept"]);
    fixture.cached_plugin("mkt", "late", "1.0.0", r#"{"name":"late"}"#);
    assert_eq!(texts(&fixture.installed(&mut client).await["plugins"], "id"), ["late@mkt"]);
}
