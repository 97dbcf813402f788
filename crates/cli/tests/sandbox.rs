//! The `sandbox` intent over the wire, as Codex 0.169 sends it (spec: `sandbox.md`), each
//! scenario run against Tether and against the reference.
//!
//! What is covered:
//! * decoding: which intents `process/start` and `fs/writeFile` refuse, with serde's wording,
//!   and which additions they accept and ignore;
//! * the answers that do not depend on enforcement: `sandboxType` and the `sandboxDenied`
//!   heuristic;
//! * what a sandboxed command observes under Codex's two intents (read-only and
//!   workspace-write): the filesystem, the protected names (`.git`, …) and their synthetic
//!   directories on the host, pid and network isolation, escape attempts, ttys, stdin, signals
//!   and the failures of the sandbox itself;
//! * `fs/*` writes and reads under an intent;
//! * the Codex app-server's socket directory, hidden from every full sandbox.
//!
//! Every scenario works in directories of its own under `/var/tmp`, not `/tmp`: the
//! workspace-write intent also grants `/tmp`, which would hide the difference between a Root and
//! the rest of the filesystem. The reference's exact texts (shell, coreutils and kernel messages)
//! are asserted where they are stable, and their stable part where they hold a pid.
//!
//! Two things about the reference that shape this file:
//! * it cannot sandbox anything when its `CODEX_HOME` is under the temp dir (see [`started`]);
//! * its synthetic `.git`, `.agents`, `.codex` and `.aws` dirs in a Root that several sandboxes
//!   share (`/tmp`) are sometimes left behind when sandboxed `fs/*` requests of different servers
//!   overlap. No scenario looks at `/tmp`'s protected names for that reason; each looks at a
//!   project root of its own.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tether_testkit::client::{b64encode, output_of};
use tether_testkit::{RpcClient, RpcError, ServerProcess, Target, against_both};

mod common;
use common::text;

against_both!(
    transparent_tcp_launches_are_refused_as_the_reference_refuses_them,
    malformed_intents_are_refused_on_process_start,
    malformed_intents_are_refused_on_fs_write_file,
    ignored_additions_are_accepted_on_process_start,
    ignored_additions_are_accepted_on_fs_write_file,
    every_non_null_intent_reports_linux_seccomp,
    read_only_refuses_writes_and_allows_reads,
    a_sandboxed_command_is_pid_2_and_its_leftovers_die_with_it,
    workspace_write_grants_the_project_root_tmpdir_and_tmp,
    read_only_grants_neither_tmpdir_nor_tmp,
    an_existing_git_dir_is_read_only,
    missing_protected_names_are_empty_read_only_dirs_while_the_child_runs,
    synthetic_dirs_after_terminate,
    restricted_network_leaves_loopback_only_and_no_sockets,
    escapes_from_a_writable_root_are_refused,
    a_sandboxed_tty_is_the_console,
    stdin_can_be_piped_into_a_sandboxed_process,
    terminate_under_a_sandbox_reports_137_or_1_with_a_tty,
    interrupt_under_a_sandbox_reaches_the_command_on_tether_only,
    sandbox_denied_follows_the_exit_code_and_output_heuristic,
    a_missing_binary_inside_the_sandbox_exits_101,
    a_root_named_through_a_link_is_the_directory_it_leads_to,
    a_root_a_sandboxed_command_replaced_with_a_link_is_refused,
    a_project_root_of_slash_makes_everything_writable_but_its_protected_names,
    a_writable_root_keeps_standard_devices_and_every_restriction,
    a_write_grant_on_a_file_makes_that_file_writable,
    concurrent_sandboxes_keep_the_protected_names_and_leave_nothing_behind,
    a_command_that_cannot_be_executed_exits_101_under_every_intent,
    a_missing_cwd_fails_a_sandboxed_start,
    fs_writes_under_workspace_write_are_confined_to_the_roots,
    fs_writes_to_protected_names_are_refused,
    fs_writes_under_read_only_are_refused,
    fs_writes_below_a_root_see_the_host_as_the_sandbox_shows_it,
    fs_reads_of_a_none_entry_are_denied,
    fs_open_under_a_sandbox_reads_and_writes_what_it_allows,
    fs_without_root_read_sees_the_roots_and_the_platform_only,
    a_minimal_intent_runs_on_the_platform_and_the_roots,
    a_missing_none_path_cannot_be_created,
    an_unsandboxed_process_after_a_sandboxed_one_writes_anywhere,
    the_app_server_socket_dir_is_masked_in_every_full_sandbox,
    a_foreign_app_server_socket_dir_refuses_every_full_sandbox,
    none_globs_hide_the_regular_files_found_from_their_directory,
    none_globs_that_would_search_everything_are_refused,
    grants_below_a_hidden_directory,
    a_protected_name_the_intent_makes_writable_is_writable,
    a_nul_byte_in_the_environment_is_refused_under_an_intent,
    a_host_process_is_seen_and_signalled_only_in_the_host_pid_namespace,
);

const EROFS: &str = "Read-only file system (os error 30)";
const ENOENT: &str = "No such file or directory (os error 2)";
const EEXIST: &str = "File exists (os error 17)";
const EACCES: &str = "Permission denied (os error 13)";
const INVALID_URI: &str = "invalid URI: relative URL without a base";

/// The names protected inside every writable Root, in the order Codex lists them.
const PROTECTED_NAMES: [&str; 4] = [".git", ".agents", ".codex", ".aws"];

// ---------------------------------------------------------------------------------------------
// Intents, built exactly as Codex 0.169 sends them (sandbox.md §1)

/// A `special` path entry without a subpath.
fn special(kind: &str, access: &str) -> Value {
    json!({"path": {"type": "special", "value": {"kind": kind}}, "access": access})
}

/// A protected name below every project root: readable, skipped when missing.
fn protected(subpath: &str) -> Value {
    json!({"path": {"type": "special", "value": {"kind": "project_roots", "subpath": subpath}},
        "access": "read", "missing_path_behavior": "skip"})
}

/// `-s read-only`: read everything, write nothing.
fn read_only_entries() -> Vec<Value> {
    vec![special("root", "read")]
}

/// `-s workspace-write`: the project roots, `/tmp` and `$TMPDIR` writable, minus the protected
/// names.
fn workspace_write_entries() -> Vec<Value> {
    let mut entries = vec![
        special("root", "read"),
        special("project_roots", "write"),
        special("slash_tmp", "write"),
        special("tmpdir", "write"),
    ];
    entries.extend(PROTECTED_NAMES.map(protected));
    entries
}

/// A managed, restricted filesystem with the network restricted.
fn restricted(entries: Vec<Value>) -> Value {
    json!({"type": "managed", "file_system": {"type": "restricted", "entries": entries},
        "network": "restricted"})
}

/// The intent's shape on `process/start`: no `policyContext`, no `userHomeDir`.
fn process_intent(entries: Vec<Value>, cwd: &HostDir) -> Value {
    json!({
        "permissions": restricted(entries),
        "cwd": cwd.uri(""),
        "workspaceRoots": [cwd.uri("")],
        "windowsSandboxLevel": "disabled",
        "windowsSandboxProxySettingsMode": "reconcile",
        "useLegacyLandlock": false,
    })
}

/// The intent's shape on `fs/writeFile`, `fs/createDirectory` and `fs/remove`.
fn fs_intent(entries: Vec<Value>, cwd: &HostDir) -> Value {
    json!({
        "permissions": restricted(entries),
        "cwd": cwd.uri(""),
        "workspaceRoots": [cwd.uri("")],
        "policyContext": {"cwd": cwd.uri(""), "workspaceRoots": [cwd.uri("")]},
        "userHomeDir": "file:///root",
        "windowsSandboxLevel": "disabled",
        "useLegacyLandlock": false,
    })
}

fn disabled_intent() -> Value {
    json!({"permissions": {"type": "disabled"}, "windowsSandboxLevel": "disabled"})
}

fn external_intent() -> Value {
    json!({"permissions": {"type": "external", "network": "restricted"},
        "windowsSandboxLevel": "disabled"})
}

/// A copy of `intent` changed by `edit`.
fn edited(intent: &Value, edit: impl FnOnce(&mut Value)) -> Value {
    let mut intent = intent.clone();
    edit(&mut intent);
    intent
}

fn remove_key(object: &mut Value, key: &str) {
    object.as_object_mut().unwrap().remove(key);
}

fn entries_of(intent: &mut Value) -> &mut Vec<Value> {
    intent["permissions"]["file_system"]["entries"].as_array_mut().unwrap()
}

/// `process/start` params for `/bin/sh -c script` in `cwd`, with what Codex sends beside a
/// sandbox.
fn sandboxed(id: &str, script: &str, cwd: &HostDir, sandbox: Value) -> Value {
    json!({
        "processId": id,
        "argv": ["/bin/sh", "-c", script],
        "cwd": cwd.uri(""),
        "env": {"PATH": "/usr/bin:/bin", "CODEX_SANDBOX_NETWORK_DISABLED": "1"},
        "tty": false,
        "sandbox": sandbox,
        "enforceManagedNetwork": false,
        "managedNetwork": null,
    })
}

// ---------------------------------------------------------------------------------------------
// Host directories and running processes

/// A fresh directory under `/var/tmp`, removed with everything in it when dropped.
struct HostDir {
    path: PathBuf,
}

impl HostDir {
    fn new(target: Target, name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let unique = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = PathBuf::from(format!(
            "/var/tmp/tether-sandbox-{}-{unique}-{target:?}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).unwrap();
        Self { path: std::fs::canonicalize(path).unwrap() }
    }

    fn path(&self, relative: &str) -> PathBuf {
        if relative.is_empty() { self.path.clone() } else { self.path.join(relative) }
    }

    /// The path as a string, for scripts.
    fn display(&self, relative: &str) -> String {
        self.path(relative).display().to_string()
    }

    /// The URI a client sends for `relative` (the scenarios' names need no escaping).
    fn uri(&self, relative: &str) -> String {
        format!("file://{}", self.display(relative))
    }

    fn file(&self, relative: &str, contents: &str) {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }

    fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.path(relative)).unwrap()
    }

    fn exists(&self, relative: &str) -> bool {
        std::fs::symlink_metadata(self.path(relative)).is_ok()
    }

    /// The names directly inside, as the host sees them.
    fn names(&self) -> BTreeSet<String> {
        std::fs::read_dir(&self.path)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect()
    }

