//! Managed network (`process/start {networkProxy}`, spec: `managed-network.md`), each scenario
//! run against Tether and against the reference: the proxy a launch starts for its process,
//! its domain policy and answers, its reports (`network/policyDecision`), the client's
//! decisions (`network/policyRequest`), and what a sandboxed command can reach around it.
//!
//! Origins are real HTTP servers on `127.0.0.1` (the testkit's [`HttpPeer`]), reached with
//! `curl` as a command would; every scenario waits on its process's close and its proxy's
//! reports, never on time.

use serde_json::{Value, json};
use tether_testkit::client::output_of;
use tether_testkit::http_peer::{HttpPeer, host_address};
use tether_testkit::private_network::{
    self, PRIVATE_V4, PUBLIC_NAME, PUBLIC_V4, SHARED_V4, UNIQUE_LOCAL_V6,
};
use tether_testkit::process_stats::{open_fds, serving_pid};
use tether_testkit::{RpcClient, ServerProcess, Target, ToolCall, Verdict, against_both};

mod common;
use common::ExecutorHome;
use common::codex::Workspace;
use common::origins::{MaskedHost, Onward, UpstreamProxy};

against_both!(
    an_allowed_origin_is_reached_and_every_request_reported,
    refused_destinations_get_the_proxys_403,
    limited_mode_lets_only_reads_through,
    the_client_decides_what_the_policy_leaves_open,
    a_sandboxed_command_reaches_nothing_but_its_proxy,
    the_childs_environment_names_its_proxies,
    malformed_launches_are_refused,
    a_managed_network_without_a_proxy_runs_nothing_sandboxed,
    a_proxy_the_caller_runs_is_bridged_into_the_sandbox,
    allowed_upstream_proxies_carry_http_and_tunnels_but_not_socks,
    a_masked_token_is_a_placeholder_in_the_child_and_real_at_its_host,
    credential_providers_are_typed_as_the_reference_types_them,
    a_request_naming_a_unix_socket_is_refused_before_any_policy,
    a_custom_providers_key_reaches_its_prefix_and_nothing_else,
    transparent_tcp_carries_what_ignores_the_proxy_variables,
    transparent_tcp_carries_ipv6_by_name_and_by_address,
    the_servers_transparent_flag_makes_every_sandboxed_launch_transparent,
    codex_asks_its_reviewer_about_a_destination_the_allow_list_misses,
    local_binding_still_needs_the_allow_list,
    with_local_binding_a_wildcard_allows_local_destinations_as_it_allows_names,
    with_local_binding_the_client_decides_local_destinations_the_list_misses,
    private_addresses_go_directly_unless_the_server_sends_them_upstream,
    a_mandatory_tcp_upstream_carries_every_socks5_connection_or_none,
    a_mandatory_tcp_upstream_carries_transparent_tcp,
    a_mandatory_tcp_upstream_refuses_starts_without_a_proxy_of_the_executors_own,
);

/// A `networkProxy` launch as Codex 0.171 sends it, `domains` as given, `changes` applied to
/// `proxy`.
fn launch(domains: Value, changes: Value) -> Value {
    let mut proxy = json!({"enabled": true, "enableSocks5": true, "enableSocks5Udp": false,
        "transparentTcp": false, "allowUpstreamProxy": false,
        "dangerouslyAllowAllUnixSockets": false, "mode": "full", "domains": domains,
        "unixSockets": null, "allowLocalBinding": false});
    for (key, value) in changes.as_object().unwrap() {
        proxy[key] = value.clone();
    }
    json!({"proxy": proxy, "environmentId": "remote",
        "executionId": "00000000-0000-0000-0000-000000000001"})
}

/// `-s workspace-write` with the network on (`network_access = true`), as Codex sends it
/// with managed network: read everything, write the workspace.
fn network_intent(home: &ExecutorHome) -> Value {
    let special = |kind: &str, access: &str| json!({"path": {"type": "special", "value": {"kind": kind}}, "access": access});
    json!({
        "permissions": {"type": "managed", "file_system": {"type": "restricted",
            "entries": [special("root", "read"), special("project_roots", "write")]},
            "network": "enabled"},
        "cwd": home.uri("work"),
        "workspaceRoots": [home.uri("work")],
        "windowsSandboxLevel": "disabled",
        "windowsSandboxProxySettingsMode": "reconcile",
        "useLegacyLandlock": false,
    })
}

/// How a scenario's command runs: unconfined, or in a full sandbox with the network on.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Confined {
    No,
    Sandboxed,
}

/// `process/start` params for `/bin/sh -c script` behind a proxy launched as `launch` says.
fn proxied(
    id: &str,
    script: &str,
    home: &ExecutorHome,
    confined: Confined,
    launch: Value,
) -> Value {
    std::fs::create_dir_all(home.path("work")).unwrap();
    json!({
        "processId": id,
        "argv": ["/bin/sh", "-c", script],
        "cwd": home.uri("work"),
        "env": {"PATH": "/usr/bin:/bin"},
        "tty": false,
        "sandbox": match confined {
            Confined::No => Value::Null,
            Confined::Sandboxed => network_intent(home),
        },
        "enforceManagedNetwork": true,
        "managedNetwork": null,
        "networkProxy": launch,
        "metadata": {"threadId": "0193a7c2-5d1e-7c3a-9f4b-2a6e8d1c0b7f", "toolCallId": "call_0"},
    })
}

/// What a proxied process left: its stdout, its exit code, and its proxy's reports in order.
struct Finished {
    stdout: String,
    exit_code: i64,
    decisions: Vec<Value>,
}

/// Runs a started process until the client has all its events — its `process/closed` and
/// every sequence number below it, as the reference may put `closed` on the wire before an
/// `exited` of lower seq — answering its proxy's questions with `decide` (host → the client's
/// decision), and keeps the reports.
async fn finish(
    client: &mut RpcClient,
    id: &str,
    decide: impl Fn(&str) -> Value,
) -> (Finished, Vec<Value>) {
    let mut events = Vec::new();
    let mut decisions = Vec::new();
    let mut questions = Vec::new();
    let mut closed_seq = None;
    while closed_seq.is_none_or(|seq| (events.len() as u64) < seq) {
        let message = client.notification().await.unwrap();
        match message["method"].as_str().unwrap() {
            "network/policyDecision" => decisions.push(message["params"].clone()),
            "network/policyRequest" => {
                let host = message["params"]["request"]["host"].as_str().unwrap();
                let result = json!({"decision": decide(host)});
                client.send_json(&json!({"id": message["id"], "result": result})).await.unwrap();
                questions.push(message);
            }
            _ if message["params"]["processId"] != id => {}
            method => {
                if method == "process/closed" {
                    closed_seq = message["params"]["seq"].as_u64();
                }
                events.push(message);
            }
        }
    }
    let exited = events.iter().find(|e| e["method"] == "process/exited").unwrap();
    let stdout = String::from_utf8(output_of(&events, "stdout")).unwrap();
    let exit_code = exited["params"]["exitCode"].as_i64().unwrap();
    (Finished { stdout, exit_code, decisions }, questions)
}

async fn run(client: &mut RpcClient, params: Value) -> Finished {
    let id = params["processId"].as_str().unwrap().to_owned();
    client.ok("process/start", params).await.unwrap();
    finish(client, &id, |_| json!({"type": "deny", "reason": "not_allowed"})).await.0
}

/// A decision without what changes from run to run (its time, the process's port).
fn decision(report: &Value) -> Value {
    let mut report = report.clone();
    let object = report.as_object_mut().unwrap();
    assert!(object.remove("timestamp").unwrap().as_str().unwrap().ends_with('Z'));
    assert!(object.remove("client").unwrap().as_str().unwrap().starts_with("127.0.0.1:"));
    report
}

fn port_of(peer: &HttpPeer) -> u16 {
    peer.base_url.rsplit(':').next().unwrap().parse().unwrap()
}

/// The JSON body of the proxy's `403` for a plain HTTP request, as the reference writes it.
fn blocked_body(host: &str, reason: &str, source: &str, port: u16, message: &str) -> String {
    format!(
        "{{\"status\":\"blocked\",\"host\":\"{host}\",\"reason\":\"{reason}\",\"decision\":\"deny\",\
         \"source\":\"{source}\",\"protocol\":\"http\",\"port\":{port},\"message\":\"{message}\"}}"
    )
}

/// The proxy's `403` as `curl -D -` prints it (`\r` and `date:` removed), then an `echo`.
fn forbidden(error: &str, body: String) -> String {
    format!(
        "HTTP/1.1 403 Forbidden\ncontent-type: application/json\nx-proxy-error: {error}\n\
         content-length: {}\n\n{body}\n\n",
        body.len()
    )
}

/// Each report's `(host, protocol, decision, source, reason, policyOverride)`.
fn reported(decisions: &[Value]) -> Vec<(String, String, String, String, String, bool)> {
    decisions
        .iter()
        .map(|d| {
            let text = |key: &str| d[key].as_str().unwrap().to_owned();
            let overridden = d["policyOverride"].as_bool().unwrap();
            (
                text("host"),
                text("protocol"),
                text("decision"),
                text("source"),
                text("reason"),
                overridden,
            )
        })
        .collect()
}

/// A report as [`reported`] reads it.
fn report(
    host: &str,
    protocol: &str,
    decision: &str,
    source: &str,
    reason: &str,
    overridden: bool,
) -> (String, String, String, String, String, bool) {
    let owned = |text: &str| text.to_owned();
    (owned(host), owned(protocol), owned(decision), owned(source), owned(reason), overridden)
}

