//! `shellSnapshot` on `process/start` (spec: `codex-capabilities.md` §6) against Tether and
//! the reference: the executor user's `~/.bashrc` (in a home this test writes) reaches a
//! `bash -lc` command as Codex sends it, unsandboxed and under a workspace-write intent.

use std::path::PathBuf;

use serde_json::{Value, json};
use tether_testkit::client::b64decode;
use tether_testkit::{RpcClient, ServerProcess, Target, against_both};

against_both!(
    the_capability_is_advertised,
    a_bashrc_reaches_the_command_and_the_request_env_wins,
    the_snapshot_is_restored_inside_a_sandbox,
    malformed_snapshot_requests_are_refused,
    other_command_shapes_run_as_sent,
    a_startup_file_that_exits_leaves_the_command_unchanged,
);

/// A home with a `.bashrc`, removed when dropped.
struct Home {
    root: PathBuf,
}

impl Home {
    fn new(target: Target, name: &str, bashrc: &str) -> Self {
        let root = PathBuf::from(format!(
            "/var/tmp/tether-snapshot-{}-{target:?}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("home/.codex")).unwrap();
        std::fs::create_dir_all(root.join("work")).unwrap();
        std::fs::write(root.join("home/.bashrc"), bashrc).unwrap();
        Self { root }
    }

    fn home(&self) -> String {
        self.root.join("home").display().to_string()
    }

    fn work_uri(&self) -> String {
        format!("file://{}", self.root.join("work").display())
    }

    async fn started(&self, target: Target) -> (ServerProcess, RpcClient) {
        let home = self.home();
        let codex_home = format!("{home}/.codex");
        let env = [("HOME", home.as_str()), ("CODEX_HOME", codex_home.as_str())];
        let server = ServerProcess::start_with_env(target, &[], &env).await.unwrap();
        let (client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
        (server, client)
    }

    /// A start as Codex sends it with `shell_snapshot_v2`.
    fn start(&self, id: &str, script: &str, env: Value) -> Value {
        let mut env_map = json!({"PATH": "/usr/bin:/bin", "HOME": self.home()});
        env_map.as_object_mut().unwrap().extend(env.as_object().unwrap().clone());
        json!({
            "processId": id,
            "argv": ["/bin/bash", "-lc", script],
            "cwd": self.work_uri(),
            "env": env_map,
            "tty": false,
            "shellSnapshot": {"scopeId": "thread-1:local", "shell": {"name": "bash", "path": "/bin/bash"}},
        })
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

const BASHRC: &str = "rcfn() { echo \"rcfn says $1\"; }\nexport RC_EXPORT=from_rc\n\
                      export RC_ONLY=rc_only\nalias ll='echo aliased'\nshopt -s expand_aliases\n\
                      RC_PLAIN=plain\nset -o noclobber\n";

/// A process's stdout and stderr, and its exit code.
async fn run(client: &mut RpcClient, params: Value) -> (String, String, i64) {
    let id = params["processId"].as_str().unwrap().to_owned();
    client.ok("process/start", params).await.unwrap();
    let events = client.process_events(&id).await.unwrap();
    let stream = |name: &str| -> String {
        events
            .iter()
            .filter(|e| e["method"] == "process/output" && e["params"]["stream"] == name)
            .map(|e| String::from_utf8(b64decode(&e["params"]["chunk"])).unwrap())
            .collect()
    };
    let code = events
        .iter()
        .find(|e| e["method"] == "process/exited")
        .and_then(|e| e["params"]["exitCode"].as_i64())
        .unwrap();
    (stream("stdout"), stream("stderr"), code)
}

// ---------------------------------------------------------------------------------------------

async fn the_capability_is_advertised(target: Target) {
    let server = ServerProcess::start(target).await.unwrap();
    let (_client, init) = RpcClient::connect_initialized(&server.url).await.unwrap();
    assert_eq!(init["environmentInfo"]["capabilities"]["shellSnapshotV2"], true, "{init}");
}

async fn a_bashrc_reaches_the_command_and_the_request_env_wins(target: Target) {
    let home = Home::new(target, "bashrc", BASHRC);
    let (_server, mut client) = home.started(target).await;
    let script = "rcfn hi; echo E=$RC_EXPORT O=$RC_ONLY P=$RC_PLAIN; ll; \
                  set -o | grep -q 'noclobber.*on' && echo noclobber; env | grep -c SNAPSHOT";
    let (out, err, _) =
        run(&mut client, home.start("p1", script, json!({"RC_EXPORT": "from_request"}))).await;
    // Functions, aliases, options and exports; not unexported variables; no trace of the
    // transport in the command's environment.
    assert_eq!(out, "rcfn says hi\nE=from_request O=rc_only P=\naliased\nnoclobber\n0\n", "{err}");
    // The snapshot is reused by the scope's next command.
    let (out, _, code) = run(&mut client, home.start("p2", "rcfn again", json!({}))).await;
    assert_eq!((out.as_str(), code), ("rcfn says again\n", 0));
    // Without the field, a plain login shell: no `.bashrc`.
    let mut plain = home.start("p3", "rcfn", json!({}));
    plain.as_object_mut().unwrap().remove("shellSnapshot");
    let (_, err, code) = run(&mut client, plain).await;
    assert_eq!(code, 127, "{err}");
}

async fn the_snapshot_is_restored_inside_a_sandbox(target: Target) {
    let home = Home::new(target, "sandbox", BASHRC);
    let (_server, mut client) = home.started(target).await;
    let mut params =
        home.start("p", "rcfn boxed; echo E=$RC_EXPORT; touch $HOME/../outside", json!({}));
    params["sandbox"] = json!({
        "permissions": {"type": "managed", "network": "restricted", "file_system": {"type": "restricted",
            "entries": [
                {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
                {"path": {"type": "path", "path": home.work_uri()}, "access": "write"},
            ]}},
        "windowsSandboxLevel": "disabled",
    });
    let (out, err, code) = run(&mut client, params).await;
    assert_eq!(out, "rcfn says boxed\nE=from_rc\n", "{err}");
    assert!(err.contains("Read-only file system"), "{err}");
    assert_eq!(code, 1);
}

async fn malformed_snapshot_requests_are_refused(target: Target) {
    let home = Home::new(target, "malformed", BASHRC);
    let (_server, mut client) = home.started(target).await;
    let cases = [
        (json!({"shell": {"name": "bash", "path": "/bin/bash"}}), "missing field `scopeId`"),
        (json!({"scopeId": "s", "shell": {"path": "/bin/bash"}}), "missing field `name`"),
        (
            json!({"scopeId": "", "shell": {"name": "bash", "path": "/bin/bash"}}),
            "shell snapshot scope must be non-empty and at most 256 bytes",
        ),
        (
            json!({"scopeId": "s".repeat(257), "shell": {"name": "bash", "path": "/bin/bash"}}),
            "shell snapshot scope must be non-empty and at most 256 bytes",
        ),
        (
            json!({"scopeId": "s", "shell": {"name": "fish", "path": "/bin/bash"}}),
            "shell snapshots are unsupported for shell `fish`",
        ),
    ];
    for (snapshot, message) in cases {
        let mut params = home.start("bad", "true", json!({}));
        params["shellSnapshot"] = snapshot.clone();
        let error = client.err("process/start", params).await.unwrap();
        assert_eq!((error.code, error.message.as_str()), (-32602, message), "{snapshot}");
    }
}

async fn other_command_shapes_run_as_sent(target: Target) {
    let home = Home::new(target, "shapes", BASHRC);
    let (_server, mut client) = home.started(target).await;
    // A program that is not the snapshot's shell: not rewritten, whatever the shell name.
    let mut params = home.start("a", "echo $0; type rcfn >/dev/null 2>&1 || echo none", json!({}));
    params["argv"][0] = json!("bash");
    params["shellSnapshot"]["shell"]["name"] = json!("fish");
    let (out, _, _) = run(&mut client, params).await;
    assert_eq!(out, "bash\nnone\n");
    // `-c` instead of `-lc`: as sent.
    let mut params = home.start("b", "type rcfn >/dev/null 2>&1 || echo none", json!({}));
    params["argv"][1] = json!("-c");
    assert_eq!(run(&mut client, params).await.0, "none\n");
    // Arguments after the script keep their places.
    let mut params = home.start("c", "rcfn \"$1\"", json!({}));
    params["argv"] = json!(["/bin/bash", "-lc", "rcfn \"$0:$1\"", "zero", "one"]);
    assert_eq!(run(&mut client, params).await.0, "rcfn says zero:one\n");
}

async fn a_startup_file_that_exits_leaves_the_command_unchanged(target: Target) {
    let home = Home::new(target, "exits", "rcfn() { echo never; }\nexit 3\n");
    let (_server, mut client) = home.started(target).await;
    let (out, _, code) =
        run(&mut client, home.start("p", "type rcfn >/dev/null 2>&1 || echo plain", json!({})))
            .await;
    assert_eq!((out.as_str(), code), ("plain\n", 0));
}

/// A startup file may define functions named like the builtins a capture uses; Tether's
/// capture calls the builtins themselves. (The reference's capture fails on this one, and its
/// commands then run without the user's state.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_startup_file_that_shadows_builtins_is_still_captured() {
    let target = Target::Tether;
    let bashrc = format!("{BASHRC}printf() {{ echo hijacked; }}\ndeclare() {{ :; }}\necho noise\n");
    let home = Home::new(target, "shadow", &bashrc);
    let (_server, mut client) = home.started(target).await;
    let (out, err, _) =
        run(&mut client, home.start("p", "rcfn ok; echo $RC_ONLY", json!({}))).await;
    assert_eq!(out, "rcfn says ok\nrc_only\n", "{err}");
}