    /// Whether `relative` is an empty directory on the host.
    fn is_empty_dir(&self, relative: &str) -> bool {
        std::fs::read_dir(self.path(relative)).is_ok_and(|mut entries| entries.next().is_none())
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A file in the host's `/tmp` a scenario may create through the sandbox, removed when dropped.
struct SlashTmpFile {
    path: PathBuf,
}

impl SlashTmpFile {
    fn new(target: Target, name: &str) -> Self {
        let path =
            PathBuf::from(format!("/tmp/tether-sandbox-{}-{target:?}-{name}", std::process::id()));
        Self { path }
    }

    fn display(&self) -> String {
        self.path.display().to_string()
    }
}

impl Drop for SlashTmpFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A server under test and the `CODEX_HOME` it was given, removed after the server stops.
struct Server {
    _process: ServerProcess,
    _home: HostDir,
}

/// Starts `target` with a `CODEX_HOME` outside `/tmp`. The reference refuses to create its
/// `codex-linux-sandbox` alias under the temp dir (the testkit's default home is there), and then
/// every sandboxed command fails with `bwrap: execvp codex-linux-sandbox: No such file or
/// directory`.
async fn started(target: Target) -> (Server, RpcClient) {
    started_with(target, &[]).await
}

/// [`started`], with `args` added to the server's command line.
async fn started_with(target: Target, args: &[&str]) -> (Server, RpcClient) {
    let home = HostDir::new(target, "codex-home");
    let env = [("CODEX_HOME", home.display(""))];
    let env: Vec<(&str, &str)> = env.iter().map(|(key, value)| (*key, value.as_str())).collect();
    let process = ServerProcess::start_with_env(target, args, &env).await.unwrap();
    let (client, _) = RpcClient::connect_initialized(&process.url).await.unwrap();
    (Server { _process: process, _home: home }, client)
}

/// What a finished process left on the wire.
#[derive(Debug)]
struct Finished {
    stdout: String,
    stderr: String,
    pty: String,
    exit_code: i64,
    sandbox_denied: bool,
}

/// Waits for `id` to close; checks that `process/read` agrees with `process/exited` on
/// `sandboxDenied`.
async fn finish(client: &mut RpcClient, id: &str) -> Finished {
    let events = client.process_events(id).await.unwrap();
    let exited: Vec<&Value> = events.iter().filter(|e| e["method"] == "process/exited").collect();
    assert_eq!(exited.len(), 1, "exactly one exit: {events:?}");
    let stream = |name| String::from_utf8_lossy(&output_of(&events, name)).into_owned();
    let finished = Finished {
        stdout: stream("stdout"),
        stderr: stream("stderr"),
        pty: stream("pty"),
        exit_code: exited[0]["params"]["exitCode"].as_i64().unwrap(),
        sandbox_denied: exited[0]["params"]["sandboxDenied"].as_bool().unwrap(),
    };
    let read = client.ok("process/read", json!({"processId": id})).await.unwrap();
    assert_eq!(read["sandboxDenied"], finished.sandbox_denied, "process/read agrees: {read}");
    finished
}

/// Starts a process (the start must succeed, sandboxed) and waits for it to finish.
async fn run(client: &mut RpcClient, params: Value) -> Finished {
    let id = params["processId"].as_str().unwrap().to_owned();
    let result = client.ok("process/start", params).await.unwrap();
    assert_eq!(result, json!({"processId": id, "sandboxType": "linuxSeccomp"}));
    finish(client, &id).await
}

/// Long-polls `process/read` until the output of `id` contains `needle`; returns the output so
/// far.
async fn wait_for_output(client: &mut RpcClient, id: &str, needle: &str) -> String {
    let mut seen = String::new();
    let mut after_seq = 0;
    loop {
        let read = client
            .ok("process/read", json!({"processId": id, "afterSeq": after_seq, "waitMs": 10000}))
            .await
            .unwrap();
        seen.push_str(&text(&read["chunks"]));
        if seen.contains(needle) {
            return seen;
        }
        assert_ne!(read["closed"], true, "{id} closed before printing {needle:?}: {seen:?}");
        after_seq = read["nextSeq"].as_u64().unwrap() - 1;
    }
}

async fn write_stdin(client: &mut RpcClient, id: &str, bytes: &[u8]) {
    let write = json!({"processId": id, "chunk": b64encode(bytes), "writeId": "1"});
    let result = client.ok("process/write", write).await.unwrap();
    assert_eq!(result, json!({"status": "accepted"}));
}

#[track_caller]
fn assert_error(error: RpcError, code: i64, message: &str) {
    assert_eq!((error.code, error.message.as_str()), (code, message));
}

#[track_caller]
fn assert_contains(haystack: &str, needle: &str) {
    assert!(haystack.contains(needle), "{needle:?} not in {haystack:?}");
}

// ---------------------------------------------------------------------------------------------
// 1. Decoding (sandbox.md §2)

/// Intents both shapes refuse with `-32602` and serde's own wording, as `(what, intent,
/// message)`.
fn malformed_intents(base: &Value) -> Vec<(&'static str, Value, &'static str)> {
    let plain_entry = json!({"path": {"type": "path", "path": "/abs/plain"}, "access": "write"});
    vec![
        (
            "a string",
            json!("X"),
            "invalid type: string \"X\", expected struct WireFileSystemSandboxContext",
        ),
        ("an empty object", json!({}), "missing field `permissions`"),
        (
            "no permissions",
            edited(base, |i| remove_key(i, "permissions")),
            "missing field `permissions`",
        ),
        (
            "no windowsSandboxLevel",
            edited(base, |i| remove_key(i, "windowsSandboxLevel")),
            "missing field `windowsSandboxLevel`",
        ),
        (
            "an unknown windowsSandboxLevel",
            edited(base, |i| i["windowsSandboxLevel"] = json!("bogus")),
            "unknown variant `bogus`, expected one of `disabled`, `restricted-token`, `elevated`, `mxc`",
        ),
        (
            "an unknown permissions type",
            edited(base, |i| i["permissions"]["type"] = json!("bogus")),
            "unknown variant `bogus`, expected one of `managed`, `disabled`, `external`",
        ),
        (
            "managed without network",
            edited(base, |i| remove_key(&mut i["permissions"], "network")),
            "missing field `network`",
        ),
        (
            "managed without file_system",
            edited(base, |i| remove_key(&mut i["permissions"], "file_system")),
            "missing field `file_system`",
        ),
        (
            "an unknown network",
            edited(base, |i| i["permissions"]["network"] = json!("bogus")),
            "unknown variant `bogus`, expected `restricted` or `enabled`",
        ),
        (
            "an unknown access",
            edited(base, |i| entries_of(i)[0]["access"] = json!("rw")),
            "unknown variant `rw`, expected one of `read`, `write`, `deny`, `none`",
        ),
        (
            "an unknown missing_path_behavior",
            edited(base, |i| entries_of(i)[0]["missing_path_behavior"] = json!("x")),
            "unknown variant `x`, expected `skip`",
        ),
        (
            "an unknown special kind",
            edited(base, |i| entries_of(i)[0]["path"]["value"]["kind"] = json!("future_thing")),
            "unknown variant `future_thing`, expected one of `root`, `minimal`, \
             `current_working_directory`, `project_roots`, `tmpdir`, `slash_tmp`, `unknown`",
        ),
        (
            "a special path without value",
            edited(base, |i| remove_key(&mut entries_of(i)[0]["path"], "value")),
            "missing field `value`",
        ),
        ("a plain path entry", edited(base, |i| entries_of(i).push(plain_entry)), INVALID_URI),
        (
            "a plain workspace root",
            edited(base, |i| i["workspaceRoots"] = json!(["/abs/plain"])),
            INVALID_URI,
        ),
        ("a plain cwd", edited(base, |i| i["cwd"] = json!("/abs/plain")), INVALID_URI),
        (
            "a plain temporary directory",
            edited(base, |i| i["temporaryDirectories"] = json!(["/abs/plain"])),
            INVALID_URI,
        ),
        // Not ignored, as sandbox.md says: the value is decoded, on both shapes.
        (
            "an unknown windowsSandboxProxySettingsMode",
            edited(base, |i| i["windowsSandboxProxySettingsMode"] = json!("bogus")),
            "unknown variant `bogus`, expected `reconcile` or `preserve`",
        ),
    ]
}

/// A `path` entry with a Windows URI, which decodes but names no Linux path.
fn with_windows_path(base: &Value) -> Value {
    let entry = json!({"path": {"type": "path", "path": "file:///C:/x"}, "access": "write"});
    edited(base, |i| entries_of(i).push(entry))
}

/// Additions the reference accepts and ignores on Linux, as `(what, intent)`.
fn ignored_additions(base: &Value, root: &HostDir) -> Vec<(&'static str, Value)> {
    let unknown_kind = json!({"path": {"type": "special",
        "value": {"kind": "unknown", "path": root.display("")}}, "access": "write"});
    vec![
        (
            "unknown fields at every level",
            edited(base, |i| {
                i["futureField"] = json!(1);
                i["permissions"]["futurePermission"] = json!(2);
                i["permissions"]["file_system"]["futureFileSystem"] = json!(3);
                entries_of(i)[0]["futureEntry"] = json!(4);
            }),
        ),
        (
            "temporaryDirectories",
            edited(base, |i| i["temporaryDirectories"] = json!([root.uri("")])),
        ),
        ("the special kind unknown", edited(base, |i| entries_of(i).push(unknown_kind))),
        (
            "windowsSandboxLevel restricted-token",
            edited(base, |i| i["windowsSandboxLevel"] = json!("restricted-token")),
        ),
        (
            "windowsSandboxLevel elevated",
            edited(base, |i| i["windowsSandboxLevel"] = json!("elevated")),
        ),
        (
            "windowsSandboxProxySettingsMode preserve",
            edited(base, |i| i["windowsSandboxProxySettingsMode"] = json!("preserve")),
        ),
        ("another userHomeDir", edited(base, |i| i["userHomeDir"] = json!("file:///nowhere"))),
    ]
}

async fn malformed_intents_are_refused_on_process_start(target: Target) {
    let root = HostDir::new(target, "decode-start");
    let (_server, mut client) = started(target).await;
    let base = process_intent(read_only_entries(), &root);
    let mut cases: Vec<(&str, Value, i64, &str)> = malformed_intents(&base)
        .into_iter()
        .map(|(what, intent, message)| (what, intent, -32602, message))
        .collect();
    cases.push((
        "a Windows path entry",
        with_windows_path(&base),
        -32602,
        "failed to prepare process sandbox: invalid sandbox permission path: 'file:///C:/x' is \
         invalid on 'linux'",
    ));
    // sandbox.md says any valid level is ignored; `mxc` is refused.
    cases.push((
        "windowsSandboxLevel mxc",
        edited(&base, |i| i["windowsSandboxLevel"] = json!("mxc")),
        -32602,
        "native MXC is unavailable on this executor",
    ));

    for (n, (what, intent, code, message)) in cases.into_iter().enumerate() {
        let params = sandboxed(&format!("p{n}"), "touch started", &root, intent);
        let error = client.err("process/start", params).await.unwrap();
        assert_eq!((error.code, error.message.as_str()), (code, message), "{what}");
    }
    assert!(!root.exists("started"), "no refused start ran its command");
}

async fn malformed_intents_are_refused_on_fs_write_file(target: Target) {
    let root = HostDir::new(target, "decode-fs");
    let (_server, mut client) = started(target).await;
    let base = fs_intent(workspace_write_entries(), &root);
    let mut cases: Vec<(&str, Value, i64, &str)> = malformed_intents(&base)
        .into_iter()
        .map(|(what, intent, message)| (what, intent, -32602, message))
        .collect();
    for (what, intent) in [
        ("a plain policyContext cwd", edited(&base, |i| i["policyContext"]["cwd"] = json!("/abs"))),
        (
            "a plain policyContext workspace root",
            edited(&base, |i| i["policyContext"]["workspaceRoots"] = json!(["/abs"])),
        ),
        ("a plain userHomeDir", edited(&base, |i| i["userHomeDir"] = json!("/root"))),
    ] {
        cases.push((what, intent, -32602, INVALID_URI));
    }
    // Unlike process/start, fs/* answers these two with -32600 and other words.
    cases.push((
        "a Windows path entry",
        with_windows_path(&base),
        -32600,
        "invalid sandbox permission path URI: 'file:///C:/x' is invalid on 'linux'",
    ));
    cases.push((
        "windowsSandboxLevel mxc",
        edited(&base, |i| i["windowsSandboxLevel"] = json!("mxc")),
        -32600,
        "failed to prepare fs sandbox: failed to prepare MXC sandbox: native MXC is unavailable \
         on this executor",
    ));

    for (what, intent, code, message) in cases {
        let params = json!({"path": root.uri("written"), "dataBase64": "eA==", "sandbox": intent});
        let error = client.err("fs/writeFile", params).await.unwrap();
        assert_eq!((error.code, error.message.as_str()), (code, message), "{what}");
    }
    assert!(!root.exists("written"), "no refused write wrote");
}

async fn ignored_additions_are_accepted_on_process_start(target: Target) {
    let root = HostDir::new(target, "ignored-start");
    let (_server, mut client) = started(target).await;
    let base = process_intent(read_only_entries(), &root);
    for (n, (what, intent)) in ignored_additions(&base, &root).into_iter().enumerate() {
        // Still read-only: neither temporaryDirectories nor the kind `unknown` grants a write.
        let params = sandboxed(&format!("p{n}"), "echo ran; touch probe", &root, intent);
        let finished = run(&mut client, params).await;
        assert_eq!(finished.stdout, "ran\n", "{what}");
        assert_contains(&finished.stderr, "touch: cannot touch 'probe': Read-only file system");
        assert_eq!(finished.exit_code, 1, "{what}");
    }
    assert!(!root.exists("probe"));
}

async fn ignored_additions_are_accepted_on_fs_write_file(target: Target) {
    let root = HostDir::new(target, "ignored-fs");
    let (_server, mut client) = started(target).await;
    let base = fs_intent(workspace_write_entries(), &root);
    for (n, (what, intent)) in ignored_additions(&base, &root).into_iter().enumerate() {
        let name = format!("file{n}");
        let params = json!({"path": root.uri(&name), "dataBase64": "eA==", "sandbox": intent});
        assert_eq!(client.ok("fs/writeFile", params).await.unwrap(), json!({}), "{what}");
        assert_eq!(root.read(&name), "x", "{what}");
    }
}

// ---------------------------------------------------------------------------------------------
// 2. sandboxType (sandbox.md §3)

async fn every_non_null_intent_reports_linux_seccomp(target: Target) {
    let root = HostDir::new(target, "type");
    let (_server, mut client) = started(target).await;
    for (id, intent, sandbox_type) in [
        ("read-only", process_intent(read_only_entries(), &root), "linuxSeccomp"),
        ("workspace-write", process_intent(workspace_write_entries(), &root), "linuxSeccomp"),
        ("disabled", disabled_intent(), "linuxSeccomp"),
        ("external", external_intent(), "linuxSeccomp"),
        ("null", Value::Null, "none"),
    ] {
        let result = client.ok("process/start", sandboxed(id, "echo ran", &root, intent)).await;
        assert_eq!(result.unwrap(), json!({"processId": id, "sandboxType": sandbox_type}));
        let finished = finish(&mut client, id).await;
        assert_eq!((finished.stdout.as_str(), finished.exit_code), ("ran\n", 0), "{id}");
    }
}

// ---------------------------------------------------------------------------------------------
// 3. The read-only intent

async fn read_only_refuses_writes_and_allows_reads(target: Target) {
    let root = HostDir::new(target, "read-only");
    root.file("data", "hello\n");
    let (_server, mut client) = started(target).await;
    let intent = process_intent(read_only_entries(), &root);
    let finished = run(&mut client, sandboxed("p", "cat data; touch new", &root, intent)).await;
    assert_eq!(finished.stdout, "hello\n", "{finished:?}");
    assert_eq!(finished.stderr, "touch: cannot touch 'new': Read-only file system\n");
    assert_eq!(finished.exit_code, 1);
    assert!(finished.sandbox_denied, "`read-only file system` in the output of a failure");
    assert!(!root.exists("new"));
}

async fn a_sandboxed_command_is_pid_2_and_its_leftovers_die_with_it(target: Target) {
    let root = HostDir::new(target, "pid");
    let (_server, mut client) = started(target).await;
    let intent = process_intent(read_only_entries(), &root);
    let finished = run(&mut client, sandboxed("pid", "echo $$ $PPID", &root, intent.clone())).await;
    assert_eq!(finished.stdout, "2 1\n", "the command is PID 2, below the helper");

    // Without a sandbox `late` comes too (process.rs): here the pid namespace ends with the
    // command and takes the background subshell with it.
    let script = "(sleep 1; echo late) & echo early";
    let finished = run(&mut client, sandboxed("leftover", script, &root, intent)).await;
    assert_eq!((finished.stdout.as_str(), finished.exit_code), ("early\n", 0));
}

/// A process of the host's, outside every sandbox, killed when dropped if still running.
struct HostProcess(std::process::Child);

impl HostProcess {
    fn sleeping() -> Self {
        Self(std::process::Command::new("sleep").arg("60").spawn().unwrap())
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `--linux-sandbox-pid-namespace`: in the host's pid namespace (`inherit`) a sandboxed command
/// sees the host's processes and may signal one of its user's; in one of its own (`isolate`,
/// the default) it sees none and reaches none.
async fn a_host_process_is_seen_and_signalled_only_in_the_host_pid_namespace(target: Target) {
    use std::os::unix::process::ExitStatusExt;
    let root = HostDir::new(target, "pid-namespace");
    let intent = process_intent(read_only_entries(), &root);
    for mode in ["isolate", "inherit"] {
        let mut host = HostProcess::sleeping();
        let pid = host.pid();
        let (_server, mut client) =
            started_with(target, &["--linux-sandbox-pid-namespace", mode]).await;
        let script = format!("test -d /proc/{pid} && echo seen; kill -s TERM {pid} && echo sent");
        let finished = run(&mut client, sandboxed("p", &script, &root, intent.clone())).await;
        if mode == "inherit" {
            assert_eq!((finished.stdout.as_str(), finished.exit_code), ("seen\nsent\n", 0));
            let status = host.0.wait().unwrap();
            assert_eq!(status.signal(), Some(libc::SIGTERM), "the host's process got it");
        } else {
            assert_eq!(finished.stdout, "", "{mode}");
            assert_eq!(finished.stderr, "/bin/sh: 1: kill: No such process\n\n", "{mode}");
            assert!(host.0.try_wait().unwrap().is_none(), "the host's process runs on");
        }
    }
}

/// Tether only: in the host's pid namespace, no kernel namespace ends a sandbox with its first
/// process, so Tether keeps that itself. The command cannot signal its inner stage or the
/// bubblewrap above it, by pid or by group, nor every process at once (`kill -1`): the call is
/// refused whatever the signal, so signal 0 (nothing sent) shows it harmlessly. What it
/// leaves behind, even in a session of its own, is killed when it exits and when the sandbox
/// is terminated. The reference lets a command's leftovers run on here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_host_pid_namespace_the_sandbox_stays_beyond_the_commands_reach() {
    use tether_testkit::process_stats::ends_within;
    let target = Target::Tether;
    let root = HostDir::new(target, "inherit-reach");
    let intent = process_intent(read_only_entries(), &root);
    let (_server, mut client) =
        started_with(target, &["--linux-sandbox-pid-namespace", "inherit"]).await;
    let script = "bwrap=$(awk '/^PPid/ {print $2}' /proc/$PPID/status); \
                  for pid in $PPID -$PPID $bwrap -$bwrap -1; do kill -s 0 -- $pid; done; \
                  setsid sleep 600 >/dev/null 2>&1 & echo $!";
    let finished = run(&mut client, sandboxed("reach", script, &root, intent.clone())).await;
    assert_eq!(finished.exit_code, 0, "{finished:?}");
    // dash ends a failed `kill`'s message with an empty line.
    assert_eq!(finished.stderr, "/bin/sh: 1: kill: Operation not permitted\n\n".repeat(5));
    let leftover: u32 = finished.stdout.trim().parse().unwrap();
    assert!(ends_within(leftover, Duration::from_secs(10)).await, "killed when the command exits");

    let script = "setsid sleep 600 >/dev/null 2>&1 & echo $!; exec sleep 600";
    client.ok("process/start", sandboxed("held", script, &root, intent)).await.unwrap();
    let leftover: u32 = wait_for_output(&mut client, "held", "\n").await.trim().parse().unwrap();
    assert!(!ends_within(leftover, Duration::ZERO).await, "it runs while the command does");
    let result = client.ok("process/terminate", json!({"processId": "held"})).await.unwrap();
    assert_eq!(result, json!({"running": true}));
    assert_eq!(finish(&mut client, "held").await.exit_code, 137);
    assert!(ends_within(leftover, Duration::from_secs(10)).await, "killed with the sandbox");
}

// ---------------------------------------------------------------------------------------------
// 4. The workspace-write intent

async fn workspace_write_grants_the_project_root_tmpdir_and_tmp(target: Target) {
    let root = HostDir::new(target, "workspace");
    let tmpdir = HostDir::new(target, "workspace-tmpdir");
    let outside = HostDir::new(target, "workspace-outside");
    let slash_tmp = SlashTmpFile::new(target, "workspace");
    let (_server, mut client) = started(target).await;

    let script = format!(
        "echo a > in-root && echo b > \"$TMPDIR/in-tmpdir\" && echo c > {} && echo granted; \
         echo d > {}",
        slash_tmp.display(),
        outside.display("outside"),
    );
    let mut params =
        sandboxed("p", &script, &root, process_intent(workspace_write_entries(), &root));
    params["env"]["TMPDIR"] = json!(tmpdir.display(""));
    let finished = run(&mut client, params).await;
    assert_eq!(finished.stdout, "granted\n");
    let refused = format!("cannot create {}: Read-only file system", outside.display("outside"));
    assert_contains(&finished.stderr, &refused);
    assert_eq!(finished.exit_code, 2);

    assert_eq!(root.read("in-root"), "a\n");
    assert_eq!(tmpdir.read("in-tmpdir"), "b\n");
    assert_eq!(std::fs::read_to_string(&slash_tmp.path).unwrap(), "c\n");
    assert!(!outside.exists("outside"), "the host is untouched");
}

async fn read_only_grants_neither_tmpdir_nor_tmp(target: Target) {
    let root = HostDir::new(target, "read-only-tmp");
    let tmpdir = HostDir::new(target, "read-only-tmpdir");
    let slash_tmp = SlashTmpFile::new(target, "read-only");
    let (_server, mut client) = started(target).await;

    let script = format!("touch \"$TMPDIR/in-tmpdir\"; touch {}", slash_tmp.display());
    let mut params = sandboxed("p", &script, &root, process_intent(read_only_entries(), &root));
    params["env"]["TMPDIR"] = json!(tmpdir.display(""));
    let finished = run(&mut client, params).await;
    let expected = format!(
        "touch: cannot touch '{}': Read-only file system\n\
         touch: cannot touch '{}': Read-only file system\n",
        tmpdir.display("in-tmpdir"),
        slash_tmp.display(),
    );
    assert_eq!(finished.stderr, expected);
    assert_eq!(finished.exit_code, 1);
    assert!(!tmpdir.exists("in-tmpdir") && !slash_tmp.path.exists());
}

async fn an_existing_git_dir_is_read_only(target: Target) {
    let root = HostDir::new(target, "git");
    root.file(".git/config", "cfg\n");
    let (_server, mut client) = started(target).await;
    let script = "cat .git/config; echo x >> .git/config; touch .git/new; mv .git moved; \
                  echo y > .gitignore && mkdir -p sub/.git && echo z > sub/.git/x && echo nested";
    let intent = process_intent(workspace_write_entries(), &root);
    let finished = run(&mut client, sandboxed("p", script, &root, intent)).await;
    assert_eq!(finished.stdout, "cfg\nnested\n", "only top-level names are protected");
    assert_eq!(
        finished.stderr,
        "/bin/sh: 1: cannot create .git/config: Read-only file system\n\
         touch: cannot touch '.git/new': Read-only file system\n\
         mv: cannot move '.git' to 'moved': Device or resource busy\n"
    );
    assert_eq!(root.read(".git/config"), "cfg\n");
    assert!(!root.exists(".git/new") && !root.exists("moved"));
    assert_eq!(root.read("sub/.git/x"), "z\n");
}

async fn missing_protected_names_are_empty_read_only_dirs_while_the_child_runs(target: Target) {
    let root = HostDir::new(target, "synthetic");
    let (_server, mut client) = started(target).await;
    let script = "mkdir .git; touch .git/x; stat -c %a .git .agents .codex .aws; echo ready; \
                  read line; echo got $line";
    let intent = process_intent(workspace_write_entries(), &root);
    let mut params = sandboxed("held", script, &root, intent);
    params["pipeStdin"] = json!(true);
    client.ok("process/start", params).await.unwrap();
    wait_for_output(&mut client, "held", "ready\n").await;

    // The mount points exist on the host while the child runs.
    assert_eq!(root.names(), BTreeSet::from(PROTECTED_NAMES.map(String::from)));
    assert!(PROTECTED_NAMES.iter().all(|name| root.is_empty_dir(name)));

    write_stdin(&mut client, "held", b"go\n").await;
    let finished = finish(&mut client, "held").await;
    assert_eq!(finished.stdout, "555\n555\n555\n555\nready\ngot go\n", "empty dirs, mode 555");
    assert_eq!(
        finished.stderr,
        "mkdir: cannot create directory '.git': File exists\n\
         touch: cannot touch '.git/x': Read-only file system\n"
    );
    assert_eq!(finished.exit_code, 0);
    assert_eq!(root.names(), BTreeSet::new(), "removed after a normal exit");
}

async fn synthetic_dirs_after_terminate(target: Target) {
    let root = HostDir::new(target, "synthetic-terminate");
    let (_server, mut client) = started(target).await;
    // Codex's workspace-write intent without `/tmp` and `$TMPDIR`: the reference would leak its
    // synthetic dirs into the shared `/tmp` too.
    let mut entries = vec![special("root", "read"), special("project_roots", "write")];
    entries.extend(PROTECTED_NAMES.map(protected));
    let mut params =
        sandboxed("held", "echo ready; read line", &root, process_intent(entries, &root));
    params["pipeStdin"] = json!(true);
    client.ok("process/start", params).await.unwrap();
    wait_for_output(&mut client, "held", "ready\n").await;
    assert_eq!(root.names(), BTreeSet::from(PROTECTED_NAMES.map(String::from)));

    let result = client.ok("process/terminate", json!({"processId": "held"})).await.unwrap();
    assert_eq!(result, json!({"running": true}));
    assert_eq!(finish(&mut client, "held").await.exit_code, 137);
    if target == Target::Tether {
        assert_eq!(root.names(), BTreeSet::new(), "the server owns the cleanup");
    } else {
        // Deliberate difference: the reference's helper is killed before it cleans up, so the
        // empty dirs stay on the host for good (a later run treats them as existing).
        assert_eq!(root.names(), BTreeSet::from(PROTECTED_NAMES.map(String::from)));
    }
}

// ---------------------------------------------------------------------------------------------
// 5. The restricted network

async fn restricted_network_leaves_loopback_only_and_no_sockets(target: Target) {
    let root = HostDir::new(target, "network");
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let port = tcp.local_addr().unwrap().port();
    let socket_path = root.display("host.sock");
    let unix = std::os::unix::net::UnixListener::bind(&socket_path).unwrap();
    unix.set_nonblocking(true).unwrap();
    let (_server, mut client) = started(target).await;
    let intent = process_intent(read_only_entries(), &root);

    let script = "cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '";
    let finished = run(&mut client, sandboxed("ifaces", script, &root, intent.clone())).await;
    assert_eq!(finished.stdout, "lo\n", "a network namespace of its own");

    // `/sys` is the host's, bound read-only: it still lists the host's interfaces.
    let finished =
        run(&mut client, sandboxed("sys", "ls /sys/class/net", &root, intent.clone())).await;
    let mut host_interfaces: Vec<String> = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    host_interfaces.sort();
    assert_eq!(finished.stdout.lines().collect::<Vec<_>>(), host_interfaces);

    let script = format!("curl -sS -m 5 http://127.0.0.1:{port}/");
    let finished = run(&mut client, sandboxed("curl", &script, &root, intent.clone())).await;
    assert_eq!(finished.exit_code, 7, "{finished:?}");
    assert_contains(&finished.stderr, "Couldn't connect to server");
    assert!(!finished.sandbox_denied, "curl's words hold no keyword");

    let mut params = sandboxed("dev-tcp", "", &root, intent.clone());
    let script = format!("echo hi > /dev/tcp/127.0.0.1/{port}");
    params["argv"] = json!(["/bin/bash", "--norc", "-c", script]);
    let finished = run(&mut client, params).await;
    assert_eq!(
        finished.stderr,
        format!(
            "/bin/bash: socket: Operation not permitted\n\
             /bin/bash: line 1: /dev/tcp/127.0.0.1/{port}: Operation not permitted\n"
        )
    );
    assert_eq!((finished.exit_code, finished.sandbox_denied), (1, true));

    let script = format!("curl -sS -m 5 --unix-socket {socket_path} http://x/");
    let finished = run(&mut client, sandboxed("curl-unix", &script, &root, intent.clone())).await;
    assert_eq!(finished.exit_code, 7, "{finished:?}");
    let script = format!(
        "python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"{socket_path}\")'"
    );
    let finished = run(&mut client, sandboxed("py-unix", &script, &root, intent)).await;
    assert_contains(&finished.stderr, "PermissionError: [Errno 1] Operation not permitted");
    assert_eq!((finished.exit_code, finished.sandbox_denied), (1, true));

    assert_eq!(tcp.accept().unwrap_err().kind(), ErrorKind::WouldBlock, "no TCP connection came");
    assert_eq!(unix.accept().unwrap_err().kind(), ErrorKind::WouldBlock, "no Unix connection came");
}

/// Tries every way a command could reach a socket of the host's, one line each: what it did,
/// then `reached` or the error's words. Ends with IPC inside the sandbox: a descriptor passed
/// over a socketpair.
const SOCKET_PROBE: &str = r#"
import array, socket, sys
dgram, abstract_dgram, stream, abstract_stream, tcp_port, udp_port = sys.argv[1:7]
rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0]))]