/// A destination the policy allows is reached through the HTTP proxy (GET and POST, headers
/// and body as sent, no proxy header passed on) and through SOCKS5, confined or not; each
/// request is one `allow` report, in the reference's words.
async fn an_allowed_origin_is_reached_and_every_request_reported(target: Target) {
    let peer = HttpPeer::start().await.unwrap();
    let port = port_of(&peer);
    for confined in [Confined::No, Confined::Sandboxed] {
        let home = ExecutorHome::new("network", target, &format!("allowed-{confined:?}"));
        let (_server, mut client) = home.started(target).await;
        let script = format!(
            "curl -sS -x \"$HTTP_PROXY\" -H 'Proxy-Connection: keep-alive' {url}/get?x=1; echo; \
             curl -sS -x \"$HTTP_PROXY\" --data-binary posted {url}/post; echo; \
             curl -sS --proxy \"$ALL_PROXY\" {url}/socks; echo",
            url = peer.base_url
        );
        let domains = json!({"127.0.0.1": "allow"});
        let params = proxied("p", &script, &home, confined, launch(domains, json!({})));
        let finished = run(&mut client, params).await;
        assert_eq!(finished.exit_code, 0, "{confined:?}: {}", finished.stdout);
        let answers: Vec<Value> =
            finished.stdout.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
        assert_eq!(answers.len(), 3, "{}", finished.stdout);
        assert_eq!(
            (answers[0]["method"].as_str(), answers[0]["path"].as_str()),
            (Some("GET"), Some("/get"))
        );
        assert_eq!(answers[1]["method"], "POST");
        assert_eq!(answers[1]["bodyBase64"], tether_testkit::client::b64encode(b"posted"));
        assert_eq!(answers[2]["path"], "/socks");
        for answer in &answers {
            let names: Vec<&str> = answer["headers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|pair| pair[0].as_str().unwrap())
                .collect();
            assert!(!names.iter().any(|name| name.starts_with("proxy-")), "{names:?}");
        }
        let reported: Vec<Value> = finished.decisions.iter().map(decision).collect();
        let allowed = |protocol: &str, method: Option<&str>| {
            let mut report = json!({"processId": "p", "scope": "domain", "decision": "allow",
                "source": "baseline_policy", "reason": "allow", "protocol": protocol,
                "host": "127.0.0.1", "port": port, "policyOverride": false});
            if let Some(method) = method {
                report["method"] = json!(method);
            }
            report
        };
        assert_eq!(
            reported,
            [
                allowed("http", Some("GET")),
                allowed("http", Some("POST")),
                allowed("socks5_tcp", None)
            ],
            "{confined:?}"
        );
    }
}

/// What the policy refuses gets a `403` saying which rule refused it and why, and one `deny`
/// report: a denied name (a deny pattern wins over an allow), a name no pattern allows, a
/// loopback address and `localhost` (local unless allowed exactly), over plain HTTP and
/// `CONNECT`; SOCKS5 refuses with its own reply. The origin sees none of them.
async fn refused_destinations_get_the_proxys_403(target: Target) {
    let peer = HttpPeer::start().await.unwrap();
    let home = ExecutorHome::new("network", target, "refused");
    let (_server, mut client) = home.started(target).await;
    let port = port_of(&peer);
    let script = format!(
        "for url in http://blocked.example.test/ http://other.example.test:81/ \
         http://[::1]:{port}/ http://localhost:{port}/; do \
           curl -sS -x \"$HTTP_PROXY\" -D - \"$url\" | tr -d '\\r' | grep -iv '^date:'; echo; done; \
         curl -sS -p -x \"$HTTP_PROXY\" https://other.example.test/ 2>&1 | head -c 0; \
         curl -sS --proxy \"$ALL_PROXY\" http://other.example.test/; echo \"socks: $?\""
    );
    let domains = json!({"**.example.test": "allow", "blocked.example.test": "deny"});
    let params = proxied("p", &script, &home, Confined::No, launch(domains, json!({})));
    let finished = run(&mut client, params).await;
    let body = |host: &str, reason: &str, port: u16, message: &str| {
        blocked_body(host, reason, "baseline_policy", port, message)
    };
    let local = "Sandbox policy blocks local/private network addresses.";
    let expected = [
        forbidden(
            "blocked-by-denylist",
            body("blocked.example.test", "denied", 80, "Domain denied by the sandbox policy."),
        ),
        forbidden(
            "blocked-by-allowlist",
            body("other.example.test", "not_allowed_local", 81, local),
        ),
        forbidden("blocked-by-allowlist", body("::1", "not_allowed_local", port, local)),
        forbidden("blocked-by-allowlist", body("localhost", "not_allowed_local", port, local)),
    ]
    .concat();
    assert_eq!(finished.stdout, format!("{expected}socks: 97\n"));
    let reasons: Vec<(String, String, String)> = finished
        .decisions
        .iter()
        .map(|d| {
            let text = |key: &str| d[key].as_str().unwrap().to_owned();
            (text("host"), text("protocol"), text("reason"))
        })
        .collect();
    let expected: Vec<(String, String, String)> = [
        ("blocked.example.test", "http", "denied"),
        ("other.example.test", "http", "not_allowed_local"),
        ("::1", "http", "not_allowed_local"),
        ("localhost", "http", "not_allowed_local"),
        ("other.example.test", "https_connect", "not_allowed_local"),
        ("other.example.test", "socks5_tcp", "not_allowed_local"),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    .collect();
    assert_eq!(reasons, expected);
    assert!(finished.decisions.iter().all(|d| d["decision"] == "deny"));
    assert_eq!(peer.connections(), 0, "no refused request reached the origin");
}

/// `limited` mode lets GET through and refuses a POST with the method policy's `403`: the
/// destination is allowed first (one report), then the method refused (a second,
/// `non_domain` report).
async fn limited_mode_lets_only_reads_through(target: Target) {
    let peer = HttpPeer::start().await.unwrap();
    let home = ExecutorHome::new("network", target, "limited");
    let (_server, mut client) = home.started(target).await;
    let script = format!(
        "curl -sS -o /dev/null -w '%{{http_code}}\\n' -x \"$HTTP_PROXY\" {url}/read; \
         curl -sS -D - -o /dev/null -x \"$HTTP_PROXY\" --data x {url}/write | tr -d '\\r' | grep -i '^x-proxy-error'",
        url = peer.base_url
    );
    let params = proxied(
        "p",
        &script,
        &home,
        Confined::No,
        launch(json!({"127.0.0.1": "allow"}), json!({"mode": "limited"})),
    );
    let finished = run(&mut client, params).await;
    assert_eq!(finished.stdout, "200\nx-proxy-error: blocked-by-method-policy\n");
    let steps: Vec<(&str, &str, &str, &str)> = finished
        .decisions
        .iter()
        .map(|d| {
            let text = |key: &str| d[key].as_str().unwrap();
            (text("scope"), text("decision"), text("source"), text("reason"))
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("domain", "allow", "baseline_policy", "allow"),
            ("domain", "allow", "baseline_policy", "allow"),
            ("non_domain", "deny", "mode_guard", "method_not_allowed"),
        ]
    );
}

/// With `policyDecisionTimeoutMs`, every destination the allow list misses is asked of the
/// client (`network/policyRequest`, ids from 1): its denial is the `403` and a `decider`
/// report; its approval lets the request on to the policy's other checks (here: the name
/// resolves to nothing, which is refused as local).
async fn the_client_decides_what_the_policy_leaves_open(target: Target) {
    let home = ExecutorHome::new("network", target, "decider");
    let (_server, mut client) = home.started(target).await;
    let script = "curl -sS -x \"$HTTP_PROXY\" http://approved.test:9/; echo; \
                  curl -sS -x \"$HTTP_PROXY\" http://refused.test:9/; echo";
    let mut launch = launch(json!({"listed.test": "allow"}), json!({}));
    launch["policyDecisionTimeoutMs"] = json!(60_000);
    client.ok("process/start", proxied("p", script, &home, Confined::No, launch)).await.unwrap();
    let (finished, questions) = finish(&mut client, "p", |host| match host {
        "approved.test" => json!({"type": "allow"}),
        _ => json!({"type": "deny", "reason": "not_allowed"}),
    })
    .await;
    let asked: Vec<Value> = questions.iter().map(|q| json!([q["id"], q["params"]])).collect();
    assert_eq!(
        asked,
        [
            json!([1, {"processId": "p", "request": {"protocol": "http", "host": "approved.test", "port": 9}}]),
            json!([2, {"processId": "p", "request": {"protocol": "http", "host": "refused.test", "port": 9}}]),
        ]
    );
    let steps: Vec<(&str, &str, &str, bool)> = finished
        .decisions
        .iter()
        .map(|d| {
            let text = |key: &str| d[key].as_str().unwrap();
            (text("host"), text("source"), text("reason"), d["policyOverride"].as_bool().unwrap())
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("approved.test", "baseline_policy", "not_allowed_local", false),
            ("refused.test", "decider", "not_allowed", false),
        ]
    );
    let lines: Vec<Value> =
        finished.stdout.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(
        (lines[0]["reason"].as_str(), lines[0]["source"].as_str()),
        (Some("not_allowed_local"), Some("baseline_policy"))
    );
    assert_eq!(
        (lines[1]["reason"].as_str(), lines[1]["source"].as_str()),
        (Some("not_allowed"), Some("decider"))
    );
}

/// A sandboxed command behind its proxy has no other way out: a direct connection to the
/// origin (`--noproxy '*'`) fails, and so do a Unix socket and a netlink one; a Unix
/// socketpair, the command's own IPC (libuv's child stdio), is made; the origin sees only what
/// came through the proxy.
async fn a_sandboxed_command_reaches_nothing_but_its_proxy(target: Target) {
    let peer = HttpPeer::start().await.unwrap();
    let home = ExecutorHome::new("network", target, "confined");
    let (_server, mut client) = home.started(target).await;
    let script = format!(
        "curl -s -m 5 --noproxy '*' {url}/direct; echo \"direct: $?\"; \
         python3 -c 'import socket; socket.socket(socket.AF_UNIX)' 2>&1 | tail -n 1; \
         python3 -c 'import socket; socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)' 2>&1 | tail -n 1; \
         python3 -c 'import socket; socket.socketpair(); print(\"socketpair ok\")'; \
         curl -sS -o /dev/null -w 'proxied: %{{http_code}}\\n' -x \"$HTTP_PROXY\" {url}/proxied",
        url = peer.base_url
    );
    let launch = launch(json!({"127.0.0.1": "allow"}), json!({}));
    let finished =
        run(&mut client, proxied("p", &script, &home, Confined::Sandboxed, launch)).await;
    assert_eq!(
        finished.stdout,
        "direct: 7\nPermissionError: [Errno 1] Operation not permitted\n\
         PermissionError: [Errno 1] Operation not permitted\nsocketpair ok\nproxied: 200\n"
    );
    assert_eq!(peer.connections(), 1, "only the proxied request reached the origin");
}

/// The child's proxy variables, as the reference sets them: every tool's HTTP variable names
/// the HTTP proxy on the process's loopback, the catch-all ones the SOCKS5 proxy, nothing is
/// exempt, and the markers are set; with local binding allowed, the local ranges are exempt.
async fn the_childs_environment_names_its_proxies(target: Target) {
    let home = ExecutorHome::new("network", target, "environment");
    let (_server, mut client) = home.started(target).await;
    for (n, allow_local) in [false, true].into_iter().enumerate() {
        for confined in [Confined::No, Confined::Sandboxed] {
            let id = format!("p{n}-{confined:?}");
            let changes = json!({"allowLocalBinding": allow_local});
            let params = proxied(&id, "env | sort", &home, confined, launch(json!({}), changes));
            let finished = run(&mut client, params).await;
            let env: std::collections::BTreeMap<&str, &str> =
                finished.stdout.lines().filter_map(|line| line.split_once('=')).collect();
            let http = env["HTTP_PROXY"];
            assert!(http.starts_with("http://127.0.0.1:"), "{http}");
            assert!(env["ALL_PROXY"].starts_with("socks5h://127.0.0.1:"));
            for name in
                ["HTTPS_PROXY", "https_proxy", "WSS_PROXY", "NPM_CONFIG_HTTPS_PROXY", "PIP_PROXY"]
            {
                assert_eq!(env[name], http, "{name}");
            }
            let exempt = match allow_local {
                false => "",
                true => "localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16",
            };
            assert_eq!(env["NO_PROXY"], exempt);
            assert_eq!(env["CODEX_NETWORK_PROXY_ACTIVE"], "1");
            assert_eq!(
                env["CODEX_NETWORK_ALLOW_LOCAL_BINDING"],
                if allow_local { "1" } else { "0" }
            );
        }
    }
}

/// Launches the reference refuses, refused in its words; each as `-32602`.
async fn malformed_launches_are_refused(target: Target) {
    let home = ExecutorHome::new("network", target, "malformed");
    let (_server, mut client) = home.started(target).await;
    let mut thread = proxied("p4", "true", &home, Confined::No, launch(json!({}), json!({})));
    thread["metadata"] = json!({"threadId": "t"});
    let mut metadata = proxied("p5", "true", &home, Confined::No, launch(json!({}), json!({})));
    metadata["metadata"] = json!("s");
    let off =
        proxied("p2", "true", &home, Confined::No, launch(json!({}), json!({"enabled": false})));
    let bad_decision =
        proxied("p3", "true", &home, Confined::No, launch(json!({"a.test": "maybe"}), json!({})));
    for (params, message) in [
        (
            off,
            "invalid network proxy config: executor-local network proxy launch requires an enabled proxy",
        ),
        (bad_decision, "unknown variant `maybe`, expected one of `none`, `allow`, `deny`"),
        (
            thread,
            "invalid character: expected an optional prefix of `urn:uuid:` followed by [0-9a-fA-F-], found `t` at 1",
        ),
        (metadata, "invalid type: string \"s\", expected struct ExecMetadata"),
    ] {
        let error = client.err("process/start", params).await.unwrap();
        assert_eq!((error.code, error.message.as_str()), (-32602, message));
    }
}

/// Once the client has a process's `process/closed`, its proxy takes no connection: its
/// address is refused (the pump stops the proxy, listeners and all, before the close goes
/// out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_is_gone_when_its_process_has_closed() {
    let home = ExecutorHome::new("network", Target::Tether, "lifetime");
    let (_server, mut client) = home.started(Target::Tether).await;
    let params =
        proxied("p", "echo \"$HTTP_PROXY\"", &home, Confined::No, launch(json!({}), json!({})));
    let finished = run(&mut client, params).await;
    let address = finished.stdout.trim().strip_prefix("http://").unwrap().to_owned();
    let refused = tokio::net::TcpStream::connect(&address).await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused, "{address}");
}

/// `process/start` params for a sandboxed (or not) `/bin/sh -c script` held to a managed
/// network whose proxy the caller runs: `enforceManagedNetwork`, no `networkProxy`, the
/// caller's variables in `env`.
fn caller_run(
    id: &str,
    script: &str,
    home: &ExecutorHome,
    confined: Confined,
    managed: Value,
    env: Value,
) -> Value {
    let mut params = proxied(id, script, home, confined, Value::Null);
    params["managedNetwork"] = managed;
    for (name, value) in env.as_object().unwrap() {
        params["env"][name] = value.clone();
    }
    params
}