def attempt(name, action):
    try:
        action()
        print(name + ": reached")
    except OSError as error:
        print(name + ": " + error.strerror)

def unix(kind):
    return socket.socket(socket.AF_UNIX, kind)

attempt("sendto", lambda: unix(socket.SOCK_DGRAM).sendto(b"x", dgram))
attempt("sendmsg", lambda: unix(socket.SOCK_DGRAM).sendmsg([b"x"], [], 0, dgram))
attempt("sendmsg-rights", lambda: unix(socket.SOCK_DGRAM).sendmsg([b"x"], rights, 0, dgram))
attempt("raw-sendmsg", lambda: unix(socket.SOCK_RAW).sendmsg([b"x"], [], 0, dgram))
attempt("pair-sendmsg",
    lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].sendmsg([b"x"], [], 0, dgram))
attempt("abstract-sendmsg",
    lambda: unix(socket.SOCK_DGRAM).sendmsg([b"x"], [], 0, "\0" + abstract_dgram))
attempt("stream-sendmsg", lambda: socket.socketpair()[0].sendmsg([b"x"], rights, 0, dgram))
attempt("connect", lambda: unix(socket.SOCK_STREAM).connect(stream))
attempt("abstract-connect", lambda: unix(socket.SOCK_STREAM).connect("\0" + abstract_stream))
attempt("tcp", lambda: socket.socket().connect(("127.0.0.1", int(tcp_port))))
attempt("udp",
    lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", int(udp_port))))

a, b = socket.socketpair()
a.sendmsg([b"ipc"], rights)
message, ancillary, _, _ = b.recvmsg(16, socket.CMSG_SPACE(4))
print("ipc: " + message.decode() + " with " + str(len(ancillary)) + " descriptor")
"#;

/// The host's sockets a probe aims at: Unix datagram and stream sockets by path and by
/// abstract name, and loopback TCP and UDP, each non-blocking so what arrived can be counted.
struct HostSockets {
    dgram: std::os::unix::net::UnixDatagram,
    abstract_dgram: std::os::unix::net::UnixDatagram,
    stream: std::os::unix::net::UnixListener,
    abstract_stream: std::os::unix::net::UnixListener,
    tcp: std::net::TcpListener,
    udp: std::net::UdpSocket,
    /// The probe's arguments, in its order.
    arguments: String,
}

impl HostSockets {
    fn bound(root: &HostDir) -> Self {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr, UnixDatagram, UnixListener};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let unique = format!(
            "tether-sandbox-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let (abstract_dgram_name, abstract_stream_name) =
            (format!("{unique}-dgram"), format!("{unique}-stream"));
        let abstract_name = |name: &str| SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let sockets = Self {
            dgram: UnixDatagram::bind(root.path("host-dgram.sock")).unwrap(),
            abstract_dgram: UnixDatagram::bind_addr(&abstract_name(&abstract_dgram_name)).unwrap(),
            stream: UnixListener::bind(root.path("host-stream.sock")).unwrap(),
            abstract_stream: UnixListener::bind_addr(&abstract_name(&abstract_stream_name))
                .unwrap(),
            tcp: std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            udp: std::net::UdpSocket::bind("127.0.0.1:0").unwrap(),
            arguments: String::new(),
        };
        sockets.dgram.set_nonblocking(true).unwrap();
        sockets.abstract_dgram.set_nonblocking(true).unwrap();
        sockets.stream.set_nonblocking(true).unwrap();
        sockets.abstract_stream.set_nonblocking(true).unwrap();
        sockets.tcp.set_nonblocking(true).unwrap();
        sockets.udp.set_nonblocking(true).unwrap();
        let arguments = format!(
            "{} {abstract_dgram_name} {} {abstract_stream_name} {} {}",
            root.display("host-dgram.sock"),
            root.display("host-stream.sock"),
            sockets.tcp.local_addr().unwrap().port(),
            sockets.udp.local_addr().unwrap().port(),
        );
        Self { arguments, ..sockets }
    }

    /// How many datagrams and connections reached the Unix sockets since the last call, by
    /// socket (their delivery is done when the sender's call returns).
    fn unix_arrivals(&self) -> [(&'static str, usize); 4] {
        fn datagrams(socket: &std::os::unix::net::UnixDatagram) -> usize {
            let mut buffer = [0u8; 64];
            std::iter::from_fn(|| socket.recv(&mut buffer).ok()).count()
        }
        fn connections(listener: &std::os::unix::net::UnixListener) -> usize {
            std::iter::from_fn(|| listener.accept().ok()).count()
        }
        [
            ("dgram", datagrams(&self.dgram)),
            ("abstract-dgram", datagrams(&self.abstract_dgram)),
            ("stream", connections(&self.stream)),
            ("abstract-stream", connections(&self.abstract_stream)),
        ]
    }
}

/// A network-restricted command reaches no socket of the host's, by any call: not a Unix
/// datagram socket by `sendto` or `sendmsg` (with descriptors or without, from a socket,
/// a raw one or a socketpair), not an abstract one, not a Unix stream socket by path or name,
/// not TCP or UDP on loopback — under the network filter alone and in a full sandbox alike —
/// while IPC over a socketpair still passes descriptors. With the network enabled, all of it
/// is reached. Tether only: the reference's filter leaves `sendmsg` and Unix datagram sockets,
/// so its commands deliver datagrams, and descriptors, to any host socket they can name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restricted_network_reaches_no_host_socket() {
    let root = HostDir::new(Target::Tether, "host-sockets");
    root.file("probe.py", SOCKET_PROBE);
    let host = HostSockets::bound(&root);
    let (_server, mut client) = started(Target::Tether).await;
    let script = format!("python3 probe.py {}", host.arguments);
    let full = process_intent(read_only_entries(), &root);
    let full_with_network =
        edited(&full, |intent| intent["permissions"]["network"] = json!("enabled"));

    let refused = "sendto: Operation not permitted\n\
                   sendmsg: Operation not permitted\n\
                   sendmsg-rights: Operation not permitted\n\
                   raw-sendmsg: Operation not permitted\n\
                   pair-sendmsg: Operation not permitted\n\
                   abstract-sendmsg: Operation not permitted\n\
                   stream-sendmsg: Transport endpoint is already connected\n\
                   connect: Operation not permitted\n\
                   abstract-connect: Operation not permitted\n\
                   tcp: Operation not permitted\n\
                   udp: Operation not permitted\n\
                   ipc: ipc with 1 descriptor\n";
    for (name, intent) in [("filter-only", external_intent()), ("full", full)] {
        let finished = run(&mut client, sandboxed(name, &script, &root, intent)).await;
        assert_eq!((finished.stdout.as_str(), finished.stderr.as_str()), (refused, ""), "{name}");
        assert_eq!(
            host.unix_arrivals(),
            [("dgram", 0), ("abstract-dgram", 0), ("stream", 0), ("abstract-stream", 0)],
            "{name}: nothing reached the host"
        );
        assert_eq!(host.tcp.accept().unwrap_err().kind(), ErrorKind::WouldBlock, "{name}");
        let mut buffer = [0u8; 16];
        assert_eq!(host.udp.recv(&mut buffer).unwrap_err().kind(), ErrorKind::WouldBlock);
    }

    let finished = run(&mut client, sandboxed("network", &script, &root, full_with_network)).await;
    assert_eq!(
        finished.stdout,
        "sendto: reached\n\
         sendmsg: reached\n\
         sendmsg-rights: reached\n\
         raw-sendmsg: reached\n\
         pair-sendmsg: reached\n\
         abstract-sendmsg: reached\n\
         stream-sendmsg: Transport endpoint is already connected\n\
         connect: reached\n\
         abstract-connect: reached\n\
         tcp: reached\n\
         udp: reached\n\
         ipc: ipc with 1 descriptor\n",
        "{}",
        finished.stderr
    );
    assert_eq!(
        host.unix_arrivals(),
        [("dgram", 5), ("abstract-dgram", 1), ("stream", 1), ("abstract-stream", 1)]
    );
}

// ---------------------------------------------------------------------------------------------
// 6. Escape attempts

async fn escapes_from_a_writable_root_are_refused(target: Target) {
    let root = HostDir::new(target, "escape");
    let outside = HostDir::new(target, "escape-outside");
    outside.file("victim", "orig\n");
    root.file("inside", "in\n");
    std::os::unix::fs::symlink(outside.path(""), root.path("out")).unwrap();
    std::os::unix::fs::symlink(outside.path("victim"), root.path("victim-link")).unwrap();
    let slash_tmp = SlashTmpFile::new(target, "escape");
    let outside_name = outside.path("").file_name().unwrap().to_str().unwrap().to_owned();
    let victim = outside.display("victim");
    let (_server, mut client) = started(target).await;

    let cases: Vec<(String, i64, String)> = vec![
        (
            "echo pwn > out/victim".into(),
            2,
            "/bin/sh: 1: cannot create out/victim: Read-only file system\n".into(),
        ),
        (
            "echo pwn > victim-link".into(),
            2,
            "/bin/sh: 1: cannot create victim-link: Read-only file system\n".into(),
        ),
        (
            "echo pwn > out/new".into(),
            2,
            "/bin/sh: 1: cannot create out/new: Read-only file system\n".into(),
        ),
        (
            format!("ln {victim} hardlink"),
            1,
            format!(
                "ln: failed to create hard link 'hardlink' => '{victim}': Invalid cross-device \
                 link\n"
            ),
        ),
        (
            format!("echo pwn > ../{outside_name}/victim"),
            2,
            format!("/bin/sh: 1: cannot create ../{outside_name}/victim: Read-only file system\n"),
        ),
        (
            format!("echo pwn > /proc/self/root{victim}"),
            2,
            format!("/bin/sh: 1: cannot create /proc/self/root{victim}: Read-only file system\n"),
        ),
        (
            "mount -t bogus none /mnt".into(),
            32,
            "mount: /mnt: permission denied.\n       dmesg(1) may have more information after \
             failed mount system call.\n"
                .into(),
        ),
        ("unshare -n true".into(), 1, "unshare: unshare failed: Operation not permitted\n".into()),
        (
            "mkdir -p .git && echo x > .git/config".into(),
            2,
            "/bin/sh: 1: cannot create .git/config: Read-only file system\n".into(),
        ),
    ];
    let intent = process_intent(workspace_write_entries(), &root);
    for (n, (script, exit_code, stderr)) in cases.iter().enumerate() {
        let params = sandboxed(&format!("p{n}"), script, &root, intent.clone());
        let finished = run(&mut client, params).await;
        assert_eq!((finished.exit_code, &finished.stderr), (*exit_code, stderr), "{script}");
    }

    // A rename between two writable Roots (the project root and `/tmp`) crosses a mount.
    let script =
        format!("python3 -c 'import os; os.rename(\"inside\", \"{}\")'", slash_tmp.display());
    let finished = run(&mut client, sandboxed("rename", &script, &root, intent)).await;
    assert_contains(&finished.stderr, "OSError: [Errno 18] Invalid cross-device link");
    assert_eq!(finished.exit_code, 1);

    assert_eq!(outside.read("victim"), "orig\n");
    assert_eq!(outside.names(), BTreeSet::from(["victim".to_owned()]));
    assert!(!root.exists("hardlink") && root.exists("inside") && !slash_tmp.path.exists());
}

// ---------------------------------------------------------------------------------------------
// 7. Terminals, stdin and signals

async fn a_sandboxed_tty_is_the_console(target: Target) {
    let root = HostDir::new(target, "tty");
    let (_server, mut client) = started(target).await;
    let mut params =
        sandboxed("t", "tty; stty size", &root, process_intent(read_only_entries(), &root));
    params["tty"] = json!(true);
    let finished = run(&mut client, params).await;
    assert_eq!(finished.pty, "/dev/console\r\n24 80\r\n");
    assert!(finished.stdout.is_empty() && finished.stderr.is_empty());
}

async fn stdin_can_be_piped_into_a_sandboxed_process(target: Target) {
    let root = HostDir::new(target, "stdin");
    let (_server, mut client) = started(target).await;
    let intent = process_intent(read_only_entries(), &root);
    let mut params = sandboxed("piped", "head -c 3; echo", &root, intent.clone());
    params["pipeStdin"] = json!(true);
    client.ok("process/start", params).await.unwrap();
    write_stdin(&mut client, "piped", b"abc").await;
    assert_eq!(finish(&mut client, "piped").await.stdout, "abc\n");

    client.ok("process/start", sandboxed("closed", "cat; echo eof", &root, intent)).await.unwrap();
    let write = json!({"processId": "closed", "chunk": b64encode(b"x"), "writeId": "1"});
    let result = client.ok("process/write", write).await.unwrap();
    assert_eq!(result, json!({"status": "stdinClosed"}));
    assert_eq!(finish(&mut client, "closed").await.stdout, "eof\n");
}

async fn terminate_under_a_sandbox_reports_137_or_1_with_a_tty(target: Target) {
    let root = HostDir::new(target, "terminate");
    let (_server, mut client) = started(target).await;
    // The reference's terminal reports 1; Tether's reports the kill (137), with a sandbox as
    // without one.
    let tty_exit = if target == Target::Tether { 137 } else { 1 };
    for (id, tty, exit_code) in [("pipes", false, 137), ("tty", true, tty_exit)] {
        let script = "echo ready; sleep 30";
        let mut params = sandboxed(id, script, &root, process_intent(read_only_entries(), &root));
        params["tty"] = json!(tty);
        client.ok("process/start", params).await.unwrap();
        wait_for_output(&mut client, id, "ready").await;
        let result = client.ok("process/terminate", json!({"processId": id})).await.unwrap();
        assert_eq!(result, json!({"running": true}));
        assert_eq!(finish(&mut client, id).await.exit_code, exit_code, "{id}");
    }
}

/// `process/signal interrupt` under a sandbox. The reference's helper dies of it and takes the
/// sandbox with it: the command's trap never runs (130 on pipes, 1 on a terminal). Tether
/// forwards the signal to the command through its inner stage, as it delivers it without a
/// sandbox, so the command's trap runs and its own exit code comes back — a deliberate
/// difference: a sandboxed command gets to clean up, as an interrupted one expects to.
async fn interrupt_under_a_sandbox_reaches_the_command_on_tether_only(target: Target) {
    let root = HostDir::new(target, "interrupt");
    let (_server, mut client) = started(target).await;
    let script = "trap 'echo trapped; exit 7' INT; echo ready; while :; do sleep 0.05; done";
    let cases = match target {
        Target::Reference => [("pipes", false, 130, "ready\n"), ("tty", true, 1, "ready\r\n")],
        Target::Tether => {
            [("pipes", false, 7, "ready\ntrapped\n"), ("tty", true, 7, "ready\r\ntrapped\r\n")]
        }
    };
    for (id, tty, exit_code, output) in cases {
        let mut params = sandboxed(id, script, &root, process_intent(read_only_entries(), &root));
        params["tty"] = json!(tty);
        client.ok("process/start", params).await.unwrap();
        wait_for_output(&mut client, id, "ready").await;
        let signal = json!({"processId": id, "signal": "interrupt"});
        assert_eq!(client.ok("process/signal", signal).await.unwrap(), json!({}));
        let finished = finish(&mut client, id).await;
        assert_eq!((finished.exit_code, finished.sandbox_denied), (exit_code, false), "{id}");
        assert_eq!(if tty { finished.pty } else { finished.stdout }, output, "{id}");
    }
}

// ---------------------------------------------------------------------------------------------
// 8. The sandboxDenied heuristic (sandbox.md §3)

async fn sandbox_denied_follows_the_exit_code_and_output_heuristic(target: Target) {
    let root = HostDir::new(target, "heuristic");
    let (_server, mut client) = started(target).await;
    let read_only = process_intent(read_only_entries(), &root);
    let cases = [
        ("sigsys", "kill -SYS $$", read_only.clone(), 159, true),
        ("exit-1", "exit 1", read_only.clone(), 1, false),
        ("keyword-2", "echo 'Permission denied' >&2; exit 2", read_only.clone(), 2, true),
        ("keyword-0", "echo 'sandbox: permission denied'; exit 0", read_only.clone(), 0, false),
        ("keyword-127", "echo sandbox; exit 127", read_only.clone(), 127, true),
        ("keyword-1", "echo 'Operation not permitted' >&2; exit 1", read_only.clone(), 1, true),
        ("exit-2", "exit 2", read_only.clone(), 2, false),
        ("sigkill", "kill -KILL $$", read_only.clone(), 137, false),
        ("sigterm", "kill -TERM $$", read_only, 143, false),
        ("disabled-sigsys", "kill -SYS $$", disabled_intent(), 159, true),
        ("disabled-keyword", "echo seccomp; exit 1", disabled_intent(), 1, true),
    ];
    for (id, script, intent, exit_code, denied) in cases {
        let finished = run(&mut client, sandboxed(id, script, &root, intent)).await;
        assert_eq!((finished.exit_code, finished.sandbox_denied), (exit_code, denied), "{id}");
    }

    // Without a sandbox it is always false.
    let script = "echo 'Permission denied' >&2; exit 1";
    client.ok("process/start", sandboxed("none", script, &root, Value::Null)).await.unwrap();
    assert!(!finish(&mut client, "none").await.sandbox_denied);
}

// ---------------------------------------------------------------------------------------------
// Managed network launches (Codex 0.171's `transparentTcp`)

/// A `networkProxy` launch config as Codex 0.171 sends it, with `changes` applied to `proxy`.
fn network_proxy(changes: Value) -> Value {
    let mut proxy = json!({"enabled": true, "enableSocks5": true, "enableSocks5Udp": false,
        "transparentTcp": true, "allowUpstreamProxy": false,
        "dangerouslyAllowAllUnixSockets": false, "mode": "full",
        "domains": {"127.0.0.1": "allow"}, "unixSockets": null, "allowLocalBinding": false});
    for (key, value) in changes.as_object().unwrap() {
        proxy[key] = value.clone();
    }
    json!({"proxy": proxy, "environmentId": "remote",
        "executionId": "00000000-0000-0000-0000-000000000001"})
}

/// `transparentTcp` (routing a sandbox's TCP through the managed SOCKS5 proxy) is checked as the
/// reference checks it, in its order and words: a sandbox first, then a proxy that is on, then
/// SOCKS5; the config's types and required members before all. A launch that passes them
/// starts (what it routes: `managed_network.rs`).
async fn transparent_tcp_launches_are_refused_as_the_reference_refuses_them(target: Target) {
    let root = HostDir::new(target, "transparent-tcp");
    let (_server, mut client) = started(target).await;
    let intent = || process_intent(read_only_entries(), &root);
    let cases = [
        ("no sandbox", Value::Null, json!({}), "transparent TCP requires a managed Linux sandbox"),
        (
            "no sandbox, proxy off",
            Value::Null,
            json!({"enabled": false, "enableSocks5": false}),
            "transparent TCP requires a managed Linux sandbox",
        ),
        (
            "proxy off",
            intent(),
            json!({"enabled": false}),
            "invalid network proxy config: executor-local network proxy launch requires an enabled proxy",
        ),
        (
            "no SOCKS5",
            intent(),
            json!({"enableSocks5": false}),
            "invalid network proxy config: transparent_tcp requires an enabled managed SOCKS5 proxy",
        ),
        (
            "not a boolean",
            intent(),
            json!({"transparentTcp": "yes"}),
            "invalid type: string \"yes\", expected a boolean",
        ),
        (
            "unknown mode",
            Value::Null,
            json!({"mode": "half"}),
            "unknown variant `half`, expected `limited` or `full`",
        ),
    ];
    for (n, (what, sandbox, changes, message)) in cases.into_iter().enumerate() {
        let mut params = sandboxed(&format!("ttcp-{n}"), "true", &root, sandbox);
        params["networkProxy"] = network_proxy(changes);
        params["enforceManagedNetwork"] = json!(true);
        let error = client.err("process/start", params).await.unwrap();
        assert_eq!((error.code, error.message.as_str()), (-32602, message), "{what}");
    }
    let mut missing = sandboxed("ttcp-missing", "true", &root, intent());
    missing["networkProxy"] = network_proxy(json!({}));
    missing["networkProxy"]["proxy"].as_object_mut().unwrap().remove("mode");
    let error = client.err("process/start", missing).await.unwrap();
    assert_eq!((error.code, error.message.as_str()), (-32602, "missing field `mode`"));

    let mut valid = sandboxed("ttcp-valid", "true", &root, intent());
    valid["networkProxy"] = network_proxy(json!({}));
    valid["enforceManagedNetwork"] = json!(true);
    client.ok("process/start", valid).await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 9. Failures of the sandboxed start

async fn a_missing_binary_inside_the_sandbox_exits_101(target: Target) {
    let root = HostDir::new(target, "missing-binary");
    let (_server, mut client) = started(target).await;
    let mut params = sandboxed("p", "", &root, process_intent(read_only_entries(), &root));
    params["argv"] = json!(["/no/such/binary", "arg"]);
    let finished = run(&mut client, params).await;
    assert_eq!((finished.exit_code, finished.sandbox_denied), (101, true));
    assert_contains(&finished.stderr, "sandbox");
    if target == Target::Reference {
        assert_contains(
            &finished.stderr,
            "panicked at linux-sandbox/src/linux_run_main.rs:1361:5:\n\
             Failed to execvp /no/such/binary: No such file or directory (os error 2)\n",
        );
    }
}

/// Under every intent, `disabled` and the network filter alone included, a command that cannot
/// be executed is a started process that says why (on stderr, or its terminal) and exits 101,
/// as under the reference's sandbox helper: a file without a `#!` line is not run by a shell,
/// and a missing program is not found. Without an intent the start itself fails.
async fn a_command_that_cannot_be_executed_exits_101_under_every_intent(target: Target) {
    use std::os::unix::fs::PermissionsExt;
    let root = HostDir::new(target, "cannot-execute");
    let marker = root.path.join("ran");
    let script = root.path.join("no-interpreter-line");
    std::fs::write(&script, format!("touch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = script.display().to_string();
    let (_server, mut client) = started(target).await;
    let programs = [
        (script.as_str(), "Exec format error (os error 8)"),
        ("/no/such/binary", ENOENT),
        ("", ENOENT),
    ];
    let intents = [
        ("read-only", process_intent(read_only_entries(), &root)),
        ("network-filter", external_intent()),
        ("disabled", disabled_intent()),
    ];
    for (name, intent) in &intents {
        for tty in [false, true] {
            for (index, (program, reason)) in programs.iter().enumerate() {
                let case = format!("{name}-{tty}-{index}");
                let mut params = sandboxed(&case, "", &root, intent.clone());
                params["argv"] = json!([program]);
                params["tty"] = json!(tty);
                let finished = run(&mut client, params).await;
                assert_eq!((finished.exit_code, finished.sandbox_denied), (101, true), "{case}");
                let said = if tty { &finished.pty } else { &finished.stderr };
                assert_contains(said, &format!("Failed to execvp {program}: {reason}"));
            }
        }
    }
    assert!(!marker.exists(), "no shell ran the file without `#!`");

    let mut params = sandboxed("bare", "", &root, Value::Null);
    params["argv"] = json!([script]);
    let error = client.err("process/start", params).await.unwrap();
    assert!(error.message.contains("Exec format error (os error 8)"), "{error:?}");
}

/// A project root (and cwd) named through a symbolic link is the directory the link leads to:
/// the command starts there (`pwd` and `$PWD` show the real path), may write there by either
/// name, and file writes reach it too; read-only still refuses.
async fn a_root_named_through_a_link_is_the_directory_it_leads_to(target: Target) {
    let root = HostDir::new(target, "linked-root");
    std::fs::create_dir(root.path.join("real")).unwrap();
    std::os::unix::fs::symlink(root.path.join("real"), root.path.join("link")).unwrap();
    // Named through the link; dropped as a plain directory would be (`root` removes both).
    let link = std::mem::ManuallyDrop::new(HostDir { path: root.path.join("link") });
    let (_server, mut client) = started(target).await;
    let (real, named) = (root.display("real"), root.display("link"));
    let script = format!(
        "pwd; echo \"$PWD\"; for p in \"$PWD/a\" {real}/b {named}/c {}; do \
         (echo x > \"$p\") 2>/dev/null && echo \"$p ok\" || echo \"$p refused\"; done",
        root.display("outside"),
    );
    let intent = process_intent(workspace_write_entries(), &link);
    let finished = run(&mut client, sandboxed("ww", &script, &link, intent)).await;
    let outside = root.display("outside");
    let expected =
        format!("{real}\n{real}\n{real}/a ok\n{real}/b ok\n{named}/c ok\n{outside} refused\n");
    assert_eq!((finished.stdout.as_str(), finished.exit_code), (expected.as_str(), 0));
    let real_dir = std::mem::ManuallyDrop::new(HostDir { path: root.path.join("real") });
    assert_eq!(real_dir.names(), ["a", "b", "c"].map(String::from).into_iter().collect());

    let intent = process_intent(read_only_entries(), &link);
    let finished = run(&mut client, sandboxed("ro", &script, &link, intent)).await;
    let refused = format!(
        "{real}\n{real}\n{real}/a refused\n{real}/b refused\n{named}/c refused\n{outside} refused\n"
    );
    assert_eq!(finished.stdout, refused);

    let intent = fs_intent(workspace_write_entries(), &link);
    let params = json!({"path": link.uri("via-fs"), "dataBase64": "aGk=", "sandbox": intent});
    assert_eq!(client.ok("fs/writeFile", params).await.unwrap(), json!({}));
    assert_eq!(root.read("real/via-fs"), "hi");
}

/// A project below `/tmp`, which workspace-write makes writable too: a sandboxed command can
/// move the directory above the project aside and leave a link where the project was. A
/// sandbox built on it would bind writable wherever the link leads (here a directory outside
/// every root); both servers refuse to build it, in the same words, and file calls under the
/// intent are refused the same way.
async fn a_root_a_sandboxed_command_replaced_with_a_link_is_refused(target: Target) {
    let base = format!("/tmp/tether-swap-{}-{target:?}", std::process::id());
    let base = HostDir { path: PathBuf::from(base) };
    let _ = std::fs::remove_dir_all(&base.path);
    std::fs::create_dir_all(base.path("a/work")).unwrap();
    let victim = HostDir::new(target, "swap-victim");
    // Removed with `base`.
    let project = std::mem::ManuallyDrop::new(HostDir { path: base.path("a/work") });
    let (_server, mut client) = started(target).await;
    // A file call builds a sandbox first (after which Tether makes such calls in place).
    let fs = fs_intent(workspace_write_entries(), &project);
    let before = json!({"path": project.uri("before"), "dataBase64": "eA==", "sandbox": fs});
    assert_eq!(client.ok("fs/writeFile", before).await.unwrap(), json!({}));
    let intent = process_intent(workspace_write_entries(), &project);
    let swap = format!(
        "cd / && mv {a} {b} && mkdir {a} && ln -s {victim} {a}/work && echo swapped",
        a = base.display("a"),
        b = base.display("b"),
        victim = victim.display(""),
    );
    let finished = run(&mut client, sandboxed("swap", &swap, &project, intent.clone())).await;
    assert_eq!((finished.stdout.as_str(), finished.exit_code), ("swapped\n", 0), "{finished:?}");

    let refusal = format!(
        "error building bubblewrap command: Fatal error: cannot enforce sandbox read-only path \
         {}/.git because it crosses writable symlink {}",
        project.display(""),
        project.display("")
    );
    let escape = format!("echo escaped > {}", victim.display("pwned"));
    let finished = run(&mut client, sandboxed("escape", &escape, &project, intent)).await;
    assert_eq!((finished.stderr.trim(), finished.exit_code), (refusal.as_str(), 1));
    let write = json!({"path": victim.uri("via-fs"), "dataBase64": "eA==",
        "sandbox": fs_intent(workspace_write_entries(), &project)});
    let error = client.err("fs/writeFile", write).await.unwrap();
    assert_eq!(error.code, -32603);
    assert_contains(&error.message, &refusal);
    assert_eq!(victim.names(), BTreeSet::new(), "nothing reached the link's target");
}

/// A project root of `/` under workspace-write: everything is writable (devices work: `/dev`
/// is made again over the host's), but the protected names at the top of `/`. (Whether the
/// empty directories made for them at the host's `/` are removed is not asserted here.)
///
/// The two servers' runs of this test take turns: each makes and removes the empty `/.git`
/// its sandbox's read-only mount goes on, and removing a directory detaches what another
/// mount namespace has mounted on it, so the other run's sandbox would see no `/.git` at all.
/// (No privilege is in that: whoever may remove the directory may create it too.)
async fn a_project_root_of_slash_makes_everything_writable_but_its_protected_names(target: Target) {
    let turn = std::fs::File::create("/var/tmp/tether-sandbox-slash-root.lock").unwrap();
    turn.lock().unwrap();
    let root = HostDir::new(target, "slash-root");
    let (_server, mut client) = started(target).await;
    let mut intent = process_intent(workspace_write_entries(), &root);
    intent["workspaceRoots"] = json!(["file:///"]);
    let script = format!(
        "echo x > {} && echo x > /dev/null && echo written; mkdir /.git/inside 2>&1 | tail -1",
        root.display("x")
    );
    let finished = run(&mut client, sandboxed("slash", &script, &root, intent)).await;
    assert_eq!(
        finished.stdout,
        "written\nmkdir: cannot create directory '/.git/inside': Read-only file system\n"
    );
    assert_eq!(root.read("x"), "x\n");
}

/// `/` writable (`root: write`, as an approved escalation asks), with a denied directory: the
/// sandbox still has the standard devices, and usable; the denied directory stays unreadable,
/// the protected names at the top of `/` read-only, and a protected name that is a link
/// refuses the sandbox before anything runs, its target untouched. What Tether promises with
/// `linuxRootWritePreservesDevices` and `linuxApprovedRootWritePreservesRestrictions`, the
/// same on both servers. (Runs take turns with the test above: both make `/.git` and the like.)
async fn a_writable_root_keeps_standard_devices_and_every_restriction(target: Target) {
    let turn = std::fs::File::create("/var/tmp/tether-sandbox-slash-root.lock").unwrap();
    turn.lock().unwrap();
    let root = HostDir::new(target, "root-write");
    root.file("denied/secret.txt", "s\n");
    let (_server, mut client) = started(target).await;
    let entries = vec![
        special("root", "write"),
        special("project_roots", "write"),
        json!({"path": {"type": "path", "path": root.uri("denied")}, "access": "none"}),
    ];
    let script = format!(
        "ls /dev | tr '\\n' ' '; echo; echo x > /dev/null && echo null-ok; \
         head -c 4 /dev/zero | wc -c; cat {secret} 2>&1 | sed 's/.*: //'; \
         echo w > {written} && echo written; mkdir /.codex/inside 2>&1 | sed 's/.*: //'",
        secret = root.display("denied/secret.txt"),
        written = root.display("written.txt"),
    );
    let intent = process_intent(entries.clone(), &root);
    let finished = run(&mut client, sandboxed("p", &script, &root, intent)).await;
    assert_eq!(
        finished.stdout,
        "core fd full null ptmx pts random shm stderr stdin stdout tty urandom zero \n\
         null-ok\n4\nPermission denied\nwritten\nRead-only file system\n"
    );
    assert_eq!(root.read("written.txt"), "w\n");

    let outside = HostDir::new(target, "root-write-outside");
    std::os::unix::fs::symlink(outside.path(""), root.path(".codex")).unwrap();
    let script = format!("touch {}", root.display(".codex/f"));
    let intent = process_intent(entries, &root);
    let finished = run(&mut client, sandboxed("q", &script, &root, intent)).await;
    let link = root.display(".codex");
    assert_eq!(
        finished.stderr.trim_end(),
        format!(
            "error building bubblewrap command: Fatal error: cannot enforce sandbox read-only \
             path {link} because it crosses writable symlink {link}"
        )
    );
    assert!(outside.names().is_empty(), "nothing written where the link leads");
}

/// A `write` entry naming a single file makes that file writable and nothing beside it. The
/// reference fails every command under such an intent (exit 101: it looks for protected names
/// inside the file); a deliberate difference.
async fn a_write_grant_on_a_file_makes_that_file_writable(target: Target) {
    let root = HostDir::new(target, "file-grant");
    root.file("granted.txt", "g\n");
    root.file("beside.txt", "b\n");
    let (_server, mut client) = started(target).await;
    let mut entries = read_only_entries();
    entries.push(
        json!({"path": {"type": "path", "path": root.uri("granted.txt")}, "access": "write"}),
    );
    let script = format!(
        "for p in {} {} {}; do (echo x >> $p) 2>/dev/null && echo \"$p ok\" || echo \"$p refused\"; done",
        root.display("granted.txt"),
        root.display("beside.txt"),
        root.display("new.txt"),
    );
    let finished =
        run(&mut client, sandboxed("p", &script, &root, process_intent(entries, &root))).await;
    match target {
        Target::Tether => {
            let expected = format!(
                "{} ok\n{} refused\n{} refused\n",
                root.display("granted.txt"),
                root.display("beside.txt"),
                root.display("new.txt")
            );
            assert_eq!((finished.stdout.as_str(), finished.exit_code), (expected.as_str(), 0));
            assert_eq!(root.read("granted.txt"), "g\nx\n");
        }
        Target::Reference => {
            assert_eq!(finished.exit_code, 101, "{finished:?}");
            assert_eq!(root.read("granted.txt"), "g\n");
        }
    }
    assert_eq!(root.read("beside.txt"), "b\n");
}

/// Thirty commands and twenty file writes sandboxed in one root at once, ending in no
/// particular order: each command still finds the missing protected names read-only when the
/// others have ended, and once the last has closed none of the empty directories made for them
/// is left on the host (Tether; the reference sometimes leaves some, see below).
async fn concurrent_sandboxes_keep_the_protected_names_and_leave_nothing_behind(target: Target) {
    let root = HostDir::new(target, "concurrent");
    let (_server, mut client) = started(target).await;
    let intent = process_intent(workspace_write_entries(), &root);
    let script = |i: usize| {
        format!(
            "echo {i} > f{i}; sleep 0.{}; mkdir .git/inside 2>/dev/null && echo breached; cat f{i}",
            i % 5
        )
    };
    let ids: Vec<String> = (0..30).map(|i| format!("c{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        client
            .send_request("process/start", sandboxed(id, &script(i), &root, intent.clone()))
            .await
            .unwrap();
    }
    let writes = fs_intent(workspace_write_entries(), &root);
    for i in 0..20 {
        let params =
            json!({"path": root.uri(&format!("w{i}")), "dataBase64": "aGk=", "sandbox": writes});
        assert_eq!(client.ok("fs/writeFile", params).await.unwrap(), json!({}));
    }
    for (i, id) in ids.iter().enumerate() {
        let finished = finish(&mut client, id).await;
        assert_eq!((finished.stdout, finished.exit_code), (format!("{i}\n"), 0), "{id}");
    }
    let left: Vec<String> = root.names().into_iter().filter(|name| name.starts_with('.')).collect();
    if target == Target::Tether {
        assert!(left.is_empty(), "left on the host: {left:?}");
    } else {
        // Deliberate difference: the reference's helpers share a registry of the empty dirs
        // they made, and under load it sometimes leaves some of them on the host after the
        // last command has closed (seen: `.agents` and `.git`). What it leaves is only ever
        // those empty dirs.
        let synthetic = |name: &String| PROTECTED_NAMES.contains(&name.as_str());
        assert!(left.iter().all(|name| synthetic(name) && root.is_empty_dir(name)), "{left:?}");
    }
}

async fn a_missing_cwd_fails_a_sandboxed_start(target: Target) {
    let root = HostDir::new(target, "missing-cwd");
    let (_server, mut client) = started(target).await;
    let mut params = sandboxed("p", "echo ran", &root, process_intent(read_only_entries(), &root));
    params["cwd"] = json!(root.uri("missing"));
    let error = client.err("process/start", params).await.unwrap();
    assert_error(error, -32603, ENOENT);
}

// ---------------------------------------------------------------------------------------------
// 10. fs/* under an intent (sandbox.md §6)

async fn fs_writes_under_workspace_write_are_confined_to_the_roots(target: Target) {
    let root = HostDir::new(target, "fs-workspace");
    let outside = HostDir::new(target, "fs-outside");
    root.file("inside", "in\n");
    outside.file("victim", "orig\n");
    std::os::unix::fs::symlink(outside.path(""), root.path("out")).unwrap();
    let (_server, mut client) = started(target).await;
    let intent = fs_intent(workspace_write_entries(), &root);
    let with_intent = |mut params: Value| {
        params["sandbox"] = intent.clone();
        params
    };
    let write = |uri: String| with_intent(json!({"path": uri, "dataBase64": "eA=="}));

    assert_eq!(client.ok("fs/writeFile", write(root.uri("new"))).await.unwrap(), json!({}));
    assert_eq!(root.read("new"), "x");
    let created = with_intent(json!({"path": root.uri("a/b")}));
    assert_eq!(client.ok("fs/createDirectory", created).await.unwrap(), json!({}));
    assert!(root.path("a/b").is_dir());
    let copy = with_intent(json!({"sourcePath": root.uri("inside"),
        "destinationPath": root.uri("copied"), "recursive": false}));
    assert_eq!(client.ok("fs/copy", copy).await.unwrap(), json!({}));
    assert_eq!(root.read("copied"), "in\n");

    for parent in [root.uri("nope/new"), outside.uri("nope/new")] {
        let error = client.err("fs/writeFile", write(parent)).await.unwrap();
        assert_error(error, -32004, ENOENT);
    }
    let refused = [
        ("fs/writeFile", write(outside.uri("victim"))),
        ("fs/writeFile", write(outside.uri("new"))),
        ("fs/writeFile", write(root.uri("out/victim"))),
        ("fs/createDirectory", with_intent(json!({"path": outside.uri("dir")}))),
        ("fs/remove", with_intent(json!({"path": outside.uri("victim")}))),
        (
            "fs/copy",
            with_intent(json!({"sourcePath": root.uri("inside"),
                "destinationPath": outside.uri("copied"), "recursive": false})),
        ),
    ];
    for (method, params) in refused {
        let error = client.err(method, params.clone()).await.unwrap();
        assert_eq!((error.code, error.message.as_str()), (-32603, EROFS), "{method} {params}");
    }
    assert_eq!(outside.read("victim"), "orig\n");
    assert_eq!(outside.names(), BTreeSet::from(["victim".to_owned()]), "the host is untouched");

    let forced = with_intent(json!({"path": root.uri("missing"), "force": true}));
    assert_eq!(client.ok("fs/remove", forced).await.unwrap(), json!({}));
    let unforced = with_intent(json!({"path": root.uri("missing"), "force": false}));
    assert_error(client.err("fs/remove", unforced).await.unwrap(), -32004, ENOENT);
    let removed = with_intent(json!({"path": root.uri("new")}));
    assert_eq!(client.ok("fs/remove", removed).await.unwrap(), json!({}));
    assert!(!root.exists("new"));
}

async fn fs_writes_to_protected_names_are_refused(target: Target) {
    let root = HostDir::new(target, "fs-protected");
    root.file(".git/config", "cfg\n");
    let (_server, mut client) = started(target).await;
    let intent = fs_intent(workspace_write_entries(), &root);
    let with_intent = |mut params: Value| {
        params["sandbox"] = intent.clone();
        params
    };

    let write = with_intent(json!({"path": root.uri(".git/config"), "dataBase64": "eA=="}));
    assert_error(client.err("fs/writeFile", write).await.unwrap(), -32603, EROFS);
    let remove = with_intent(json!({"path": root.uri(".git/config")}));
    assert_error(client.err("fs/remove", remove).await.unwrap(), -32603, EROFS);
    let inside = with_intent(json!({"path": root.uri(".codex/new"), "dataBase64": "eA=="}));
    assert_error(client.err("fs/writeFile", inside).await.unwrap(), -32603, EROFS);
    assert_eq!(root.read(".git/config"), "cfg\n");

    // A missing protected name is the synthetic dir: it exists, so only a non-recursive create
    // fails (sandbox.md has it fail either way).
    let exclusive = with_intent(json!({"path": root.uri(".codex"), "recursive": false}));
    assert_error(client.err("fs/createDirectory", exclusive).await.unwrap(), -32603, EEXIST);
    let recursive = with_intent(json!({"path": root.uri(".codex")}));
    assert_eq!(client.ok("fs/createDirectory", recursive).await.unwrap(), json!({}));
    assert_eq!(root.names(), BTreeSet::from([".git".to_owned()]), "no synthetic dir is left");
}

async fn fs_writes_under_read_only_are_refused(target: Target) {
    let root = HostDir::new(target, "fs-read-only");
    root.file("inside", "in\n");
    let (_server, mut client) = started(target).await;
    let intent = fs_intent(read_only_entries(), &root);
    let with_intent = |mut params: Value| {
        params["sandbox"] = intent.clone();
        params
    };
    for (method, params) in [
        ("fs/writeFile", json!({"path": root.uri("new"), "dataBase64": "eA=="})),
        ("fs/writeFile", json!({"path": root.uri("inside"), "dataBase64": "eA=="})),
        ("fs/createDirectory", json!({"path": root.uri("dir")})),
        ("fs/remove", json!({"path": root.uri("inside")})),
    ] {
        let error = client.err(method, with_intent(params)).await.unwrap();
        assert_eq!((error.code, error.message.as_str()), (-32603, EROFS), "{method}");
    }
    let missing_parent = json!({"path": root.uri("nope/new"), "dataBase64": "eA=="});
    let error = client.err("fs/writeFile", with_intent(missing_parent)).await.unwrap();
    assert_error(error, -32004, ENOENT);
    assert_eq!(root.names(), BTreeSet::from(["inside".to_owned()]));
    assert_eq!(root.read("inside"), "in\n");
}

/// Writes below a writable root that the sandbox shows as the host has it (Tether makes them
/// without a sandbox once one has been built, see `sandbox_writes_below_a_root_start_no_sandbox`)
/// get the sandbox's answers: links inside the root are followed, a file keeps its inode, the
/// server's privilege does not count.
async fn fs_writes_below_a_root_see_the_host_as_the_sandbox_shows_it(target: Target) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let root = HostDir::new(target, "fs-in-place");
    root.file("real", "old\n");
    root.file("realdir/keep", "");
    root.file("dir/keep", "");
    root.file("hard", "old\n");
    root.file("mine", "old\n");
    root.file("theirs", "old\n");
    std::fs::hard_link(root.path("hard"), root.path("hard2")).unwrap();
    std::os::unix::fs::symlink("real", root.path("link")).unwrap();
    std::os::unix::fs::symlink(root.path("realdir"), root.path("linkdir")).unwrap();
    std::fs::set_permissions(root.path("mine"), std::fs::Permissions::from_mode(0o444)).unwrap();
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(root.path("theirs"), Some(65534), Some(65534)).unwrap();
    }
    let (_server, mut client) = started(target).await;
    let intent = fs_intent(workspace_write_entries(), &root);
    let write = |relative: &str| call_in(&root, relative, json!({"dataBase64": "eA=="}), &intent);

    for written in ["first", "second", "link", "linkdir/new", "hard"] {
        assert_eq!(
            client.ok("fs/writeFile", write(written)).await.unwrap(),
            json!({}),
            "{written}"
        );
    }
    assert_eq!(
        [root.read("first"), root.read("second"), root.read("real"), root.read("realdir/new")],
        ["x", "x", "x", "x"]
    );
    assert_eq!(root.read("hard2"), "x", "written in place: the other link sees it");
    let umask = rustix::process::umask(rustix::fs::Mode::empty());
    rustix::process::umask(umask);
    let mode = std::fs::metadata(root.path("second")).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o666 & !umask.bits(), "a new file's mode");

    let missing = client.err("fs/writeFile", write("nope/new")).await.unwrap();
    assert_error(missing, -32004, ENOENT);
    let directory = client.err("fs/writeFile", write("dir")).await.unwrap();
    assert_error(directory, -32603, "Is a directory (os error 21)");
    // apply_patch's other calls: directories made (the missing ones on the way too, unless
    // asked not to), files removed.
    let call = |relative: &str, fields: Value| call_in(&root, relative, fields, &intent);
    for (made, recursive) in [("new/a/b", true), ("new/a/b", true), ("new/a/c", false)] {
        let params = call(made, json!({"recursive": recursive}));
        assert_eq!(client.ok("fs/createDirectory", params).await.unwrap(), json!({}), "{made}");
        assert!(root.path(made).is_dir(), "{made}");
    }
    let through_link = call("linkdir/sub/deeper", json!({}));
    assert_eq!(client.ok("fs/createDirectory", through_link).await.unwrap(), json!({}));
    assert!(root.path("realdir/sub/deeper").is_dir());
    let orphan = call("nope/x", json!({"recursive": false}));
    assert_error(client.err("fs/createDirectory", orphan).await.unwrap(), -32004, ENOENT);
    let existing = call("new/a", json!({"recursive": false}));
    assert_error(client.err("fs/createDirectory", existing).await.unwrap(), -32603, EEXIST);
    let over_a_file = call("first", json!({}));
    assert_error(client.err("fs/createDirectory", over_a_file).await.unwrap(), -32603, EEXIST);

    assert_eq!(client.ok("fs/remove", call("first", json!({}))).await.unwrap(), json!({}));
    assert_eq!(client.ok("fs/remove", call("hard", json!({}))).await.unwrap(), json!({}));
    assert!(!root.exists("first") && !root.exists("hard"));
    assert_eq!(root.read("hard2"), "x", "the other link stays");
    let forced = call("first", json!({"force": true}));
    assert_eq!(client.ok("fs/remove", forced).await.unwrap(), json!({}));
    let gone = call("first", json!({"force": false}));
    assert_error(client.err("fs/remove", gone).await.unwrap(), -32004, ENOENT);
    let gone_parent = call("nope/first", json!({"force": false}));
    assert_error(client.err("fs/remove", gone_parent).await.unwrap(), -32004, ENOENT);
    assert_eq!(client.ok("fs/remove", call("link", json!({}))).await.unwrap(), json!({}));
    assert!(!root.exists("link") && root.exists("real"), "the link goes, not what it leads to");
    assert_eq!(client.ok("fs/remove", call("new", json!({}))).await.unwrap(), json!({}));
    assert!(!root.exists("new"), "a tree goes whole");

    // The helper has no capabilities: a root server's privilege does not reach into the sandbox
    // (a read-only file of its own, another user's file).
    for refused in ["mine", "theirs"] {
        let error = client.err("fs/writeFile", write(refused)).await.unwrap();
        assert_error(error, -32600, EACCES);
        assert_eq!(root.read(refused), "old\n");
    }
}

/// A root with a hidden file, a hidden directory, a link to the hidden file and a file a
/// `none` glob hides; the intent that hides them (`access` is `none` or its alias `deny`) on
/// top of workspace-write.
fn hiding_intent(root: &HostDir, access: &str) -> Value {
    root.file("secret", "s3cret\n");
    root.file("public", "hello\n");
    root.file("hidden/inner", "in\n");
    root.file("x.env", "K=V\n");
    if !root.exists("link") {
        std::os::unix::fs::symlink(root.path("secret"), root.path("link")).unwrap();
    }
    let path = |relative: &str| json!({"type": "path", "path": root.uri(relative)});
    let mut entries = workspace_write_entries();
    entries.push(json!({"path": path("secret"), "access": access}));
    entries.push(json!({"path": path("hidden"), "access": access}));
    let pattern = format!("{}/*.env", root.display(""));
    entries.push(json!({"path": {"type": "glob_pattern", "pattern": pattern}, "access": access}));
    fs_intent(entries, root)
}

/// The params of a walk of `uri` deep enough for the scenarios' trees.
fn walk_params(uri: String) -> Value {
    json!({"path": uri, "options": {"maxDepth": 3, "maxDirectories": 10, "maxEntries": 100,
        "followDirectorySymlinks": false}})
}

fn with_sandbox(mut params: Value, intent: &Value) -> Value {
    params["sandbox"] = intent.clone();
    params
}

/// The params of a file call on `relative` in `root`: `fields` beside its path, under `intent`.
fn call_in(root: &HostDir, relative: &str, mut fields: Value, intent: &Value) -> Value {
    fields["path"] = json!(root.uri(relative));
    with_sandbox(fields, intent)
}

async fn fs_reads_of_a_none_entry_are_denied(target: Target) {
    let root = HostDir::new(target, "fs-none");
    let (_server, mut client) = started(target).await;
    for access in ["none", "deny"] {
        let intent = hiding_intent(&root, access);
        let mut call = async |method: &str, params: Value| {
            client.call(method, with_sandbox(params, &intent)).await.unwrap()
        };
        let write = json!({"path": root.uri("secret"), "dataBase64": "eA=="});
        assert_error(call("fs/writeFile", write).await.unwrap_err(), -32603, EROFS);
        // Hidden files read as the kernel refuses them, whichever way they are reached.
        for (method, relative) in [
            ("fs/readFile", "secret"),
            ("fs/readFile", "link"),
            ("fs/readFile", "hidden/inner"),
            ("fs/readFile", "x.env"),
            ("fs/getMetadata", "hidden/inner"),
            ("fs/readDirectory", "hidden"),
            ("fs/canonicalize", "hidden/inner"),
        ] {
            let error = call(method, json!({"path": root.uri(relative)})).await.unwrap_err();
            assert_eq!(
                (error.code, error.message.as_str()),
                (-32600, EACCES),
                "{method} {relative}"
            );
        }
        let open = json!({"handleId": format!("h-{access}"), "path": root.uri("secret")});
        assert_error(call("fs/open", open).await.unwrap_err(), -32600, EACCES);
        // What hides them is visible: an empty file, an empty directory.
        let secret = call("fs/getMetadata", json!({"path": root.uri("secret")})).await.unwrap();
        assert_eq!((secret["isFile"].clone(), secret["size"].clone()), (json!(true), json!(0)));
        let hidden = call("fs/getMetadata", json!({"path": root.uri("hidden")})).await.unwrap();
        assert_eq!(hidden["isDirectory"], true);
        let canonical = call("fs/canonicalize", json!({"path": root.uri("link")})).await.unwrap();
        assert_eq!(canonical["path"], root.uri("secret"));
        let listing = call("fs/readDirectory", json!({"path": root.uri("")})).await.unwrap();
        let names: BTreeSet<&str> = listing["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["fileName"].as_str().unwrap())
            .collect();
        for name in ["secret", "hidden", "public", "link", "x.env"] {
            assert!(names.contains(name), "{name} listed: {names:?}");
        }
        // A walk reports the hidden directory as an error and goes on.
        let unreadable = json!([{"path": root.uri("hidden"), "message": EACCES}]);
        let walk = call("fs/walk", walk_params(root.uri("hidden"))).await.unwrap();
        assert_eq!(walk, json!({"entries": [], "errors": unreadable, "truncated": false}));
        let walk = call("fs/walk", walk_params(root.uri(""))).await.unwrap();
        assert_eq!(walk["errors"], unreadable);
        let paths: Vec<&str> = walk["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap())
            .collect();
        assert!(paths.contains(&root.uri("public").as_str()), "{paths:?}");
        assert!(!paths.contains(&root.uri("hidden/inner").as_str()), "{paths:?}");

        let public = call("fs/readFile", json!({"path": root.uri("public")})).await.unwrap();
        assert_eq!(public["dataBase64"], b64encode(b"hello\n"), "{access}");
        let hostname = call("fs/readFile", json!({"path": "file:///etc/hostname"})).await.unwrap();
        assert_eq!(hostname["dataBase64"], b64encode(&std::fs::read("/etc/hostname").unwrap()));
    }
    assert_eq!(root.read("secret"), "s3cret\n");
}

async fn fs_open_under_a_sandbox_reads_and_writes_what_it_allows(target: Target) {
    let root = HostDir::new(target, "fs-open");
    let outside = HostDir::new(target, "fs-open-outside");
    root.file(".git/config", "[core]\n");
    let intent = hiding_intent(&root, "none");
    let (_server, mut client) = started(target).await;
    let mut call = async |method: &str, params: Value| {
        client.call(method, with_sandbox(params, &intent)).await.unwrap()
    };

    let open = json!({"handleId": "read", "path": root.uri("public")});
    assert_eq!(call("fs/open", open).await.unwrap(), json!({"handleId": "read"}));
    let block = call("fs/readBlock", json!({"handleId": "read", "offset": 0, "len": 64})).await;
    assert_eq!(block.unwrap(), json!({"chunk": b64encode(b"hello\n"), "eof": true}));

    let open = json!({"handleId": "write", "path": root.uri("new"), "mode": "replace"});
    assert_eq!(call("fs/open", open).await.unwrap(), json!({"handleId": "write"}));
    let block = json!({"handleId": "write", "offset": 0, "chunk": b64encode(b"streamed")});
    assert_eq!(call("fs/writeBlock", block).await.unwrap(), json!({}));
    assert_eq!(call("fs/close", json!({"handleId": "write"})).await.unwrap(), json!({}));
    assert_eq!(root.read("new"), "streamed");

    for (id, uri) in [
        ("hidden", root.uri("secret")),
        ("protected", root.uri(".git/config")),
        ("outside", outside.uri("escaped")),
    ] {
        let open = json!({"handleId": id, "path": uri, "mode": "replace"});
        assert_error(call("fs/open", open).await.unwrap_err(), -32603, EROFS);
    }
    assert_eq!(
        (root.read("secret"), root.read(".git/config")),
        ("s3cret\n".into(), "[core]\n".into())
    );
    assert!(!outside.exists("escaped"));
}

/// Without `root` read, file calls see the roots and what Tether and the reference need to
/// run (`/etc`, `/usr`, …), and nothing else; writes land in the roots only. A write outside
/// them is refused by Tether; the reference answers `{}` for a write into its scratch root that
/// vanishes with the helper.
async fn fs_without_root_read_sees_the_roots_and_the_platform_only(target: Target) {
    let root = HostDir::new(target, "fs-noread");
    let outside = HostDir::new(target, "fs-noread-outside");
    root.file("public", "hello\n");
    outside.file("o", "out\n");
    let intent = fs_intent(vec![special("project_roots", "write")], &root);
    let (_server, mut client) = started(target).await;
    let mut call = async |method: &str, params: Value| {
        client.call(method, with_sandbox(params, &intent)).await.unwrap()
    };
    let read = call("fs/readFile", json!({"path": root.uri("public")})).await.unwrap();
    assert_eq!(read["dataBase64"], b64encode(b"hello\n"));
    let hostname = call("fs/readFile", json!({"path": "file:///etc/hostname"})).await.unwrap();
    assert_eq!(hostname["dataBase64"], b64encode(&std::fs::read("/etc/hostname").unwrap()));
    let error = call("fs/readFile", json!({"path": outside.uri("o")})).await.unwrap_err();
    assert_error(error, -32004, ENOENT);
    // A stream (`sandboxedFileStreaming`): the file is opened inside the sandbox.
    let open = json!({"handleId": "in", "path": root.uri("public")});
    assert_eq!(call("fs/open", open).await.unwrap(), json!({"handleId": "in"}));
    let block = call("fs/readBlock", json!({"handleId": "in", "offset": 0, "len": 64})).await;
    assert_eq!(block.unwrap(), json!({"chunk": b64encode(b"hello\n"), "eof": true}));
    let open = json!({"handleId": "out", "path": outside.uri("o")});
    assert_error(call("fs/open", open).await.unwrap_err(), -32004, ENOENT);

    let write = json!({"path": root.uri("written"), "dataBase64": b64encode(b"in")});
    assert_eq!(call("fs/writeFile", write).await.unwrap(), json!({}));
    assert_eq!(root.read("written"), "in");
    let write = json!({"path": format!("{}-escaped", root.uri("")), "dataBase64": "eA=="});
    let answer = call("fs/writeFile", write).await;
    match target {
        Target::Tether => assert_error(answer.unwrap_err(), -32603, EROFS),
        Target::Reference => assert_eq!(answer.unwrap(), json!({})),
    }
    assert!(!PathBuf::from(format!("{}-escaped", root.display(""))).exists());
}

/// `minimal` gives a command the platform (`/bin`, `/etc`, `/usr`, …) and the intent's roots;
/// other host paths are not there. A platform path that is a link on the host (`/bin` →
/// `usr/bin` where `/usr` is merged) is the directory it leads to.
async fn a_minimal_intent_runs_on_the_platform_and_the_roots(target: Target) {
    let root = HostDir::new(target, "minimal");
    let outside = HostDir::new(target, "minimal-outside");
    root.file("public", "hello\n");
    outside.file("o", "out\n");
    let (_server, mut client) = started(target).await;
    let entries = vec![special("minimal", "read"), special("project_roots", "write")];
    let script = format!(
        "stat -c %F /bin /lib /usr && cat /etc/hostname public && echo w > w && cat {}",
        outside.display("o")
    );
    let finished =
        run(&mut client, sandboxed("minimal", &script, &root, process_intent(entries, &root)))
            .await;
    let hostname = std::fs::read_to_string("/etc/hostname").unwrap();
    assert_eq!(finished.stdout, format!("directory\ndirectory\ndirectory\n{hostname}hello\n"));
    assert_eq!(
        finished.stderr,
        format!("cat: {}: {}\n", outside.display("o"), "No such file or directory")
    );
    assert_eq!(finished.exit_code, 1);
    assert_eq!(root.read("w"), "w\n");
}

/// A `none` path that does not exist cannot be created: in a writable root its first missing
/// component is an empty read-only file while the sandbox lives (`stat` mode 600, as bubblewrap
/// makes it), made on the host and gone from it afterwards; where nothing is writable it is
/// simply not there.
async fn a_missing_none_path_cannot_be_created(target: Target) {
    let root = HostDir::new(target, "none-missing");
    let (_server, mut client) = started(target).await;
    let mut entries = workspace_write_entries();
    for relative in ["absent", "nodir/absent"] {
        entries
            .push(json!({"path": {"type": "path", "path": root.uri(relative)}, "access": "none"}));
    }
    let script =
        "stat -c '%F %a %s' absent nodir; echo x > absent; mkdir nodir; echo y > nodir/absent";
    let finished = run(
        &mut client,
        sandboxed("none-missing", script, &root, process_intent(entries.clone(), &root)),
    )
    .await;
    assert_eq!(finished.stdout, "regular empty file 600 0\nregular empty file 600 0\n");
    assert_eq!(
        finished.stderr,
        "/bin/sh: 1: cannot create absent: Read-only file system\n\
         mkdir: cannot create directory 'nodir': File exists\n\
         /bin/sh: 1: cannot create nodir/absent: Directory nonexistent\n"
    );
    assert_eq!(root.names(), BTreeSet::new(), "the targets are gone from the host");

    let write = json!({"path": root.uri("absent"), "dataBase64": "eA==", "sandbox": fs_intent(entries, &root)});
    assert_error(client.err("fs/writeFile", write).await.unwrap(), -32603, EROFS);
    assert_eq!(root.names(), BTreeSet::new());

    // Where nothing is writable, nothing could create it: it is left missing.
    let mut entries = read_only_entries();
    entries.push(json!({"path": {"type": "path", "path": root.uri("absent")}, "access": "none"}));
    let script = "stat -c '%F' absent";
    let finished = run(
        &mut client,
        sandboxed("none-missing-ro", script, &root, process_intent(entries, &root)),
    )
    .await;
    assert_eq!(finished.stderr, "stat: cannot statx 'absent': No such file or directory\n");
    assert_eq!(root.names(), BTreeSet::new());
}

// ---------------------------------------------------------------------------------------------
// 11. Sandboxed and unsandboxed processes on one session

/// The Codex daemon's socket directory (`/tmp/codex-daemon-<uid>`, private to its user) is an
/// empty, unreadable, read-only directory in every full sandbox, the network enabled or not: a
/// Unix socket needs no network, and the daemon runs what it is asked unconfined. Where `/tmp`
/// is a writable root too, the mask is laid again over its bind. On the host the directory and
/// what is in it stay as they were (both servers make it, private, when it is missing).
async fn the_app_server_socket_dir_is_masked_in_every_full_sandbox(target: Target) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // `/proc/self` belongs to whoever looks at it: this process's user, the servers'.
    let uid = std::fs::metadata("/proc/self").unwrap().uid();
    let dir = PathBuf::from(format!("/tmp/codex-daemon-{uid}"));
    match std::fs::DirBuilder::new().recursive(false).create(&dir) {
        Ok(()) => std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap(),
        Err(error) => assert_eq!(error.kind(), ErrorKind::AlreadyExists, "{error}"),
    }
    let socket = dir.join(format!("tether-test-{}-{target:?}", std::process::id()));
    std::fs::write(&socket, "daemon").unwrap();
    let root = HostDir::new(target, "socket-dir");
    let (_server, mut client) = started(target).await;
    let d = dir.display();
    let script = format!(
        "stat -c '%a %s %F' {d}; ls {d} 2>&1; cat {d}/* 2>&1; touch {d}/x 2>&1; \\
         grep -c ' {d} ' /proc/self/mountinfo"
    );
    let read_only = process_intent(read_only_entries(), &root);
    let workspace_write = process_intent(workspace_write_entries(), &root);
    let networked = edited(&workspace_write, |intent| {
        intent["permissions"]["network"] = json!("enabled");
    });
    let mut seen = Vec::new();
    for (name, intent) in [("ro", read_only), ("ww", workspace_write), ("ww-net", networked)] {
        seen.push(run(&mut client, sandboxed(name, &script, &root, intent)).await);
    }
    // Taken out of the user's directory before anything is asserted.
    let left = std::fs::read_to_string(&socket);
    std::fs::remove_file(&socket).unwrap();
    for ((name, mounts), finished) in [("ro", 1), ("ww", 2), ("ww-net", 2)].into_iter().zip(seen) {
        assert_eq!(
            finished.stdout,
            format!(
                "0 40 directory\n\
                 ls: cannot open directory '{d}': Permission denied\n\
                 cat: '{d}/*': Permission denied\n\
                 touch: cannot touch '{d}/x': Permission denied\n\
                 {mounts}\n"
            ),
            "{name}: {finished:?}"
        );
        assert_eq!((finished.exit_code, finished.sandbox_denied), (0, false), "{name}");
    }
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700);
    assert_eq!(left.unwrap(), "daemon");
}

/// A socket directory that is not the server user's own, private directory (here: another
/// user's) could not be trusted to be the one the mask hides: every full sandbox is refused —
/// the start answered, the command never run, exit 1 in the reference's words. The server runs
/// as a uid of a user namespace of its own (one per server, as the two run at once), so that no
/// other scenario's directory is touched; the directory is the host's `nobody`'s.
async fn a_foreign_app_server_socket_dir_refuses_every_full_sandbox(target: Target) {
    let uid = match target {
        Target::Tether => 4242,
        Target::Reference => 4243,
    };
    let dir = PathBuf::from(format!("/tmp/codex-daemon-{uid}"));
    let _ = std::fs::remove_dir(&dir);
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    let root = HostDir::new(target, "foreign-socket-dir");
    let home = HostDir::new(target, "foreign-socket-dir-home");
    let script = format!("touch {}", root.display("ran"));
    let params = sandboxed("p", &script, &root, process_intent(read_only_entries(), &root));
    let server = match target {
        Target::Tether => format!(
            "{} serve --listen stdio",
            tether_testkit::server::tether_binary().unwrap().display()
        ),
        Target::Reference => {
            format!(
                "{} exec-server --listen stdio",
                tether_testkit::server::reference_binary().unwrap().display()
            )
        }
    };
    let map_user = format!("--map-user={uid}");
    let launcher = ["unshare", "--user", &map_user, "/bin/sh", "-c", &format!("exec {server}")];
    let env = [("CODEX_HOME", home.display(""))];
    let env: Vec<(&str, &str)> = env.iter().map(|(key, value)| (*key, value.as_str())).collect();
    let seen = stdio_session(&launcher, &env, params).await;
    let write = json!({"path": root.uri("written"), "dataBase64": "eA==",
        "sandbox": fs_intent(workspace_write_entries(), &root)});
    let written = stdio_answer(&launcher, &env, "fs/writeFile", write).await;
    std::fs::remove_dir(&dir).unwrap();
    assert_eq!(
        written["error"],
        json!({"code": -32603, "message": "fs sandbox helper failed with status exit status: 1: \
            error building bubblewrap command: app-server socket directory must be a \
            user-owned directory with mode 0700"})
    );
    assert!(!root.exists("written"));
    assert_eq!(start_result(&seen)["sandboxType"], "linuxSeccomp", "{seen:?}");
    let (stderr, exited) = stderr_and_exit(&seen);
    assert_eq!(
        stderr,
        "error building bubblewrap command: app-server socket directory must be a user-owned \
         directory with mode 0700\n"
    );
    assert_eq!(
        (exited["exitCode"].clone(), exited["sandboxDenied"].clone()),
        (json!(1), json!(false))
    );
    assert!(!root.exists("ran"), "the command never ran");
}

/// A `none` glob hides the regular files it matches below the directory its literal part
/// names, a relative one in the policy cwd: never a directory (what is in it stays readable),
/// never a link, never the directory searched; `*` stays within a name, `**` spans
/// directories, `[…]` and `{a,b}` choose. A directory that is not there hides nothing.
async fn none_globs_hide_the_regular_files_found_from_their_directory(target: Target) {
    let root = HostDir::new(target, "none-globs");
    for file in ["zz", "a/zz", "a/b/c/zz", "d2/inner"] {
        root.file(file, "x");
    }
    std::os::unix::fs::symlink(root.path("zz"), root.path("lf")).unwrap();
    let (_server, mut client) = started(target).await;
    let r = root.display("");
    // R readable, D denied: zz, a/zz, a/b/c/zz, d2/inner, lf (a link to zz), a (a directory).
    let script = "for f in zz a/zz a/b/c/zz d2/inner; do \
                  if cat $f >/dev/null 2>&1; then printf R; else printf D; fi; done; \
                  if readlink lf >/dev/null; then printf L; fi; if ls a >/dev/null; then echo R; fi";
    let cases = [
        ("z?", "DRRRLR"),
        ("**/zz", "DDDRLR"),
        ("./a/*", "RDRRLR"),
        (&format!("{r}/**") as &str, "DDDDLR"),
        (&format!("{r}/*"), "DRRRLR"),
        (&format!("{r}/[dz]*/*"), "RRRDLR"),
        (&format!("{r}/{{zz,lf,a}}?"), "RRRRLR"),
        (&format!("{r}/{{z,lf,a}}?"), "DRRRLR"),
        (&format!("{r}/a/**/"), "RDDRLR"),
        (&format!("{r}/missing/*"), "RRRRLR"),
        (&format!("{r}/zz/*"), "RRRRLR"),
    ];
    for (index, (pattern, expected)) in cases.into_iter().enumerate() {
        let mut entries = read_only_entries();
        entries
            .push(json!({"path": {"type": "glob_pattern", "pattern": pattern}, "access": "none"}));
        let id = format!("glob-{index}");
        let finished =
            run(&mut client, sandboxed(&id, script, &root, process_intent(entries, &root))).await;
        assert_eq!(finished.stdout, format!("{expected}\n"), "{pattern}: {finished:?}");
    }
}

/// A `none` glob with no directory to start from — a wildcard right after `/`, or none at
/// all (`{a,b}` alone is none) — would search the whole filesystem or is no glob: the sandbox is not built, for a
/// command (exit 1) and for a file call (`-32603`), in the reference's words.
async fn none_globs_that_would_search_everything_are_refused(target: Target) {
    let root = HostDir::new(target, "none-glob-refused");
    root.file("file", "x");
    let (_server, mut client) = started(target).await;
    let glob = |pattern: &str| json!({"path": {"type": "glob_pattern", "pattern": pattern}, "access": "none"});
    let refusal = |pattern: &str| {
        format!(
            "error building bubblewrap command: Fatal error: unreadable glob `{pattern}` cannot be \
             safely expanded; use a pattern with a non-root directory prefix"
        )
    };
    let literal = root.display("file");
    let alternatives = root.display("{file,other}");
    for (index, pattern) in ["/**/file", "/*/file", &literal, &alternatives].into_iter().enumerate()
    {
        let mut entries = read_only_entries();
        entries.push(glob(pattern));
        let id = format!("refused-{index}");
        let script = format!("touch {}", root.display("ran"));
        let finished =
            run(&mut client, sandboxed(&id, &script, &root, process_intent(entries, &root))).await;
        assert_eq!(finished.stderr, format!("{}\n", refusal(pattern)), "{pattern}");
        assert_eq!(finished.exit_code, 1, "{pattern}");
        assert!(!root.exists("ran"), "{pattern}: the command never ran");
    }
    let mut entries = workspace_write_entries();
    entries.push(glob("/*/file"));
    let write = json!({"path": root.uri("written"), "dataBase64": "eA==",
        "sandbox": fs_intent(entries, &root)});
    let error = client.err("fs/writeFile", write).await.unwrap();
    assert_error(
        error,
        -32603,
        &format!("fs sandbox helper failed with status exit status: 1: {}", refusal("/*/file")),
    );
    assert!(!root.exists("written"));
}

/// Below a hidden directory, a writable root is still reached: the hidden directory can be
/// passed through but not listed (mode 111), nothing else is in it, and the root is writable
/// with its protected names. A read grant below a hidden directory leaves it
/// hidden (the reference binds it before the mask that covers it).
async fn grants_below_a_hidden_directory(target: Target) {
    let root = HostDir::new(target, "hidden-grants");
    for file in ["hidden/x", "hidden/w/y", "other/z"] {
        root.file(file, "x");
    }
    let (_server, mut client) = started(target).await;
    let entry = |path: &str, access: &str| json!({"path": {"type": "path", "path": root.uri(path)}, "access": access});
    let mut entries = workspace_write_entries();
    entries.extend([
        entry("hidden", "none"),
        entry("hidden/w", "write"),
        entry("other", "none"),
        entry("other/z", "read"),
    ]);
    let script = "stat -c %a hidden; ls hidden 2>&1; cat hidden/x other/z 2>&1; cat hidden/w/y; \
                  echo new > hidden/w/new && touch hidden/w/.git/x 2>&1; echo done";
    let finished =
        run(&mut client, sandboxed("hidden-grants", script, &root, process_intent(entries, &root)))
            .await;
    assert_eq!(
        finished.stdout,
        "111\n\
         ls: cannot open directory 'hidden': Permission denied\n\
         cat: hidden/x: No such file or directory\n\
         cat: other/z: Permission denied\n\
         xtouch: cannot touch 'hidden/w/.git/x': Read-only file system\n\
         done\n",
        "{finished:?}"
    );
    assert_eq!(root.read("hidden/w/new"), "new\n");
}

/// A protected name that the intent itself grants `write` is the intent's: an existing `.git`
/// is writable, and a missing `.agents` can be made and written (nothing stands in its place).
async fn a_protected_name_the_intent_makes_writable_is_writable(target: Target) {
    let root = HostDir::new(target, "granted-names");
    root.file(".git/config", "x");
    let (_server, mut client) = started(target).await;
    let mut entries = workspace_write_entries();
    for name in [".git", ".agents"] {
        entries.push(json!({"path": {"type": "path", "path": root.uri(name)}, "access": "write"}));
    }
    let script = "echo g > .git/new && mkdir .agents && echo a > .agents/new && echo done";
    let finished =
        run(&mut client, sandboxed("granted", script, &root, process_intent(entries, &root))).await;
    assert_eq!((finished.stdout.as_str(), finished.stderr.as_str()), ("done\n", ""));
    assert_eq!(root.read(".git/new"), "g\n");
    assert_eq!(root.read(".agents/new"), "a\n");
}

/// A NUL in the environment fails a sandboxed start too, in `std::process::Command`'s words
/// for a pipe and a PTY alike, as the reference says it (0.169 said `CString`'s for a PTY).
async fn a_nul_byte_in_the_environment_is_refused_under_an_intent(target: Target) {
    let root = HostDir::new(target, "nul-env");
    let (_server, mut client) = started(target).await;
    for (tty, message) in
        [(false, "data provided contains a nul byte"), (true, "data provided contains a nul byte")]
    {
        let mut params = sandboxed(
            &format!("nul-{tty}"),
            "true",
            &root,
            process_intent(read_only_entries(), &root),
        );
        params["tty"] = json!(tty);
        params["env"]["A"] = json!("x\u{0}y");
        let error = client.err("process/start", params).await.unwrap();
        assert_error(error, -32603, message);
    }
}

async fn an_unsandboxed_process_after_a_sandboxed_one_writes_anywhere(target: Target) {
    let root = HostDir::new(target, "mixed");
    let outside = HostDir::new(target, "mixed-outside");
    let (_server, mut client) = started(target).await;
    let script = format!("touch {}", outside.display("written"));
    let intent = process_intent(workspace_write_entries(), &root);
    let finished = run(&mut client, sandboxed("sandboxed", &script, &root, intent)).await;
    assert_eq!(finished.exit_code, 1);
    assert!(!outside.exists("written"));

    let params = sandboxed("free", &format!("{script} && echo $$"), &root, Value::Null);
    let result = client.ok("process/start", params).await.unwrap();
    assert_eq!(result, json!({"processId": "free", "sandboxType": "none"}));
    let finished = finish(&mut client, "free").await;
    assert_eq!(finished.exit_code, 0);
    assert_ne!(finished.stdout, "2\n", "no pid namespace");
    assert!(outside.exists("written"));
}

// ---------------------------------------------------------------------------------------------
// 12. Fail closed (Tether only: the reference ships a bubblewrap of its own)

/// Serves one stdio session with `tether serve` started by `launcher` (a command line that ends
/// by running the server), starts `params`, and returns every line the server wrote up to the
/// process's close.
async fn stdio_session(launcher: &[&str], env: &[(&str, &str)], params: Value) -> Vec<Value> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut command = tokio::process::Command::new(launcher[0]);
    command
        .args(&launcher[1..])
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let mut server = command.spawn().unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let requests = [
        json!({"id": 1, "method": "initialize", "params": {"clientName": "fail-closed"}}),
        json!({"method": "initialized", "params": {}}),
        json!({"id": 2, "method": "process/start", "params": params}),
    ];
    for request in requests {
        stdin.write_all(format!("{request}\n").as_bytes()).await.unwrap();
    }
    // Until both the start's answer and the close are in: the protocol orders a process's
    // notifications by `seq`, not against responses, so either may come last.
    let mut seen: Vec<Value> = Vec::new();
    let finished = |seen: &[Value]| {
        let answer = seen.iter().find(|m| m["id"] == 2);
        // A refused start has no process to close.
        answer.is_some_and(|answer| answer.get("error").is_some())
            || (answer.is_some() && seen.iter().any(|m| m["method"] == "process/closed"))
    };
    while !finished(&seen) {
        let Some(line) = lines.next_line().await.unwrap() else { break };
        seen.push(serde_json::from_str(&line).unwrap());
    }
    drop(stdin);
    let _ = server.wait().await;
    seen
}

/// The answer to one request (`method` with `params`) in a stdio session of its own.
async fn stdio_answer(
    launcher: &[&str],
    env: &[(&str, &str)],
    method: &str,
    params: Value,
) -> Value {
    let mut answers = stdio_answers(launcher, env, &[(method, params)]).await;
    answers.remove(0)
}

/// The answers to `requests`, sent one after the other in one stdio session of its own.
async fn stdio_answers(
    launcher: &[&str],
    env: &[(&str, &str)],
    requests: &[(&str, Value)],
) -> Vec<Value> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut server = tokio::process::Command::new(launcher[0])
        .args(&launcher[1..])
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    for request in [
        json!({"id": 1, "method": "initialize", "params": {"clientName": "stdio"}}),
        json!({"method": "initialized", "params": {}}),
    ] {
        stdin.write_all(format!("{request}\n").as_bytes()).await.unwrap();
    }
    let mut answers = Vec::new();
    for (n, (method, params)) in requests.iter().enumerate() {
        let id = n + 2;
        let request = json!({"id": id, "method": method, "params": params});
        stdin.write_all(format!("{request}\n").as_bytes()).await.unwrap();
        loop {
            let line = lines.next_line().await.unwrap().expect("the server answered");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                answers.push(message);
                break;
            }
        }
    }
    drop(stdin);
    let _ = server.wait().await;
    answers
}

/// The answer to the session's `process/start`. Notifications of the process may come before
/// it: the protocol orders a process's events by `seq`, not against responses.
fn start_result(seen: &[Value]) -> &Value {
    &seen.iter().find(|m| m["id"] == 2).expect("the start was answered")["result"]
}

/// The stderr text and the exit notification of a stdio session's process.
fn stderr_and_exit(seen: &[Value]) -> (String, Value) {
    let stderr = output_of(seen, "stderr");
    let exited = seen.iter().find(|m| m["method"] == "process/exited").expect("an exit").clone();
    (String::from_utf8_lossy(&stderr).into_owned(), exited["params"].clone())
}

/// No bubblewrap on `PATH`: the start is refused as one that cannot be sandboxed here
/// (`-32603`, `data.kind` `sandboxUnavailable`, Codex 0.171's kind for it), saying what is
/// missing and how to install it, and the command never runs. (The reference carries its own
/// sandbox, so it never answers so.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_bubblewrap_nothing_sandboxed_runs() {
    let root = HostDir::new(Target::Tether, "no-bwrap");
    let tether = tether_testkit::server::tether_binary().unwrap();
    let script = format!("touch {}", root.display("ran"));
    for tty in [false, true] {
        let mut params = sandboxed("p", &script, &root, process_intent(read_only_entries(), &root));
        params["tty"] = json!(tty);
        let launcher = [tether.to_str().unwrap(), "serve", "--listen", "stdio"];
        let seen = stdio_session(&launcher, &[("PATH", "/nonexistent")], params).await;
        let answer = seen.iter().find(|m| m["id"] == 2).expect("the start was answered");
        let error = &answer["error"];
        assert_eq!(error["code"], -32603, "{answer}");
        assert_eq!(error["data"], json!({"kind": "sandboxUnavailable"}), "{answer}");
        let message = error["message"].as_str().unwrap();
        assert!(message.starts_with("bubblewrap is unavailable"), "{message}");
        assert!(message.contains("apt-get install bubblewrap"), "{message}");
        assert!(!root.exists("ran"), "the command never ran");
    }
}