/// A sandboxed start held to a managed network whose proxy the caller runs, named by
/// variables it cannot bridge, runs nothing and exits 101 in the reference's words: no proxy
/// variable, a port outside `managedNetwork.loopbackPorts`, an address off loopback.
/// Unsandboxed, or without `enforceManagedNetwork`, the start runs as it is.
async fn a_managed_network_without_a_proxy_runs_nothing_sandboxed(target: Target) {
    let home = ExecutorHome::new("network", target, "no-proxy");
    let (_server, mut client) = home.started(target).await;
    let cases = [
        (Value::Null, json!({}), "managed proxy mode requires proxy environment variables"),
        (
            json!({"loopbackPorts": [9], "allowLocalBinding": false}),
            json!({"HTTP_PROXY": "http://127.0.0.1:10"}),
            "proxy endpoint is outside the managed sandbox context",
        ),
        (
            Value::Null,
            json!({"HTTP_PROXY": "http://198.51.100.1:3128"}),
            "managed proxy mode requires parseable loopback proxy endpoints",
        ),
    ];
    for (n, (managed, env, refusal)) in cases.into_iter().enumerate() {
        for confined in [Confined::No, Confined::Sandboxed] {
            let id = format!("p{n}-{confined:?}");
            let script = "echo ran; echo $HTTP_PROXY";
            let params = caller_run(&id, script, &home, confined, managed.clone(), env.clone());
            client.ok("process/start", params).await.unwrap();
            let events = client.process_events(&id).await.unwrap();
            let exited = events.iter().find(|e| e["method"] == "process/exited").unwrap();
            let stdout = String::from_utf8(output_of(&events, "stdout")).unwrap();
            let stderr = String::from_utf8(output_of(&events, "stderr")).unwrap();
            match confined {
                Confined::No => {
                    let proxy = env["HTTP_PROXY"].as_str().unwrap_or_default();
                    assert_eq!(
                        (exited["params"]["exitCode"].as_i64(), stdout),
                        (Some(0), format!("ran\n{proxy}\n"))
                    );
                }
                Confined::Sandboxed => {
                    assert_eq!(
                        (exited["params"]["exitCode"].as_i64(), stdout.as_str()),
                        (Some(101), "")
                    );
                    assert!(
                        stderr.contains(&format!(
                            "failed to prepare host proxy routing bridge: {refusal}"
                        )),
                        "{stderr}"
                    );
                }
            }
        }
    }
    // `managedNetwork` without `enforceManagedNetwork`: nothing bridged, nothing refused.
    let managed = json!({"loopbackPorts": [9], "allowLocalBinding": false});
    let env = json!({"HTTP_PROXY": "http://127.0.0.1:10"});
    let mut params =
        caller_run("free", "echo $HTTP_PROXY", &home, Confined::Sandboxed, managed, env);
    params["enforceManagedNetwork"] = json!(false);
    let finished = run(&mut client, params).await;
    assert_eq!((finished.exit_code, finished.stdout.as_str()), (0, "http://127.0.0.1:10\n"));
}

/// The caller's proxy, on the host's loopback, is bridged into a sandboxed start held to it:
/// each of its proxy variables is pointed at a port of the sandbox's own loopback (one per
/// port of the caller's, the rest of the URL kept), whose connections reach the caller's
/// proxy; the caller's port itself is not reachable from inside.
async fn a_proxy_the_caller_runs_is_bridged_into_the_sandbox(target: Target) {
    let caller = HttpPeer::start().await.unwrap();
    let port = port_of(&caller);
    let home = ExecutorHome::new("network", target, "bridge");
    let (_server, mut client) = home.started(target).await;
    let managed = json!({"loopbackPorts": [port], "allowLocalBinding": false});
    let env = json!({"HTTP_PROXY": format!("http://127.0.0.1:{port}"),
        "https_proxy": format!("http://localhost:{port}/")});
    let script = format!(
        "echo \"$HTTP_PROXY\"; echo \"$https_proxy\"; \
         curl -sS -x \"$HTTP_PROXY\" -o /dev/null -w '%{{http_code}}\\n' http://example.com/bridged; \
         curl -sS -m 5 -o /dev/null http://127.0.0.1:{port}/direct 2>/dev/null; echo \"direct $?\""
    );
    let params = caller_run("p", &script, &home, Confined::Sandboxed, managed, env);
    let finished = run(&mut client, params).await;
    let lines: Vec<&str> = finished.stdout.lines().collect();
    let inside: u16 = lines[0].strip_prefix("http://127.0.0.1:").unwrap().parse().unwrap();
    assert_ne!(inside, port, "{}", finished.stdout);
    assert_eq!(lines[1..], [format!("http://127.0.0.1:{inside}/").as_str(), "200", "direct 7"]);
    assert_eq!(caller.requests(), ["GET /bridged"]);
}

/// The sockets `pid` listens on (TCP, either family), by local address.
fn listening(pid: u32) -> Vec<String> {
    let inodes: std::collections::BTreeSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_str()?.to_owned();
            Some(target.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let mut found = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6", "/proc/net/udp", "/proc/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // TCP state 0A is LISTEN (a UDP socket bound is all it can be); field 9 is the
            // inode.
            let bound = table.contains("udp") || fields[3] == "0A";
            if bound && inodes.contains(fields[9]) {
                found.push(format!("{table} {}", fields[1]));
            }
        }
    }
    found
}

/// A sandboxed command's proxy listens nowhere on the host: its connections come from the
/// sandbox's own loopback, handed over by the inner stage, and its SOCKS5 UDP relay is a
/// socket of the sandbox's loopback too. An unconfined command's proxy listens on the host's
/// loopback (the command could reach anything there anyway): two more listeners and the
/// relay's socket, which is how this test would see the sandboxed one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_commands_proxy_listens_nowhere_on_the_host() {
    let home = ExecutorHome::new("network", Target::Tether, "listens");
    let (server, mut client) = home.started(Target::Tether).await;
    let pid = serving_pid(server.pid().unwrap());
    let before = listening(pid);
    for (confined, more) in [(Confined::Sandboxed, 0), (Confined::No, 3)] {
        let id = format!("{confined:?}");
        let udp = launch(json!({}), json!({"enableSocks5Udp": true}));
        let mut params = proxied(&id, "echo ready; read line", &home, confined, udp);
        params["pipeStdin"] = json!(true);
        client.ok("process/start", params).await.unwrap();
        let ready = client.notification().await.unwrap();
        assert_eq!(ready["method"], "process/output", "{ready}");
        assert_eq!(listening(pid).len(), before.len() + more, "{confined:?}");
        client.ok("process/terminate", json!({"processId": id})).await.unwrap();
        client.process_events_after(&id, 1).await.unwrap();
    }
}

/// A destination that accepts connections and holds them, open and silent, until dropped.
struct Holder {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Holder {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        Self { port, task }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts sandboxed process `id`, which opens `count` connections to its HTTP proxy and asks
/// each for a tunnel to `holder` (allowed), then waits on its standard input.
async fn start_flood(
    client: &mut RpcClient,
    home: &ExecutorHome,
    id: &str,
    count: usize,
    holder: u16,
) {
    let flood = format!(
        "import os, socket, sys\n\
         host, port = os.environ['HTTP_PROXY'].rsplit('/', 1)[1].split(':')\n\
         held = []\n\
         for _ in range({count}):\n\
         \x20   s = socket.create_connection((host, int(port)))\n\
         \x20   s.sendall(b'CONNECT 127.0.0.1:{holder} HTTP/1.1\\r\\nHost: 127.0.0.1:{holder}\\r\\n\\r\\n')\n\
         \x20   held.append(s)\n\
         sys.stdin.read()\n"
    );
    let launch = launch(json!({"127.0.0.1": "allow"}), json!({}));
    let mut params = proxied(id, "", home, Confined::Sandboxed, launch);
    params["argv"] = json!(["python3", "-c", flood]);
    params["pipeStdin"] = json!(true);
    client.ok("process/start", params).await.unwrap();
}

/// Waits for `count` `allow` reports from the processes whose ids start with `prefix`: each
/// is a connection a proxy has taken.
async fn taken(client: &mut RpcClient, prefix: &str, count: usize) {
    let mut seen = 0;
    while seen < count {
        let message = client.notification().await.unwrap();
        let from = message["params"]["processId"].as_str().unwrap_or_default();
        if message["method"] == "network/policyDecision" && from.starts_with(prefix) {
            assert_eq!(message["params"]["decision"], "allow", "{message}");
            seen += 1;
        }
    }
}

/// A command that floods its proxy holds at most the proxy's bound of the server's
/// descriptors (two per tunnel: its end and the destination's), and another process's proxy
/// serves meanwhile. Synchronised on the proxy's reports: once it has taken its bound, the
/// rest wait unaccepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_through_one_proxy_is_bounded_and_leaves_the_others_served() {
    const FLOOD: usize = 100;
    let peer = HttpPeer::start().await.unwrap();
    let holder = Holder::start().await;
    let home = ExecutorHome::new("network", Target::Tether, "flood");
    let (server, mut client) = home.started(Target::Tether).await;
    let pid = serving_pid(server.pid().unwrap());
    let baseline = open_fds(pid).unwrap();
    start_flood(&mut client, &home, "flood", FLOOD, holder.port).await;
    let most = tether_engine::network::proxy::MAX_CONNECTIONS;
    taken(&mut client, "flood", most).await;
    let fds = open_fds(pid).unwrap();
    assert!(
        fds <= baseline + 2 * most + 32,
        "{fds} descriptors with {FLOOD} connections opened (from {baseline})"
    );
    let script =
        format!("curl -sS -o /dev/null -w '%{{http_code}}' -x \"$HTTP_PROXY\" {}/", peer.base_url);
    let domains = json!({"127.0.0.1": "allow"});
    let served = run(
        &mut client,
        proxied("other", &script, &home, Confined::Sandboxed, launch(domains, json!({}))),
    )
    .await;
    assert_eq!(served.stdout, "200");
    client.ok("process/terminate", json!({"processId": "flood"})).await.unwrap();
}

/// Floods through many proxies at once hold at most the server-wide bound of its descriptors:
/// five commands' proxies could take 64 connections each, the server serves 256 in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_through_many_proxies_are_bounded_server_wide() {
    use tether_engine::network::proxy::{MAX_CONNECTIONS, MAX_CONNECTIONS_SERVER_WIDE};
    let floods = MAX_CONNECTIONS_SERVER_WIDE / MAX_CONNECTIONS + 1;
    let holder = Holder::start().await;
    let home = ExecutorHome::new("network", Target::Tether, "floods");
    let (server, mut client) = home.started(Target::Tether).await;
    let pid = serving_pid(server.pid().unwrap());
    let baseline = open_fds(pid).unwrap();
    for n in 0..floods {
        start_flood(&mut client, &home, &format!("flood-{n}"), MAX_CONNECTIONS + 16, holder.port)
            .await;
    }
    taken(&mut client, "flood-", MAX_CONNECTIONS_SERVER_WIDE).await;
    let fds = open_fds(pid).unwrap();
    // Each flooding process holds a handful of the server's descriptors of its own too.
    let bound = baseline + 2 * MAX_CONNECTIONS_SERVER_WIDE + 8 * floods + 32;
    assert!(fds <= bound, "{fds} descriptors with {floods} floods (from {baseline})");
    for n in 0..floods {
        client.ok("process/terminate", json!({"processId": format!("flood-{n}")})).await.unwrap();
    }
}

/// With `allowUpstreamProxy`, a launch's proxy goes through the executor's own proxies: a
/// forward request to `HTTP_PROXY` in absolute form, a tunnel with a `CONNECT` of its own to
/// `HTTPS_PROXY`, a loopback destination directly (`NO_PROXY` is not read: it exempts nothing
/// here); SOCKS5 always directly. The names resolve nowhere here, so the launch allows local
/// binding (an unresolvable name is local).
async fn allowed_upstream_proxies_carry_http_and_tunnels_but_not_socks(target: Target) {
    let peer = HttpPeer::start().await.unwrap();
    let upstream = UpstreamProxy::start(port_of(&peer)).await;
    let home = ExecutorHome::new("network", target, "upstream");
    let url = format!("http://127.0.0.1:{}", upstream.port);
    let env = [("HTTP_PROXY", url.as_str()), ("HTTPS_PROXY", url.as_str()), ("NO_PROXY", "*")];
    let (_server, mut client) = home.started_with(target, &[], &env).await;
    let script = format!(
        "curl -sS -o /dev/null -w 'forward %{{http_code}}\\n' -x \"$HTTP_PROXY\" http://origin.test/plain; \
         curl -sS -o /dev/null -w 'tunnel %{{http_code}}\\n' -p -x \"$HTTP_PROXY\" http://origin.test:8443/tunnel; \
         curl -sS -o /dev/null -w 'socks %{{http_code}}\\n' --proxy \"$ALL_PROXY\" http://origin.test:81/socks 2>/dev/null; \
         curl -sS -o /dev/null -w 'loopback %{{http_code}}\\n' -x \"$HTTP_PROXY\" {}/loopback; \
         curl -sS -o /dev/null -w 'unexempted %{{http_code}}\\n' -x \"$HTTP_PROXY\" http://exempt.test/",
        peer.base_url
    );
    let domains = json!({"origin.test": "allow", "127.0.0.1": "allow", "exempt.test": "allow"});
    let changes = json!({"allowUpstreamProxy": true, "allowLocalBinding": true});
    let params = proxied("p", &script, &home, Confined::No, launch(domains, changes));
    let finished = run(&mut client, params).await;
    assert_eq!(
        finished.stdout,
        "forward 200\ntunnel 200\nsocks 000\nloopback 200\nunexempted 200\n"
    );
    assert_eq!(
        upstream.seen(),
        [
            "GET http://origin.test/plain HTTP/1.1",
            "CONNECT origin.test:8443 HTTP/1.1",
            "GET http://exempt.test/ HTTP/1.1"
        ]
    );
}

/// Credential masking: the executor's `GITHUB_TOKEN` reaches the command as a placeholder of
/// its shape (`ghp_masked…`, its length), and the real token reaches `api.github.com` — an
/// origin of the test's own behind an upstream proxy, trusted through the executor's
/// `SSL_CERT_FILE` — in the header the command sent with the placeholder. The command trusts
/// the proxy's CA through the bundle its variables name. (The reference masks only under
/// `bash`: the command runs there.)
async fn a_masked_token_is_a_placeholder_in_the_child_and_real_at_its_host(target: Target) {
    let home = ExecutorHome::new("network", target, "masking");
    let masked = MaskedHost::start(&home.path(""), "api.github.com").await;
    let token = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
    let env = masked.executor_env("GITHUB_TOKEN", token);
    let (_server, mut client) = home.started_with(target, &[], &env).await;
    let script = "echo \"child: $GITHUB_TOKEN\"; \
                  curl -sS -H \"Authorization: Bearer $GITHUB_TOKEN\" https://api.github.com/user; echo";
    let domains = json!({"api.github.com": "allow"});
    let changes =
        json!({"allowUpstreamProxy": true, "allowLocalBinding": true, "credentialMasking": true});
    let mut params = proxied("p", script, &home, Confined::Sandboxed, launch(domains, changes));
    params["argv"] = json!(["/bin/bash", "-c", script]);
    params["envPolicy"] = json!({"inherit": "all", "ignoreDefaultExcludes": true, "exclude": [],
        "set": {}, "includeOnly": []});
    let finished = run(&mut client, params).await;
    let mut lines = finished.stdout.lines();
    let child = lines.next().unwrap().strip_prefix("child: ").unwrap().to_owned();
    assert!(child.starts_with("ghp_masked") && child.len() == token.len(), "{}", finished.stdout);
    assert_eq!(lines.next(), Some(format!("Bearer {token}").as_str()), "{}", finished.stdout);
    assert_eq!(masked.upstream.seen(), ["CONNECT api.github.com:443 HTTP/1.1"]);
}

/// A request that names a Unix socket to reach (`x-unix-socket`) is refused with `501` and
/// reported as the proxy's own refusal, before any policy and whatever `unixSockets` allows:
/// on Linux the reference's proxy reaches no Unix socket, and neither does Tether's.
async fn a_request_naming_a_unix_socket_is_refused_before_any_policy(target: Target) {
    let home = ExecutorHome::new("network", target, "unix-socket");
    let (_server, mut client) = home.started(target).await;
    let socket = home.path("docker.sock").display().to_string();
    let script = format!(
        "curl -sS -i --noproxy '' -x \"$HTTP_PROXY\" -H 'x-unix-socket: {socket}' http://localhost/v1.41/info"
    );
    let changes = json!({"unixSockets": {socket.clone(): "allow"}, "allowLocalBinding": true});
    let params = proxied("p", &script, &home, Confined::No, launch(json!({}), changes));
    let finished = run(&mut client, params).await;
    let status = finished.stdout.lines().next().unwrap_or_default();
    assert_eq!(status.trim_end(), "HTTP/1.1 501 Not Implemented", "{}", finished.stdout);
    assert!(finished.stdout.ends_with("\r\n\r\nunix sockets unsupported"), "{}", finished.stdout);
    let reported: Vec<Value> = finished.decisions.iter().map(decision).collect();
    assert_eq!(
        reported,
        [json!({"processId": "p", "scope": "non_domain", "decision": "deny",
            "source": "proxy_state", "reason": "unix_socket_unsupported", "protocol": "http",
            "host": "unix-socket", "port": 0, "method": "GET", "policyOverride": false})]
    );
}

/// `credentialProviders` is typed as the reference types it (a map of providers, each member
/// known, `auth` one of four methods), and refused in its words when it is not; a provider that
/// is typed but cannot be honoured (a pattern that does not compile, a destination in the
/// clear, no member at all) does not stop the start.
async fn credential_providers_are_typed_as_the_reference_types_them(target: Target) {
    let home = ExecutorHome::new("network", target, "providers-typed");
    let (_server, mut client) = home.started(target).await;
    let with = |id: &str, providers: Value| {
        let changes = json!({"credentialMasking": true, "credentialProviders": providers});
        proxied(id, "true", &home, Confined::No, launch(json!({}), changes))
    };
    for (id, providers, message) in [
        ("r1", json!(5), "invalid type: integer `5`, expected a map"),
        (
            "r2",
            json!({"x": 5}),
            "invalid type: integer `5`, expected struct CredentialProviderConfig",
        ),
        (
            "r3",
            json!({"x": {"auth": ["foo"]}}),
            "unknown variant `foo`, expected one of `bearer`, `token`, `basic`, `header`",
        ),
        (
            "r4",
            json!({"x": {"env": ["A"], "bogus": 1}}),
            "unknown field `bogus`, expected one of `env`, `patterns`, `url_prefixes`, `url_prefix_from_env`, `auth`, `header`, `prefix`",
        ),
        ("r5", json!({"x": {"env": "A"}}), "invalid type: string \"A\", expected a sequence"),
    ] {
        let error = client.err("process/start", with(id, providers)).await.unwrap();
        assert_eq!((error.code, error.message.as_str()), (-32602, message), "{id}");
    }
    let unusable = json!({"empty": {}, "bad": {"env": ["A"], "patterns": ["("],
        "url_prefixes": ["http://vendor.example"], "auth": ["bearer", "header"]}});
    let finished = run(&mut client, with("ok", unusable)).await;
    assert_eq!(finished.exit_code, 0);
}

/// A custom credential provider (Codex's `[features.network_proxy.credentials.NAME]`): the
/// command never reads its key, only a placeholder of the key's shape (the provider's
/// pattern accepts it), and the key reaches the origin in the `Authorization: Bearer` the
/// command sent, on the way to the provider's URL prefix only (under `/v2` the origin gets
/// the placeholder).
async fn a_custom_providers_key_reaches_its_prefix_and_nothing_else(target: Target) {
    let home = ExecutorHome::new("network", target, "provider");
    let masked = MaskedHost::start(&home.path(""), "api.vendor.example").await;
    let key = "vk_live_0123456789abcdefABCDEF0123456789";
    let env = masked.executor_env("VENDOR_KEY", key);
    let (_server, mut client) = home.started_with(target, &[], &env).await;
    let script = "echo \"child: $VENDOR_KEY\"; \
                  for path in v1/charges v2/charges; do \
                    curl -sS -H \"Authorization: Bearer $VENDOR_KEY\" https://api.vendor.example/$path; echo; \
                  done";
    let providers = json!({"vendor": {"env": ["VENDOR_KEY"], "patterns": ["vk_live_[A-Za-z0-9]{32}"],
        "url_prefixes": ["https://api.vendor.example/v1"], "auth": []}});
    let changes = json!({"allowUpstreamProxy": true, "allowLocalBinding": true,
        "credentialMasking": true, "credentialProviders": providers});
    let domains = json!({"api.vendor.example": "allow"});
    let mut params = proxied("p", script, &home, Confined::Sandboxed, launch(domains, changes));
    params["argv"] = json!(["/bin/bash", "-c", script]);
    params["envPolicy"] = json!({"inherit": "all", "ignoreDefaultExcludes": true, "exclude": [],
        "set": {}, "includeOnly": []});
    let finished = run(&mut client, params).await;
    let lines: Vec<&str> = finished.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", finished.stdout);
    let child = lines[0].strip_prefix("child: ").unwrap();
    assert_eq!(lines[1], format!("Bearer {key}"), "{}", finished.stdout);
    assert_ne!(child, key);
    assert!(child.starts_with("vk_live_") && child.len() == key.len(), "{child}");
    assert!(child[8..].bytes().all(|b| b.is_ascii_alphanumeric()), "{child}");
    assert_eq!(lines[2], format!("Bearer {child}"), "{}", finished.stdout);
}

/// A custom provider bound to a loopback service over plain HTTP (`http://127.0.0.1:PORT/api`)
/// with header authentication (`header = "x-api-key"`, `prefix = "Key "`): the key goes back
/// only into that header, with that prefix, under that prefix; the placeholder in any other
/// header, or to another path, goes on as it is. (The reference, 0.171, leaves a provider
/// whose destinations are plain HTTP unmasked; Tether takes loopback ones, as the reference's
/// own rules allow: the key never leaves the executor.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_providers_header_carries_its_key_to_a_loopback_service() {
    let target = Target::Tether;
    let home = ExecutorHome::new("network", target, "provider-loopback");
    let peer = HttpPeer::start().await.unwrap();
    let port = port_of(&peer);
    let key = "lk_0123456789abcdefghij";
    let (_server, mut client) = home.started_with(target, &[], &[("LOCAL_KEY", key)]).await;
    let script = format!(
        "exec 2>&1; curl -sS --noproxy '' -x \"$HTTP_PROXY\" -H \"x-api-key: Key $LOCAL_KEY\" -H \"x-other: $LOCAL_KEY\" {url}/api/one; echo; \
         curl -sS --noproxy '' -x \"$HTTP_PROXY\" -H \"x-api-key: Key $LOCAL_KEY\" {url}/elsewhere; echo; \
         curl -sS --noproxy '' -x \"$HTTP_PROXY\" -H \"x-api-key: $LOCAL_KEY\" {url}/api/two; echo",
        url = peer.base_url
    );
    let providers = json!({"local": {"env": ["LOCAL_KEY"], "patterns": ["lk_[a-z0-9]{20}"],
        "url_prefixes": [format!("http://127.0.0.1:{port}/api")], "auth": ["header"], "header": "x-api-key",
        "prefix": "Key "}});
    let changes = json!({"allowLocalBinding": true, "credentialMasking": true,
        "credentialProviders": providers});
    let mut params = proxied(
        "p",
        &script,
        &home,
        Confined::Sandboxed,
        launch(json!({"127.0.0.1": "allow"}), changes),
    );
    params["envPolicy"] = json!({"inherit": "all", "ignoreDefaultExcludes": true, "exclude": [],
        "set": {}, "includeOnly": []});
    let finished = run(&mut client, params).await;
    let answers: Vec<Value> = finished
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("{}", finished.stdout)))
        .collect();
    let header = |answer: &Value, name: &str| -> String {
        let pairs = answer["headers"].as_array().unwrap();
        let pair = pairs.iter().find(|pair| pair[0] == name).unwrap();
        pair[1].as_str().unwrap().to_owned()
    };
    let placeholder = header(&answers[0], "x-other");
    let shown = &finished.stdout;
    assert!(
        placeholder != key && placeholder.starts_with("lk_") && placeholder.len() == key.len(),
        "{shown}"
    );
    assert_eq!(header(&answers[0], "x-api-key"), format!("Key {key}"), "{shown}");
    assert_eq!(header(&answers[1], "x-api-key"), format!("Key {placeholder}"), "{shown}");
    assert_eq!(header(&answers[2], "x-api-key"), placeholder, "{shown}");
}

/// Tether masks whatever runs the command (the reference masks only under `bash`: under
/// `/bin/sh` its command reads the real token), and the proxy's CA key is never written: what
/// it wrote under `$CODEX_HOME/proxy` is certificates only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masking_holds_under_any_shell_and_the_ca_key_is_never_written() {
    let home = ExecutorHome::new("network", Target::Tether, "masking-sh");
    let token = "sk-proj-0123456789abcdefghij";
    let (_server, mut client) =
        home.started_with(Target::Tether, &[], &[("OPENAI_API_KEY", token)]).await;
    let changes = json!({"credentialMasking": true});
    let mut params = proxied("p", "env", &home, Confined::Sandboxed, launch(json!({}), changes));
    params["envPolicy"] = json!({"inherit": "all", "ignoreDefaultExcludes": true, "exclude": [],
        "set": {}, "includeOnly": []});
    let finished = run(&mut client, params).await;
    assert!(!finished.stdout.contains(token), "{}", finished.stdout);
    assert!(finished.stdout.contains("OPENAI_API_KEY=sk-proj-masked"), "{}", finished.stdout);
    let written: Vec<std::path::PathBuf> = std::fs::read_dir(home.path("home/.codex/proxy"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert_eq!(written.len(), 2, "{written:?}");
    for path in written {
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("BEGIN CERTIFICATE") && !text.contains("PRIVATE KEY"),
            "{}",
            path.display()
        );
    }
}