/// The start-up log says whether sandboxing is available, and if not why and what to install;
/// written to a pipe, it is plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_up_log_says_whether_sandboxing_is_available() {
    use tokio::io::AsyncBufReadExt;
    let tether = tether_testkit::server::tether_binary().unwrap();
    for (path, expected) in [
        (std::env::var("PATH").unwrap(), "sandboxing available bwrap=/usr/bin/bwrap"),
        ("/nonexistent".to_owned(), "sandboxing unavailable: bubblewrap is unavailable"),
    ] {
        let mut server = tokio::process::Command::new(&tether)
            .args(["serve", "--listen", "ws://127.0.0.1:0"])
            .env("PATH", &path)
            .env_remove("TETHER_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(server.stderr.take().unwrap()).lines();
        let mut log = String::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            log.push_str(&line);
            log.push('\n');
            if line.contains("listening") {
                break;
            }
        }
        server.kill().await.unwrap();
        assert!(log.contains(expected), "{expected:?} in {log}");
        assert!(!log.contains('\x1b'), "no colour codes on a pipe: {log:?}");
    }
}

/// No user namespaces (the server runs in a user namespace that may create none, as sandbox.md
/// §8 simulates it without touching the host): bubblewrap refuses, in its own words, and the
/// command never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_user_namespaces_nothing_sandboxed_runs() {
    let root = HostDir::new(Target::Tether, "no-userns");
    let tether = tether_testkit::server::tether_binary().unwrap();
    let script = format!("touch {}", root.display("ran"));
    let params = sandboxed("p", &script, &root, process_intent(read_only_entries(), &root));
    let serve = format!(
        "echo 0 > /proc/sys/user/max_user_namespaces && exec {} serve --listen stdio",
        tether.display()
    );
    let launcher = ["unshare", "-U", "-r", "/bin/sh", "-c", &serve];
    let seen = stdio_session(&launcher, &[], params).await;
    assert_eq!(start_result(&seen)["sandboxType"], "linuxSeccomp", "{seen:?}");
    let (stderr, exited) = stderr_and_exit(&seen);
    assert_ne!(exited["exitCode"], 0, "{stderr}");
    assert!(stderr.contains("bwrap: "), "bubblewrap says why: {stderr}");
    assert!(!root.exists("ran"), "the command never ran");
}

/// Once a sandbox has been built, a write, a new directory or a removed file below a writable
/// root that the sandbox would show as the host has it is made without one (a missing parent or
/// file answered as the sandbox answers it); everything else still starts bubblewrap (counted
/// by a wrapper around it): a protected name, a link on the way, a FIFO, a directory already
/// there, a tree to remove.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_writes_below_a_root_start_no_sandbox_after_the_first() {
    use std::os::unix::fs::PermissionsExt;
    let root = HostDir::new(Target::Tether, "in-place-count");
    let tools = HostDir::new(Target::Tether, "in-place-tools");
    root.file("real/keep", "");
    std::os::unix::fs::symlink(root.path("real"), root.path("link")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        root.path("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let bwrap = which_bwrap();
    let launches = tools.path("launches");
    let wrapper = tools.path("bwrap");
    let script = format!(
        "#!/bin/sh\necho launch >> '{}'\nexec '{}' \"$@\"\n",
        launches.display(),
        bwrap.display()
    );
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let count = || std::fs::read_to_string(&launches).unwrap_or_default().lines().count();

    let home = HostDir::new(Target::Tether, "in-place-home");
    let args = ["--bwrap", wrapper.to_str().unwrap()];
    let env = [("CODEX_HOME", home.display(""))];
    let env: Vec<(&str, &str)> = env.iter().map(|(key, value)| (*key, value.as_str())).collect();
    let server = ServerProcess::start_with_env(Target::Tether, &args, &env).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let intent = fs_intent(workspace_write_entries(), &root);
    let write = |relative: &str| call_in(&root, relative, json!({"dataBase64": "eA=="}), &intent);
    // The server tried bubblewrap once as it started, to say in its log whether it works.
    let at_start = count();
    let launched = || count() - at_start;

    assert_eq!(client.ok("fs/writeFile", write("first")).await.unwrap(), json!({}));
    assert_eq!(launched(), 1, "the first write builds a sandbox");
    for written in ["second", "real/third", "new-name.txt"] {
        assert_eq!(client.ok("fs/writeFile", write(written)).await.unwrap(), json!({}));
    }
    let missing = client.err("fs/writeFile", write("nope/new")).await.unwrap();
    assert_error(missing, -32004, ENOENT);
    let call = |relative: &str, fields: Value| call_in(&root, relative, fields, &intent);
    let made = call("made/deep/er", json!({}));
    assert_eq!(client.ok("fs/createDirectory", made).await.unwrap(), json!({}));
    let single = call("made/single", json!({"recursive": false}));
    assert_eq!(client.ok("fs/createDirectory", single).await.unwrap(), json!({}));
    assert_eq!(client.ok("fs/remove", call("second", json!({}))).await.unwrap(), json!({}));
    let forced = call("second", json!({"force": true}));
    assert_eq!(client.ok("fs/remove", forced).await.unwrap(), json!({}));
    let gone = call("second", json!({"force": false}));
    assert_error(client.err("fs/remove", gone).await.unwrap(), -32004, ENOENT);
    assert_eq!(launched(), 1, "writes below the root are made in place");
    assert_eq!(root.read("real/third"), "x");
    assert!(root.path("made/deep/er").is_dir() && root.path("made/single").is_dir());
    assert!(!root.exists("second"));

    assert_eq!(client.ok("fs/writeFile", write("link/fourth")).await.unwrap(), json!({}));
    assert_eq!((launched(), root.read("real/fourth")), (2, "x".to_owned()), "a link: the sandbox");
    let protected = client.err("fs/writeFile", write(".git/config")).await.unwrap();
    assert_error(protected, -32603, EROFS);
    assert_eq!(launched(), 3, "a protected name: the sandbox");
    let fifo = client.err("fs/writeFile", write("fifo")).await.unwrap();
    assert_error(fifo, -32603, "No such device or address (os error 6)");
    assert_eq!(launched(), 4, "a FIFO: the sandbox");
    let existing = call("made", json!({"recursive": false}));
    assert_error(client.err("fs/createDirectory", existing).await.unwrap(), -32603, EEXIST);
    assert_eq!(launched(), 5, "a directory already there: the sandbox words it");
    assert_eq!(client.ok("fs/remove", call("made", json!({}))).await.unwrap(), json!({}));
    assert_eq!((launched(), root.exists("made")), (6, false), "a tree: the sandbox");
}

/// Where bubblewrap cannot build a sandbox (no user namespaces), every sandboxed write fails,
/// the second as the first: none is ever made without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_user_namespaces_no_sandboxed_write_is_made() {
    let root = HostDir::new(Target::Tether, "no-userns-writes");
    let tether = tether_testkit::server::tether_binary().unwrap();
    let serve = format!(
        "echo 0 > /proc/sys/user/max_user_namespaces && exec {} serve --listen stdio",
        tether.display()
    );
    let launcher = ["unshare", "-U", "-r", "/bin/sh", "-c", &serve];
    let intent = fs_intent(workspace_write_entries(), &root);
    let write = |name: &str| call_in(&root, name, json!({"dataBase64": "eA=="}), &intent);
    let requests = [("fs/writeFile", write("first")), ("fs/writeFile", write("second"))];
    for answer in stdio_answers(&launcher, &[], &requests).await {
        assert_eq!(answer["error"]["code"], -32603, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("fs sandbox helper failed with status"), "{message}");
    }
    assert_eq!(root.names(), BTreeSet::new(), "nothing was written");
}

fn which_bwrap() -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|dir| dir.join("bwrap"))
        .find(|candidate| candidate.is_file())
        .expect("bubblewrap is installed")
}