/// A sandboxed command behind its proxy reaches nothing else on the host, whatever it tries:
/// a TCP connection or a UDP datagram to the host's own address (the sandbox has only its own
/// loopback), a name resolved itself (no resolver is reachable), a Unix socket of either
/// kind (refused by its filter), or another process's proxy (listening on the host's loopback,
/// which is not the sandbox's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_command_reaches_no_other_way_out() {
    let peer = HttpPeer::start().await.unwrap();
    let home = ExecutorHome::new("network", Target::Tether, "no-way-out");
    let (_server, mut client) = home.started(Target::Tether).await;
    // Another process's proxy, on the host's loopback, held open while the probe runs.
    let mut other = proxied(
        "other",
        "echo \"$HTTP_PROXY\"; read line",
        &home,
        Confined::No,
        launch(json!({"127.0.0.1": "allow"}), json!({})),
    );
    other["pipeStdin"] = json!(true);
    client.ok("process/start", other).await.unwrap();
    let announced = client.notification().await.unwrap();
    let other_proxy =
        String::from_utf8(tether_testkit::client::b64decode(&announced["params"]["chunk"]))
            .unwrap();
    let other_port = other_proxy.trim().rsplit(':').next().unwrap().to_owned();
    let host_address = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|socket| socket.connect("192.0.2.1:9").map(|()| socket))
        .and_then(|socket| socket.local_addr())
        .map(|address| address.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into());
    let port = port_of(&peer);
    let probe = format!(
        "import socket\n\
         def attempt(name, f):\n\
         \x20   try:\n\
         \x20       f(); print(name, 'reached')\n\
         \x20   except OSError as e:\n\
         \x20       print(name, 'refused')\n\
         attempt('tcp-host', lambda: socket.create_connection(('{host_address}', {port}), timeout=5))\n\
         attempt('udp-host', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('{host_address}', {port})))\n\
         attempt('dns', lambda: socket.getaddrinfo('example.com', 80))\n\
         attempt('unix', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))\n\
         attempt('abstract', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))\n\
         attempt('other-proxy', lambda: socket.create_connection(('127.0.0.1', {other_port}), timeout=5))\n"
    );
    let mut params = proxied(
        "probe",
        "",
        &home,
        Confined::Sandboxed,
        launch(json!({"127.0.0.1": "allow"}), json!({})),
    );
    params["argv"] = json!(["python3", "-c", probe]);
    let finished = run(&mut client, params).await;
    assert_eq!(
        finished.stdout,
        "tcp-host refused\nudp-host refused\ndns refused\nunix refused\nabstract refused\nother-proxy refused\n"
    );
    assert_eq!(peer.connections(), 0);
    client.ok("process/terminate", json!({"processId": "other"})).await.unwrap();
}

/// A question asked on a connection that is lost is denied at once, not left to its timeout
/// (here ten minutes): the command gets the `403` while its session waits for a resume, and
/// the resumed client reads it; an answer to that question sent later, on the new connection,
/// is ignored and the connection serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_on_a_lost_connection_is_denied_and_the_session_resumes() {
    let home = ExecutorHome::new("network", Target::Tether, "ask-resume");
    let (server, mut client) = home.started(Target::Tether).await;
    drop(client);
    let mut first = RpcClient::connect(&server.url).await.unwrap();
    let session = first.initialize_detachable(60).await.unwrap();
    let script = "curl -sS -x \"$HTTP_PROXY\" http://asked.test:9/; echo";
    let mut launch = launch(json!({}), json!({}));
    launch["policyDecisionTimeoutMs"] = json!(600_000);
    first.ok("process/start", proxied("p", script, &home, Confined::No, launch)).await.unwrap();
    let question = first.notification().await.unwrap();
    assert_eq!(question["method"], "network/policyRequest", "{question}");
    first.close().await;

    client = RpcClient::connect(&server.url).await.unwrap();
    client.initialize(Some(&session)).await.unwrap().unwrap();
    // The late answer, on the new connection: ignored.
    let late = json!({"id": question["id"], "result": {"decision": {"type": "allow"}}});
    client.send_json(&late).await.unwrap();
    let mut after = 0;
    loop {
        let read = client
            .ok("process/read", json!({"processId": "p", "afterSeq": after, "waitMs": 10_000}))
            .await
            .unwrap();
        after = read["nextSeq"].as_u64().unwrap() - 1;
        if read["closed"] == true {
            break;
        }
    }
    let events = client.ok("process/read", json!({"processId": "p", "afterSeq": 0})).await.unwrap();
    let refused: Value = serde_json::from_str(common::text(&events["chunks"]).trim()).unwrap();
    assert_eq!(
        (refused["reason"].as_str(), refused["source"].as_str()),
        (Some("not_allowed"), Some("decider"))
    );
}

/// In the host's pid namespace (`--linux-sandbox-pid-namespace inherit`) a masked command sees
/// every process, the server's among them, and still reads the secret nowhere: the server's
/// `/proc/<pid>/environ` is refused to it (its user namespace), and its own holds the
/// placeholder. Unconfined, the same probe finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masking_holds_in_the_hosts_pid_namespace() {
    let home = ExecutorHome::new("network", Target::Tether, "masking-inherit");
    let token = "ghp_inheritinheritinheritinheritinherit0";
    let args = ["--linux-sandbox-pid-namespace", "inherit"];
    let (server, mut client) =
        home.started_with(Target::Tether, &args, &[("GITHUB_TOKEN", token)]).await;
    let script = format!(
        "echo \"server visible: $(test -e /proc/{pid} && echo yes)\"; \
         echo \"holding the token: $(grep -l -a {token} /proc/[0-9]*/environ 2>/dev/null | wc -l)\"; \
         echo \"own: $GITHUB_TOKEN\"",
        pid = server.pid().unwrap()
    );
    let changes = json!({"credentialMasking": true});
    let mut params =
        proxied("p", &script, &home, Confined::Sandboxed, launch(json!({}), changes.clone()));
    params["argv"] = json!(["/bin/bash", "-c", script]);
    params["envPolicy"] = json!({"inherit": "all", "ignoreDefaultExcludes": true, "exclude": [],
        "set": {}, "includeOnly": []});
    let finished = run(&mut client, params).await;
    let mut lines = finished.stdout.lines();
    assert_eq!(lines.next(), Some("server visible: yes"), "{}", finished.stdout);
    assert_eq!(lines.next(), Some("holding the token: 0"), "{}", finished.stdout);
    let own = lines.next().unwrap().strip_prefix("own: ").unwrap();
    assert!(own.starts_with("ghp_masked") && own.len() == token.len(), "{}", finished.stdout);
    // The same probe unconfined finds the server's (what masking cannot keep from a command
    // that runs outside any sandbox, as the README says).
    let mut params = proxied("q", &script, &home, Confined::No, launch(json!({}), changes));
    params["argv"] = json!(["/bin/bash", "-c", script]);
    let unconfined = run(&mut client, params).await;
    let holding = unconfined.stdout.lines().nth(1).unwrap();
    assert_ne!(holding, "holding the token: 0", "{}", unconfined.stdout);
}

/// Transparent TCP (`transparentTcp`): a program that ignores the proxy variables still goes
/// through the proxy and its policy. By address; and by name, the sandbox's own name server
/// (the one its `/etc/resolv.conf` names) giving each name an address of its own that stands
/// for it at the proxy, so the policy decides on the name. A refusal is a reset of a
/// connection the command had (curl says 56, 55 or 7 as the reset finds it reading, sending,
/// or not yet through its connect; the refused name is asked for over IPv4 alone, for a reset
/// that beats the connect sends curl on to the name's IPv6 address, a second connection and a
/// second decision). The origin, on one of the host's own addresses (the sandbox's
/// loopback is its own), sees the request as sent.
async fn transparent_tcp_carries_what_ignores_the_proxy_variables(target: Target) {
    let host = host_address().unwrap();
    let peer = HttpPeer::start_at(host).await.unwrap();
    let port = port_of(&peer);
    let home = ExecutorHome::new("network", target, "transparent");
    let (_server, mut client) = home.started(target).await;
    let script = format!(
        "curl -sS --noproxy '*' {url}/direct; echo; \
         curl -sS -4 --noproxy '*' http://blocked.example/ 2>/dev/null; \
         case $? in 7|55|56) echo refused by a reset;; *) echo \"refused $?\";; esac; \
         getent ahostsv4 named.example | head -n 1 | cut -d ' ' -f 1; \
         cat /etc/resolv.conf",
        url = peer.base_url
    );
    let domains = json!({host.to_string(): "allow", "blocked.example": "deny"});
    let changes = json!({"transparentTcp": true, "allowLocalBinding": true});
    let params = proxied("p", &script, &home, Confined::Sandboxed, launch(domains, changes));
    let finished = run(&mut client, params).await;
    let lines: Vec<&str> = finished.stdout.lines().collect();
    let answer: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(
        (answer["method"].as_str(), answer["path"].as_str()),
        (Some("GET"), Some("/direct"))
    );
    assert_eq!(lines[1..], ["refused by a reset", "198.18.0.2", "nameserver 127.0.0.53"]);
    let reported: Vec<Value> = finished.decisions.iter().map(decision).collect();
    let report = |decision: &str, reason: &str, host: &str, port: u16| {
        json!({"processId": "p", "scope": "domain", "decision": decision,
            "source": "baseline_policy", "reason": reason, "protocol": "socks5_tcp",
            "host": host, "port": port, "policyOverride": false})
    };
    assert_eq!(
        reported,
        [
            report("allow", "allow", &host.to_string(), port),
            report("deny", "denied", "blocked.example", 80)
        ]
    );
    assert_eq!(peer.requests(), ["GET /direct"]);
}

/// Transparent TCP carries IPv6 as it carries IPv4: a name's `AAAA` answer is an address of
/// its own (`fdc0:de00::N`, numbered as its `A` one), a connection to it goes to the proxy by
/// the name, and a connection to an IPv6 address goes by that address — each decided and
/// reported (`socks5_tcp`), a refusal a reset.
async fn transparent_tcp_carries_ipv6_by_name_and_by_address(target: Target) {
    let home = ExecutorHome::new("network", target, "transparent-v6");
    let (_server, mut client) = home.started(target).await;
    let reset = "case $? in 7|55|56) echo refused by a reset;; *) echo \"refused $?\";; esac";
    let script = format!(
        "getent ahostsv4 first.example | head -n 1 | cut -d ' ' -f 1; \
         getent ahostsv6 blocked.example | head -n 1 | cut -d ' ' -f 1; \
         curl -6 -sS --noproxy '*' http://blocked.example/ 2>/dev/null; {reset}; \
         curl -sS --noproxy '*' 'http://[2001:db8::5]:8080/' 2>/dev/null; {reset}"
    );
    let domains = json!({"blocked.example": "deny"});
    let changes = json!({"transparentTcp": true});
    let params = proxied("p", &script, &home, Confined::Sandboxed, launch(domains, changes));
    let finished = run(&mut client, params).await;
    let lines: Vec<&str> = finished.stdout.lines().collect();
    assert_eq!(
        lines,
        ["198.18.0.1", "fdc0:de00::2", "refused by a reset", "refused by a reset"],
        "{}",
        finished.stdout
    );
    let reported: Vec<Value> = finished.decisions.iter().map(decision).collect();
    let report = |reason: &str, host: &str, port: u16| {
        json!({"processId": "p", "scope": "domain", "decision": "deny",
            "source": "baseline_policy", "reason": reason, "protocol": "socks5_tcp",
            "host": host, "port": port, "policyOverride": false})
    };
    assert_eq!(
        reported,
        [report("denied", "blocked.example", 80), report("not_allowed", "2001:db8::5", 8080)]
    );
}

/// `--linux-sandbox-transparent-tcp` on the server: a sandboxed launch that does not ask for
/// transparent TCP gets it all the same; one without SOCKS5 runs nothing (exit 101, saying
/// why). Unsandboxed, a launch is as it asked.
async fn the_servers_transparent_flag_makes_every_sandboxed_launch_transparent(target: Target) {
    let host = host_address().unwrap();
    let peer = HttpPeer::start_at(host).await.unwrap();
    let home = ExecutorHome::new("network", target, "transparent-flag");
    let (_server, mut client) =
        home.started_with(target, &["--linux-sandbox-transparent-tcp"], &[]).await;
    let domains = json!({host.to_string(): "allow"});
    let script = format!(
        "grep -c '^nameserver 127.0.0.53$' /etc/resolv.conf; \
         curl -sS --noproxy '*' -o /dev/null -w '%{{http_code}}\\n' {url}/flagged",
        url = peer.base_url
    );
    let asked = launch(domains.clone(), json!({"allowLocalBinding": true}));
    let params = proxied("p", &script, &home, Confined::Sandboxed, asked);
    let finished = run(&mut client, params).await;
    assert_eq!(finished.stdout, "1\n200\n");
    assert_eq!(peer.requests(), ["GET /flagged"]);

    let no_socks = launch(domains, json!({"allowLocalBinding": true, "enableSocks5": false}));
    client
        .ok("process/start", proxied("q", "echo ran", &home, Confined::Sandboxed, no_socks))
        .await
        .unwrap();
    let events = client.process_events("q").await.unwrap();
    let exited = events.iter().find(|e| e["method"] == "process/exited").unwrap();
    let stdout = String::from_utf8(output_of(&events, "stdout")).unwrap();
    let stderr = String::from_utf8(output_of(&events, "stderr")).unwrap();
    assert_eq!((exited["params"]["exitCode"].as_i64(), stdout.as_str()), (Some(101), ""));
    assert!(stderr.contains("transparent TCP requires managed SOCKS5"), "{stderr}");
}

/// What transparent TCP is built from leaves the command nothing to take: no capability in
/// any set, no TUN device of its own and no way onto the sandbox's, no datagram out. At most
/// 64 connections are carried at once: the next is refused, and once they have ended the
/// command is served again.
#[tokio::test]
async fn transparent_tcp_leaves_the_command_nothing_to_take() {
    let target = Target::Tether;
    let host = host_address().unwrap();
    let peer = HttpPeer::start_at(host).await.unwrap();
    let port = port_of(&peer);
    let datagrams = std::net::UdpSocket::bind((host, 0)).unwrap();
    datagrams.set_nonblocking(true).unwrap();
    let udp_port = datagrams.local_addr().unwrap().port();
    let home = ExecutorHome::new("network", target, "transparent-hostile");
    let (_server, mut client) = home.started(target).await;
    let probe = format!(
        r#"
import errno, fcntl, os, socket, struct
print("caps", " ".join(l.split()[1] for l in open("/proc/self/status") if l.startswith("Cap")))
def tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR)
    try:
        fcntl.ioctl(fd, 0x400454ca, struct.pack("16sH", name, 0x1001))
        return "made"
    except OSError as e:
        return errno.errorcode[e.errno]
print("new", tun(b"evil0"))
print("attach", tun(b"tethertun"))
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("{host}", {udp_port}))
held, refused = [], 0
for _ in range(80):
    s = socket.socket()
    s.settimeout(30)
    try:
        s.connect(("{host}", {port}))
        held.append(s)
    except ConnectionRefusedError:
        refused += 1
print("held", len(held), "refused", refused)
# Each ended both ways (the origin's end seen) before the next connection is made.
for s in held:
    s.shutdown(socket.SHUT_WR)
print("ended", sum(s.recv(1) == b"" for s in held))
for s in held:
    s.close()
"#
    );
    std::fs::write(home.path("probe.py"), probe).unwrap();
    let script = format!(
        "python3 {probe}; curl -sS --noproxy '*' -o /dev/null -w '%{{http_code}}\\n' {url}/after",
        probe = home.path("probe.py").display(),
        url = peer.base_url
    );
    let domains = json!({host.to_string(): "allow"});
    let changes = json!({"transparentTcp": true, "allowLocalBinding": true});
    let params = proxied("p", &script, &home, Confined::Sandboxed, launch(domains, changes));
    let finished = run(&mut client, params).await;
    let zero = "0000000000000000";
    let lines: Vec<&str> = finished.stdout.lines().collect();
    assert_eq!(lines[0], format!("caps {zero} {zero} {zero} {zero} {zero}"));
    assert_eq!(lines[1], "new EPERM");
    assert!(["attach EPERM", "attach EBUSY"].contains(&lines[2]), "{}", lines[2]);
    assert_eq!(lines[3..], ["held 64 refused 16", "ended 64", "200"]);
    assert_eq!(
        datagrams.recv(&mut [0; 16]).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::WouldBlock),
        "no datagram left the sandbox"
    );
    assert_eq!(peer.requests().last().map(String::as_str), Some("GET /after"));
}

/// End to end with Codex 0.171, its own reviewer deciding: with managed requirements
/// (`/etc/codex/requirements.toml` `[experimental_network] enabled`, seen by that Codex run
/// alone) and `approvals_reviewer = "auto_review"`, Codex launches a sandboxed command's proxy
/// with a decider (`policyDecisionTimeoutMs`), so the command's request to a name the allow
/// list misses is asked of Codex (`network/policyRequest`), and Codex asks its reviewer (the
/// scripted model) about exactly that destination. Allowed, the command gets the origin's
/// answer (the name carried by an upstream proxy of the test's own to a local origin); denied,
/// Codex reports the reviewer's refusal, in its words, and nothing reached the origin.
async fn codex_asks_its_reviewer_about_a_destination_the_allow_list_misses(target: Target) {
    let mut allowed = Workspace::new(target, "reviewer-allows");
    if !allowed.can_have_own_requirements() {
        eprintln!("skipped: needs root, `unshare` and overlay mounts for a private /etc/codex");
        return;
    }
    let mut denied = Workspace::new(target, "reviewer-denies");
    let peer = HttpPeer::start().await.unwrap();
    let upstream = UpstreamProxy::start(port_of(&peer)).await;
    let url = format!("http://127.0.0.1:{}", upstream.port);
    let env = [("HTTP_PROXY", url.as_str()), ("NO_PROXY", "127.0.0.1")];
    let server = ServerProcess::start_with_env(target, &[], &env).await.unwrap();
    // An unresolvable name reaches the upstream proxy only with local destinations allowed
    // (it counts as local); the name is on no list.
    let config = "[sandbox_workspace_write]\nnetwork_access = true\n\n\
                  [features.network_proxy]\nenabled = true\nallow_local_binding = true\n\n\
                  [features.network_proxy.domains]\n\"api.example.test\" = \"allow\"\n";
    let cmd = "curl -sS -w '\\nstatus %{http_code}\\n' http://reviewed.example.test/reviewed";
    let calls = || vec![ToolCall::Exec { cmd: cmd.into() }];
    for workspace in [&mut allowed, &mut denied] {
        workspace.requirements = Some("[experimental_network]\nenabled = true\n".into());
        workspace.top_level =
            "approval_policy = \"on-request\"\napprovals_reviewer = \"auto_review\"\n".into();
    }

    let verdict = Verdict::Allow("the user asked for this fetch".into());
    let (outputs, reviews) =
        allowed.run_reviewed(&server, "workspace-write", calls(), config, verdict).await;
    assert!(outputs[0].contains(r#""path":"/reviewed""#), "the origin answered: {}", outputs[0]);
    assert!(outputs[0].contains("status 200"), "{}", outputs[0]);
    assert_reviewed_once(&reviews);
    assert_eq!(upstream.seen(), ["GET http://reviewed.example.test/reviewed HTTP/1.1"]);

    let verdict = Verdict::Deny("nothing asked for reviewed.example.test".into());
    let (outputs, reviews) =
        denied.run_reviewed(&server, "workspace-write", calls(), config, verdict).await;
    let refusal = &outputs[0];
    assert!(refusal.contains("This action was rejected due to unacceptable risk."), "{refusal}");
    assert!(refusal.contains("Reason: nothing asked for reviewed.example.test"), "{refusal}");
    assert!(!refusal.contains("/reviewed\""), "the origin's answer reached the command: {refusal}");
    assert_reviewed_once(&reviews);
    assert_eq!(upstream.seen().len(), 1, "the denied request went nowhere");
    assert_eq!(peer.requests(), ["GET /reviewed"]);
}

/// The reviewer was asked once, about the network access the command's request needed.
fn assert_reviewed_once(reviews: &[Value]) {
    assert_eq!(reviews.len(), 1, "{reviews:?}");
    let asked: String = reviews[0]["input"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|item| item["content"].as_array().into_iter().flatten())
        .filter_map(|part| part["text"].as_str())
        .collect();
    for fact in [
        r#""tool": "network_access""#,
        r#""host": "reviewed.example.test""#,
        r#""port": 80"#,
        r#""protocol": "http""#,
    ] {
        assert!(asked.contains(fact), "{fact} not in what the reviewer was asked: {asked}");
    }
}

/// `allowLocalBinding` lifts only the refusal of a local destination as local, as on the
/// reference: `127.0.0.1`, `localhost` and the host's own address, on no allow list, are
/// `not_allowed` like any name the list misses — the same `403` over plain HTTP, a refused
/// `CONNECT`, a refused SOCKS5 request — and neither origin sees a connection. (`--noproxy ''`:
/// with local binding the child's `NO_PROXY` exempts the local ranges, and the command must go
/// through its proxy to be decided.)
async fn local_binding_still_needs_the_allow_list(target: Target) {
    let peer = HttpPeer::start().await.unwrap();
    let lan = host_address().unwrap();
    let lan_peer = HttpPeer::start_at(lan).await.unwrap();
    let (port, lan_port) = (port_of(&peer), port_of(&lan_peer));
    let home = ExecutorHome::new("network", target, "local-unlisted");
    let (_server, mut client) = home.started(target).await;
    let script = format!(
        "for url in {local}/x http://localhost:{port}/x {lan_url}/x; do \
           curl -sS --noproxy '' -x \"$HTTP_PROXY\" -D - \"$url\" | tr -d '\\r' | grep -iv '^date:'; echo; done; \
         curl -s --noproxy '' -p -x \"$HTTP_PROXY\" -o /dev/null -w 'tunnel %{{http_connect}}\\n' {local}/tunnel; \
         curl -sS --noproxy '' --proxy \"$ALL_PROXY\" {local}/socks; echo \"socks: $?\"",
        local = peer.base_url,
        lan_url = lan_peer.base_url,
    );
    let domains = json!({"allowed.example.test": "allow"});
    let launch = launch(domains, json!({"allowLocalBinding": true}));
    let finished = run(&mut client, proxied("p", &script, &home, Confined::No, launch)).await;
    let not_allowed = |host: &str, port: u16| {
        let body =
            blocked_body(host, "not_allowed", "baseline_policy", port, "Domain not in allowlist.");
        forbidden("blocked-by-allowlist", body)
    };
    let lan = lan.to_string();
    let expected = [
        not_allowed("127.0.0.1", port),
        not_allowed("localhost", port),
        not_allowed(&lan, lan_port),
    ]
    .concat();
    assert_eq!(finished.stdout, format!("{expected}tunnel 403\nsocks: 97\n"));
    let refused = |host: &str, protocol: &str| {
        report(host, protocol, "deny", "baseline_policy", "not_allowed", false)
    };
    assert_eq!(
        reported(&finished.decisions),
        [
            refused("127.0.0.1", "http"),
            refused("localhost", "http"),
            refused(&lan, "http"),
            refused("127.0.0.1", "https_connect"),
            refused("127.0.0.1", "socks5_tcp"),
        ]
    );
    assert_eq!((peer.connections(), lan_peer.connections()), (0, 0), "nothing reached an origin");
}

/// A wildcard allows a local destination it matches once local binding lifts the refusal as
/// local, as on the reference: `*.0.0.1` reaches `127.0.0.1`, `**.localhost` reaches
/// `localhost`, `*` reaches the host's own address too, while an address no pattern matches
/// is `not_allowed`. Without local binding the same wildcards let no local destination
/// through (only an exact entry does).
async fn with_local_binding_a_wildcard_allows_local_destinations_as_it_allows_names(
    target: Target,
) {
    let peer = HttpPeer::start().await.unwrap();
    let lan = host_address().unwrap();
    let lan_peer = HttpPeer::start_at(lan).await.unwrap();
    let lan = lan.to_string();
    let port = port_of(&peer);
    let home = ExecutorHome::new("network", target, "local-wildcards");
    let (_server, mut client) = home.started(target).await;
    let script = format!(
        "for url in {local}/x http://localhost:{port}/x {lan_url}/x; do \
           curl -s --noproxy '' -x \"$HTTP_PROXY\" -o /dev/null -w '%{{http_code}}\\n' \"$url\"; done",
        local = peer.base_url,
        lan_url = lan_peer.base_url,
    );
    let scoped = json!({"*.0.0.1": "allow", "**.localhost": "allow"});
    let cases = [
        (scoped.clone(), true, "200\n200\n403\n", ["allow", "allow", "not_allowed"]),
        (scoped, false, "403\n403\n403\n", ["not_allowed_local"; 3]),
        (json!({"*": "allow"}), true, "200\n200\n200\n", ["allow"; 3]),
    ];
    for (n, (domains, allow_local, codes, reasons)) in cases.into_iter().enumerate() {
        let id = format!("p{n}");
        let launch = launch(domains, json!({"allowLocalBinding": allow_local}));
        let finished = run(&mut client, proxied(&id, &script, &home, Confined::No, launch)).await;
        assert_eq!(finished.stdout, codes, "case {n}");
        let decided: Vec<(String, String)> = reported(&finished.decisions)
            .into_iter()
            .map(|(host, _, _, _, reason, _)| (host, reason))
            .collect();
        let expected: Vec<(String, String)> = ["127.0.0.1", "localhost", lan.as_str()]
            .into_iter()
            .zip(reasons)
            .map(|(host, reason)| (host.to_owned(), reason.to_owned()))
            .collect();
        assert_eq!(decided, expected, "case {n}");
    }
    assert_eq!((peer.connections(), lan_peer.connections()), (4, 1));
}

/// With local binding allowed and a decider (`policyDecisionTimeoutMs`), a local destination
/// the allow list misses is asked of the client like any other, as on the reference: approved,
/// it reaches the origin, reported as the decider's override of `not_allowed`; denied, it gets
/// the decider's `403`. Without local binding the same destinations are refused as local and
/// nobody is asked.
async fn with_local_binding_the_client_decides_local_destinations_the_list_misses(target: Target) {
    let peer = HttpPeer::start().await.unwrap();
    let port = port_of(&peer);
    let home = ExecutorHome::new("network", target, "local-decider");
    let (_server, mut client) = home.started(target).await;
    let script = format!(
        "curl -sS --noproxy '' -x \"$HTTP_PROXY\" -o /dev/null -w '%{{http_code}}\\n' {local}/approved; \
         curl -sS --noproxy '' -x \"$HTTP_PROXY\" -D - http://localhost:{port}/refused | tr -d '\\r' | grep -iv '^date:'; echo",
        local = peer.base_url,
    );
    let decide = |host: &str| match host {
        "127.0.0.1" => json!({"type": "allow"}),
        _ => json!({"type": "deny", "reason": "not_allowed"}),
    };
    let domains = json!({"allowed.example.test": "allow"});

    let mut bound = launch(domains.clone(), json!({"allowLocalBinding": true}));
    bound["policyDecisionTimeoutMs"] = json!(60_000);
    client.ok("process/start", proxied("p", &script, &home, Confined::No, bound)).await.unwrap();
    let (finished, questions) = finish(&mut client, "p", decide).await;
    let asked: Vec<Value> = questions.iter().map(|q| json!([q["id"], q["params"]])).collect();
    let question = |host: &str| json!({"processId": "p", "request": {"protocol": "http", "host": host, "port": port}});
    assert_eq!(asked, [json!([1, question("127.0.0.1")]), json!([2, question("localhost")])]);
    let body =
        blocked_body("localhost", "not_allowed", "decider", port, "Domain not in allowlist.");
    assert_eq!(finished.stdout, format!("200\n{}", forbidden("blocked-by-allowlist", body)));
    assert_eq!(
        reported(&finished.decisions),
        [
            report("127.0.0.1", "http", "allow", "decider", "not_allowed", true),
            report("localhost", "http", "deny", "decider", "not_allowed", false),
        ]
    );
    assert_eq!(peer.requests(), ["GET /approved"]);

    let mut unbound = launch(domains, json!({}));
    unbound["policyDecisionTimeoutMs"] = json!(60_000);
    client.ok("process/start", proxied("q", &script, &home, Confined::No, unbound)).await.unwrap();
    let (finished, questions) = finish(&mut client, "q", decide).await;
    assert!(questions.is_empty(), "asked about a local refusal: {questions:?}");
    assert!(finished.stdout.starts_with("403\n"), "{}", finished.stdout);
    let refused =
        |host: &str| report(host, "http", "deny", "baseline_policy", "not_allowed_local", false);
    assert_eq!(reported(&finished.decisions), [refused("127.0.0.1"), refused("localhost")]);
    assert_eq!(peer.requests(), ["GET /approved"], "the refused requests reached nothing");
}

/// What both SOCKS5 probes begin with (Python): the proxy `$ALL_PROXY` names (`host`,
/// `port`), `exact(s, n)` reading `n` bytes or raising `EOFError`, and `address(target)` a
/// SOCKS5 address (`ATYP` and the address: by address when `target` is one, else by name).
macro_rules! socks_prelude {
    () => {
        r#"
import ipaddress, os, socket, struct, sys
host, port = os.environ["ALL_PROXY"].split("://", 1)[1].rsplit(":", 1)
def exact(s, n):
    data = b""
    while len(data) < n:
        more = s.recv(n - len(data))
        if not more:
            raise EOFError
        data += more
    return data
def address(target):
    try:
        ip = ipaddress.ip_address(target)
        return bytes([1 if ip.version == 4 else 4]) + ip.packed
    except ValueError:
        return bytes([3, len(target)]) + target.encode()
"#
    };
}

/// A SOCKS5 client for a command to run, reading its proxy from `$ALL_PROXY`: for each `label
/// host port` it asks for `host:port` (by address when `host` is one, else by name), then
/// prints `label refused CODE` for a refusal (RFC 1928's reply code), or `label` and the
/// status of the answer to `GET /label` through the connection.
const SOCKS_PROBE: &str = concat!(
    socks_prelude!(),
    r#"
args = sys.argv[1:]
for label, target, target_port in zip(args[0::3], args[1::3], args[2::3]):
    s = socket.create_connection((host, int(port)), timeout=60)
    s.sendall(b"\x05\x01\x00")
    exact(s, 2)
    s.sendall(bytes([5, 1, 0]) + address(target) + struct.pack(">H", int(target_port)))
    reply = exact(s, 4)
    if reply[1] != 0:
        print(label, "refused", reply[1])
        continue
    exact(s, {1: 6, 4: 18}.get(reply[3]) or exact(s, 1)[0] + 2)
    s.sendall(f"GET /{label} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode())
    answer = b""
    while b"\r\n" not in answer:
        more = s.recv(4096)
        if not more:
            break
        answer += more
    print(label, answer.split(b" ")[1].decode() if answer else "closed")
"#
);

/// A SOCKS5 UDP client (RFC 1928 §7) for [`udp_probe`]: it asks `ALL_PROXY` for an
/// association (printing `associate refused CODE` if refused), sends one datagram per `label
/// host port` of its arguments (by address when `host` is one, else by name) with the label as
/// its payload, then either prints the first answer (`answer HOST PORT PAYLOAD`, the header's
/// source) or, given `--hold`, waits for a line on its standard input before it ends.
const UDP_PROBE: &str = concat!(
    socks_prelude!(),
    r#"
hold = sys.argv[1] == "--hold"
args = sys.argv[2:]
control = socket.create_connection((host, int(port)), timeout=60)
control.sendall(b"\x05\x01\x00")
exact(control, 2)
control.sendall(b"\x05\x03\x00\x01\x00\x00\x00\x00\x00\x00")
reply = exact(control, 4)
if reply[1] != 0:
    print("associate refused", reply[1])
    sys.exit(0)
bound = exact(control, 6)
relay = (socket.inet_ntoa(bound[:4]), struct.unpack(">H", bound[4:])[0])
print("relay", relay[0], relay[1] == int(port))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.settimeout(60)
for label, target, target_port in zip(args[0::3], args[1::3], args[2::3]):
    udp.sendto(b"\x00\x00\x00" + address(target) + struct.pack(">H", int(target_port)) + label.encode(), relay)
if hold:
    sys.stdin.readline()
else:
    answer, _ = udp.recvfrom(65536)
    assert answer[:4] == b"\x00\x00\x00\x01", answer
    print("answer", socket.inet_ntoa(answer[4:8]), struct.unpack(">H", answer[8:10])[0], answer[10:].decode())
"#
);

/// `python3 udp_probe.py`, the probe written in `home`, holding or not, sending each case.
fn udp_probe(home: &ExecutorHome, hold: bool, cases: &[(&str, &str, u16)]) -> String {
    home.write("udp_probe.py", UDP_PROBE);
    let args: Vec<String> =
        cases.iter().map(|(label, host, port)| format!("{label} {host} {port}")).collect();
    let mode = if hold { "--hold" } else { "--answer" };
    format!("python3 {} {mode} {}", home.path("udp_probe.py").display(), args.join(" "))
}

/// A UDP socket on `127.0.0.1` that answers every datagram with the same bytes and keeps
/// what it was sent.
struct UdpEcho {
    port: u16,
    received: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    _task: tokio_util::task::AbortOnDropHandle<()>,
}

impl UdpEcho {
    async fn start() -> Self {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let port = socket.local_addr().unwrap().port();
        let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = received.clone();
        let task = tokio::spawn(async move {
            let mut buffer = vec![0u8; 65536];
            while let Ok((length, from)) = socket.recv_from(&mut buffer).await {
                kept.lock().unwrap().push(String::from_utf8_lossy(&buffer[..length]).into_owned());
                let _ = socket.send_to(&buffer[..length], from).await;
            }
        });
        Self { port, received, _task: tokio_util::task::AbortOnDropHandle::new(task) }
    }

    fn received(&self) -> Vec<String> {
        self.received.lock().unwrap().clone()
    }
}

/// `enableSocks5Udp`: a command's datagrams go through its proxy's UDP relay, confined or
/// not, each destination decided and reported as a connection's is (`socks5_udp`): one the
/// policy refuses (`localhost`, by name: local) is dropped, one it allows (`127.0.0.1`) is
/// sent on and its answer comes back headed with who answered. The relay is the SOCKS5 port's
/// number on the command's own loopback. `limited` mode refuses UDP before any policy; a
/// launch without the flag is told "command not supported" (7). Tether only: 0.171 grants the
/// association and then relays nothing (measured: no datagram arrives, no decision is
/// reported).
#[tokio::test]
async fn socks5_udp_relays_what_the_policy_allows() {
    let target = Target::Tether;
    let echo = UdpEcho::start().await;
    // Where `localhost` would lead, were it allowed.
    let elsewhere = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    elsewhere.set_nonblocking(true).unwrap();
    let elsewhere_port = elsewhere.local_addr().unwrap().port();
    let udp = json!({"enableSocks5Udp": true});
    for confined in [Confined::No, Confined::Sandboxed] {
        let home = ExecutorHome::new("network", target, &format!("udp-{confined:?}"));
        let (_server, mut client) = home.started(target).await;
        let cases = [("refused", "localhost", elsewhere_port), ("hello", "127.0.0.1", echo.port)];
        let script = udp_probe(&home, false, &cases);
        let domains = json!({"127.0.0.1": "allow"});
        let finished =
            run(&mut client, proxied("u", &script, &home, confined, launch(domains, udp.clone())))
                .await;
        assert_eq!(
            finished.stdout,
            format!("relay 127.0.0.1 True\nanswer 127.0.0.1 {} hello\n", echo.port),
            "{confined:?}"
        );
        assert_eq!(
            reported(&finished.decisions),
            [
                report(
                    "localhost",
                    "socks5_udp",
                    "deny",
                    "baseline_policy",
                    "not_allowed_local",
                    false
                ),
                report("127.0.0.1", "socks5_udp", "allow", "baseline_policy", "allow", false),
            ],
            "{confined:?}"
        );
        assert!(finished.decisions.iter().all(|d| d.get("method").is_none()));

        // Limited: the datagram's refusal is reported while the command waits; then it ends.
        let script = udp_probe(&home, true, &[("limited", "127.0.0.1", echo.port)]);
        let domains = json!({"127.0.0.1": "allow"});
        let changes = json!({"enableSocks5Udp": true, "mode": "limited"});
        let mut params = proxied("l", &script, &home, confined, launch(domains, changes));
        // Its input a pipe the test holds, so the command waits for the test's line (with
        // none it would read the end at once, and could end before its proxy had decided).
        params["pipeStdin"] = json!(true);
        client.ok("process/start", params).await.unwrap();
        let refusal = loop {
            let message = client.notification().await.unwrap();
            if message["method"] == "network/policyDecision" {
                break message["params"].clone();
            }
        };
        let finish_line = json!({"processId": "l", "chunk": tether_testkit::client::b64encode(b"\n"),
            "writeId": "end"});
        client.ok("process/write", finish_line).await.unwrap();
        let (finished, _) = finish(&mut client, "l", |_| json!({"type": "deny"})).await;
        assert_eq!(finished.stdout, "relay 127.0.0.1 True\n", "{confined:?}");
        assert_eq!(
            reported(std::slice::from_ref(&refusal)),
            [report("127.0.0.1", "socks5_udp", "deny", "mode_guard", "method_not_allowed", false)]
        );
        assert_eq!(refusal["scope"], "non_domain");
        assert!(finished.decisions.is_empty(), "{:?}", finished.decisions);

        // Without the flag.
        let script = udp_probe(&home, false, &[("unasked", "127.0.0.1", echo.port)]);
        let domains = json!({"127.0.0.1": "allow"});
        let finished =
            run(&mut client, proxied("n", &script, &home, confined, launch(domains, json!({}))))
                .await;
        assert_eq!(finished.stdout, "associate refused 7\n", "{confined:?}");
    }
    assert_eq!(echo.received(), ["hello", "hello"]);
    let mut buffer = [0u8; 64];
    let nothing = elsewhere.recv_from(&mut buffer).unwrap_err();
    assert_eq!(nothing.kind(), std::io::ErrorKind::WouldBlock);
}

/// `python3 probe.py`, the probe written in `home`, asking for each `(label, host, port)`.
fn socks_probe(home: &ExecutorHome, cases: &[(&str, String, u16)]) -> String {
    home.write("probe.py", SOCKS_PROBE);
    let args: Vec<String> =
        cases.iter().map(|(label, host, port)| format!("{label} {host} {port}")).collect();
    format!("python3 {} {}", home.path("probe.py").display(), args.join(" "))
}

/// Every report of `finished` allows: what a test shows refused was refused past the policy.
fn all_allowed(finished: &Finished) -> bool {
    finished.decisions.iter().all(|d| d["decision"] == "allow")
}

/// Runs `scenario` in a network of the test's own ([`private_network`]), where private and
/// public addresses can be had without touching the host's; says why and returns when such a
/// network cannot be made here.
async fn in_private_network<Fut>(scenario: impl FnOnce() -> Fut + Send + 'static)
where
    Fut: Future<Output = ()>,
{
    if let Err(error) = private_network::run(scenario).await {
        eprintln!("skipped: no private network here ({error:#})");
    }
}

/// `--proxy-private-ips-via-upstream`: a private address the policy allows (RFC 1918, IPv6
/// unique-local) is reached directly although the executor's `HTTP_PROXY` and `HTTPS_PROXY`
/// apply; with the flag, through them, forward requests and tunnels alike, as with
/// `CODEX_EXEC_SERVER_PROXY_PRIVATE_IPS_VIA_UPSTREAM=true`. Loopback stays local either way,
/// and where no upstream applies to the protocol (only `HTTPS_PROXY`: plain HTTP) the flag
/// changes nothing. Routing never allows: a private address off the allow list (the shared
/// `100.64/10` one) is refused as local with the flag too, and reaches no upstream. Origins
/// on private addresses of a network namespace of the test's own; what the recording
/// upstream saw tells the routes apart.
async fn private_addresses_go_directly_unless_the_server_sends_them_upstream(target: Target) {
    in_private_network(move || async move {
        let private = HttpPeer::start_at(PRIVATE_V4).await.unwrap();
        let unique_local = HttpPeer::start_at(UNIQUE_LOCAL_V6).await.unwrap();
        let shared = HttpPeer::start_at(SHARED_V4).await.unwrap();
        let local = HttpPeer::start().await.unwrap();
        let upstream =
            UpstreamProxy::start_at(std::net::Ipv4Addr::LOCALHOST.into(), Onward::AsAsked(vec![]))
                .await;
        let url = format!("http://127.0.0.1:{}", upstream.port);
        let both = [("HTTP_PROXY", url.as_str()), ("HTTPS_PROXY", url.as_str())];
        let home = ExecutorHome::new("network", target, "private-ips");
        let mut script = String::new();
        for (label, peer) in
            [("private", &private), ("ula", &unique_local), ("shared", &shared), ("local", &local)]
        {
            script.push_str(&format!(
                "curl -s -x \"$HTTP_PROXY\" -o /dev/null -w '{label} %{{http_code}} ' {url}/fwd; \
                 curl -s -p -x \"$HTTP_PROXY\" -o /dev/null -w '%{{http_connect}}\\n' {url}/tun; ",
                url = peer.base_url
            ));
        }
        let domains = json!({PRIVATE_V4.to_string(): "allow",
            UNIQUE_LOCAL_V6.to_string(): "allow", "127.0.0.1": "allow"});
        let changes = json!({"allowUpstreamProxy": true});
        let everything = "private 200 200\nula 200 200\nshared 403 403\nlocal 200 200\n";
        // What the upstream sees of the allowed private addresses: forward requests (when it
        // carries plain HTTP) and tunnels.
        let through = |forward: bool| {
            let authority = |peer: &HttpPeer| peer.base_url["http://".len()..].to_owned();
            let mut seen = Vec::new();
            for peer in [&private, &unique_local] {
                if forward {
                    seen.push(format!("GET {}/fwd HTTP/1.1", peer.base_url));
                }
                seen.push(format!("CONNECT {} HTTP/1.1", authority(peer)));
            }
            seen
        };
        let flag = ["--proxy-private-ips-via-upstream"];
        // An empty variable is passed over, as one that is not set.
        let by_env = [
            ("HTTPS_PROXY", url.as_str()),
            ("HTTP_PROXY", ""),
            ("CODEX_EXEC_SERVER_PROXY_PRIVATE_IPS_VIA_UPSTREAM", "true"),
        ];
        // A server's flags and environment, and what its proxy sends the upstream.
        type Run<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], Vec<String>);
        let runs: [Run; 3] =
            [(&[], &both, vec![]), (&flag, &both, through(true)), (&[], &by_env, through(false))];
        let mut total = 0;
        for (n, (args, env, seen)) in runs.into_iter().enumerate() {
            let (_server, mut client) = home.started_with(target, args, env).await;
            let params = proxied(
                "p",
                &script,
                &home,
                Confined::No,
                launch(domains.clone(), changes.clone()),
            );
            let finished = run(&mut client, params).await;
            assert_eq!(finished.stdout, everything, "run {n}");
            total += seen.len();
            let seen_now = upstream.seen();
            assert_eq!(seen_now[seen_now.len() - seen.len()..], seen[..], "run {n}");
            assert_eq!(seen_now.len(), total, "run {n}: {seen_now:?}");
        }
        assert_eq!(shared.connections(), 0, "the refused address was reached");
    })
    .await;
}

/// `--tcp-upstream-proxy HOST:PORT`: every connection the SOCKS5 listener takes goes through
/// that HTTP `CONNECT` proxy — a name as a name, a public address — or is refused with
/// SOCKS5's "connection refused" (5): an address on the executor's own side of the network
/// (loopback, a private one), `localhost`, and the upstream itself. With
/// `--proxy-private-ips-via-upstream` a private address goes through it too. A launch that
/// does not allow local destinations sends no name (the upstream would resolve it where the
/// policy could not check what it reached), and one that does not allow upstream proxies
/// reaches nothing over SOCKS5. The policy allowed every one of them; the HTTP listener still
/// goes directly. In a network of the test's own, the upstream on a public address of it.
async fn a_mandatory_tcp_upstream_carries_every_socks5_connection_or_none(target: Target) {
    in_private_network(move || async move {
        let public = HttpPeer::start_at(PUBLIC_V4).await.unwrap();
        let private = HttpPeer::start_at(PRIVATE_V4).await.unwrap();
        let local = HttpPeer::start().await.unwrap();
        let upstream = UpstreamProxy::start_at(PUBLIC_V4.into(), Onward::AsAsked(vec![])).await;
        let address = format!("{PUBLIC_V4}:{}", upstream.port);
        let home = ExecutorHome::new("network", target, "tcp-upstream");
        let cases = [
            ("name", PUBLIC_NAME.to_owned(), port_of(&public)),
            ("public", PUBLIC_V4.to_string(), port_of(&public)),
            ("private", PRIVATE_V4.to_string(), port_of(&private)),
            ("loopback", "127.0.0.1".to_owned(), port_of(&local)),
            ("localhost", "localhost".to_owned(), port_of(&local)),
            ("itself", PUBLIC_V4.to_string(), upstream.port),
        ];
        let script = format!(
            "{}; curl -s --noproxy '' -x \"$HTTP_PROXY\" -o /dev/null -w 'http %{{http_code}}\\n' {}/http",
            socks_probe(&home, &cases),
            local.base_url
        );
        let domains = json!({PUBLIC_NAME: "allow", PUBLIC_V4.to_string(): "allow",
            PRIVATE_V4.to_string(): "allow", "127.0.0.1": "allow", "localhost": "allow"});
        let start = |id: &str, up: bool, local: bool| {
            let changes = json!({"allowUpstreamProxy": up, "allowLocalBinding": local});
            proxied(id, &script, &home, Confined::No, launch(domains.clone(), changes))
        };
        let connect =
            |peer: &HttpPeer| format!("CONNECT {} HTTP/1.1", &peer.base_url["http://".len()..]);
        let by_name = format!("CONNECT {PUBLIC_NAME}:{} HTTP/1.1", port_of(&public));
        let outcomes = |name: &str, public: &str, private: &str| {
            format!(
                "name {name}\npublic {public}\nprivate {private}\nloopback refused 5\n\
                 localhost refused 5\nitself refused 5\nhttp 200\n"
            )
        };
        let refused = "refused 5";

        let (_server, mut client) =
            home.started_with(target, &["--tcp-upstream-proxy", &address], &[]).await;
        let finished = run(&mut client, start("p", true, true)).await;
        assert_eq!(finished.stdout, outcomes("200", "200", refused));
        assert!(all_allowed(&finished), "{:?}", finished.decisions);
        assert_eq!(upstream.seen(), [by_name.clone(), connect(&public)]);
        assert_eq!(public.requests(), ["GET /name", "GET /public"]);
        assert_eq!(local.requests(), ["GET /http"], "only the HTTP listener's went directly");

        let finished = run(&mut client, start("q", true, false)).await;
        assert_eq!(finished.stdout, outcomes(refused, "200", refused));
        assert!(all_allowed(&finished), "{:?}", finished.decisions);
        let finished = run(&mut client, start("r", false, true)).await;
        assert_eq!(finished.stdout, outcomes(refused, refused, refused));
        assert!(all_allowed(&finished), "{:?}", finished.decisions);
        assert_eq!(upstream.seen().len(), 3, "{:?}", upstream.seen());

        let flags = ["--tcp-upstream-proxy", &address, "--proxy-private-ips-via-upstream"];
        let (_server, mut client) = home.started_with(target, &flags, &[]).await;
        let finished = run(&mut client, start("p", true, true)).await;
        assert_eq!(finished.stdout, outcomes("200", "200", "200"));
        assert_eq!(upstream.seen()[3..], [by_name, connect(&public), connect(&private)]);
        assert_eq!(private.requests(), ["GET /private"]);
    })
    .await;
}

/// Transparent TCP goes through the SOCKS5 listener, so a mandatory TCP upstream carries it:
/// a program that ignores the proxy variables reaches a name through the upstream (the
/// sandbox's name server stands the name in, and the `CONNECT` names it), while an address
/// the upstream may not carry is refused by a reset though the policy allows it.
async fn a_mandatory_tcp_upstream_carries_transparent_tcp(target: Target) {
    let origin = HttpPeer::start().await.unwrap();
    let port = port_of(&origin);
    let named = ("named.example", std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    let upstream =
        UpstreamProxy::start_at(std::net::Ipv4Addr::LOCALHOST.into(), Onward::AsAsked(vec![named]))
            .await;
    let address = format!("127.0.0.1:{}", upstream.port);
    let home = ExecutorHome::new("network", target, "tcp-upstream-transparent");
    let (_server, mut client) =
        home.started_with(target, &["--tcp-upstream-proxy", &address], &[]).await;
    // A documentation address: never public, never private.
    let script = format!(
        "curl -sS --noproxy '*' -o /dev/null -w '%{{http_code}}\\n' http://named.example:{port}/named; \
         curl -sS --noproxy '*' http://192.0.2.1:{port}/ 2>/dev/null; \
         case $? in 7|55|56) echo refused by a reset;; *) echo \"refused $?\";; esac"
    );
    let domains = json!({"named.example": "allow", "192.0.2.1": "allow"});
    let changes =
        json!({"transparentTcp": true, "allowLocalBinding": true, "allowUpstreamProxy": true});
    let params = proxied("p", &script, &home, Confined::Sandboxed, launch(domains, changes));
    let finished = run(&mut client, params).await;
    assert_eq!(finished.stdout, "200\nrefused by a reset\n");
    assert!(all_allowed(&finished), "{:?}", finished.decisions);
    assert_eq!(upstream.seen(), [format!("CONNECT named.example:{port} HTTP/1.1")]);
    assert_eq!(origin.requests(), ["GET /named"]);
}

/// Under a mandatory TCP upstream, a start held to a managed network (`enforceManagedNetwork`,
/// or `managedNetwork`'s facts) without a proxy of the executor's own (`networkProxy`) is
/// refused, sandboxed or not, before anything else about it is looked at (an empty `argv`
/// here); a start with its own proxy, or not held to one, runs.
async fn a_mandatory_tcp_upstream_refuses_starts_without_a_proxy_of_the_executors_own(
    target: Target,
) {
    let home = ExecutorHome::new("network", target, "tcp-upstream-refusals");
    let (_server, mut client) =
        home.started_with(target, &["--tcp-upstream-proxy", "proxy.internal:3128"], &[]).await;
    let facts = json!({"loopbackPorts": [3128], "allowLocalBinding": false});
    let bridged = json!({"HTTP_PROXY": "http://127.0.0.1:3128"});
    let mut refused = Vec::new();
    for confined in [Confined::No, Confined::Sandboxed] {
        refused.push(caller_run("a", "true", &home, confined, Value::Null, json!({})));
        refused.push(caller_run("b", "true", &home, confined, facts.clone(), bridged.clone()));
    }
    let mut unenforced = caller_run("c", "true", &home, Confined::No, facts, bridged);
    unenforced["enforceManagedNetwork"] = json!(false);
    let mut empty = caller_run("d", "true", &home, Confined::No, Value::Null, json!({}));
    empty["argv"] = json!([]);
    refused.extend([unenforced, empty]);
    for params in refused {
        let error = client.err("process/start", params).await.unwrap();
        assert_eq!(
            (error.code, error.message.as_str()),
            (-32602, "a mandatory TCP upstream requires an executor-local managed proxy")
        );
    }
    let mut plain =
        caller_run("e", "echo plain", &home, Confined::Sandboxed, Value::Null, json!({}));
    plain["enforceManagedNetwork"] = json!(false);
    assert_eq!(run(&mut client, plain).await.stdout, "plain\n");
    let own = proxied("f", "echo own", &home, Confined::Sandboxed, launch(json!({}), json!({})));
    assert_eq!(run(&mut client, own).await.stdout, "own\n");
}
