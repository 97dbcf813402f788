//! The deployment recipe in `deploy/`: the Kubernetes manifests are valid for Kubernetes 1.37
//! (`kubernetes-validate --strict`, which `scripts/test` installs), they hang together (probes,
//! ports, the secret's mount, the grace periods), and the command line the executor pod and the
//! image run is one `tether serve` starts with and serves a real client on — the token minted
//! the way the README tells a control plane to.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml_ng::Value;
use tether_testkit::scratch::Scratch;
use tether_testkit::server::tether_binary;
use tether_testkit::{ServerProcess, Target};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// The manifests: every YAML file under `deploy/kubernetes` but the kustomization.
fn manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy_dir().join("kubernetes"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .filter(|path| path.file_name().is_some_and(|name| name != "kustomization.yaml"))
        .collect();
    files.sort();
    files
}

fn yaml(path: &Path) -> Value {
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn statefulset() -> Value {
    yaml(&deploy_dir().join("kubernetes/statefulset.yaml"))
}

#[test]
fn the_manifests_validate_strictly_against_kubernetes_1_37() {
    let files = manifests();
    assert!(files.len() >= 4, "{files:?}");
    let out = Command::new("kubernetes-validate")
        .args(["--strict", "--kubernetes-version", "1.37.0"])
        .args(&files)
        .output()
        .unwrap_or_else(|error| {
            panic!("cannot run kubernetes-validate ({error}): pip install kubernetes-validate (scripts/test does)")
        });
    let said =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}");
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy();
        assert!(said.contains(&format!("{name} passed")), "{name} not checked: {said}");
    }
}

#[test]
fn the_kustomization_applies_every_manifest() {
    let kustomization = yaml(&deploy_dir().join("kubernetes/kustomization.yaml"));
    let mut listed: Vec<String> = kustomization["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|resource| resource.as_str().unwrap().to_owned())
        .collect();
    listed.sort();
    let on_disk: Vec<String> = manifests()
        .iter()
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(listed, on_disk);
    // Every Secret the kustomization makes is one the pod mounts.
    let pod = &statefulset()["spec"]["template"]["spec"];
    let mounted: Vec<&Value> = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|volume| volume.get("secret").map(|secret| &secret["secretName"]))
        .collect();
    for secret in kustomization["secretGenerator"].as_sequence().unwrap() {
        assert!(mounted.contains(&&secret["name"]), "{:?} is not mounted", secret["name"]);
    }
}

/// The pod's container, and what its args say.
struct Container {
    spec: Value,
    args: Vec<String>,
}

impl Container {
    fn of_statefulset() -> Self {
        let set = statefulset();
        let spec = set["spec"]["template"]["spec"]["containers"][0].clone();
        let args = spec["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|arg| arg.as_str().unwrap().to_owned())
            .collect();
        Self { spec, args }
    }

    fn flag(&self, name: &str) -> Option<&str> {
        let at = self.args.iter().position(|arg| arg == name)?;
        self.args.get(at + 1).map(String::as_str)
    }
}

#[test]
fn the_executor_pod_hangs_together() {
    let set = statefulset();
    let pod = &set["spec"]["template"]["spec"];
    let container = Container::of_statefulset();

    // The port it listens on is the one the probes, the Service and the scrape use.
    // Over TLS, with the certificate the Secret mounts.
    let listen = container.flag("--listen").unwrap();
    assert_eq!(listen, "wss://0.0.0.0:4500");
    assert_eq!(container.spec["readinessProbe"]["httpGet"]["scheme"].as_str(), Some("HTTPS"));
    let tls = container.spec["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|mount| mount["name"] == "tls")
        .unwrap();
    let tls_dir = tls["mountPath"].as_str().unwrap();
    for flag in ["--tls-cert", "--tls-key"] {
        assert!(container.flag(flag).unwrap().starts_with(tls_dir), "{flag}");
    }
    assert_eq!(container.spec["ports"][0]["containerPort"].as_u64(), Some(4500));
    // The scrape goes to the metrics port, which asks for no token, and only the monitoring
    // namespace may reach it.
    let annotations = &set["spec"]["template"]["metadata"]["annotations"];
    let metrics = container.flag("--metrics-listen").unwrap();
    let metrics_port = metrics.rsplit(':').next().unwrap();
    assert_eq!(annotations["prometheus.io/port"].as_str(), Some(metrics_port));
    assert_eq!(annotations["prometheus.io/path"].as_str(), Some("/metrics"));
    let policy = yaml(&deploy_dir().join("kubernetes/networkpolicy.yaml"));
    for rule in policy["spec"]["ingress"].as_sequence().unwrap() {
        let ports: Vec<u64> = rule["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(|p| p["port"].as_u64())
            .collect();
        let namespaces: Vec<&str> = rule["from"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(|from| {
                from["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"].as_str()
            })
            .collect();
        if ports.contains(&metrics_port.parse().unwrap()) {
            assert_eq!(namespaces, ["monitoring"], "only the scraper reaches the open port");
        }
    }

    // Readiness is /readyz; liveness is not (a drain answers 503 there, and must not get the
    // pod restarted under the commands it waits for).
    assert_eq!(container.spec["readinessProbe"]["httpGet"]["path"].as_str(), Some("/readyz"));
    assert!(container.spec["livenessProbe"]["httpGet"].is_null());

    // The kubelet's SIGKILL comes after the server's own drain.
    let grace: u64 = container.flag("--shutdown-grace-secs").unwrap().parse().unwrap();
    let kubelet = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(kubelet > grace, "terminationGracePeriodSeconds {kubelet} ≤ the drain's {grace}");

    // The shared secret is read from the Secret's mount.
    let secret = container.flag("--ws-shared-secret-file").unwrap();
    let mounts = container.spec["volumeMounts"].as_sequence().unwrap();
    let mount = mounts.iter().find(|mount| mount["name"] == "shared-secret").unwrap();
    assert!(secret.starts_with(mount["mountPath"].as_str().unwrap()), "{secret}");
    assert_eq!(mount["readOnly"].as_bool(), Some(true));

    // Agents' commands find no Kubernetes credentials, and do not run as root.
    assert_eq!(pod["automountServiceAccountToken"].as_bool(), Some(false));
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
}

/// `args` without `--listen` and its value, the secret file replaced by `secret`.
fn runnable(args: &[String], secret: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => {
                args.next();
            }
            "--ws-shared-secret-file" => {
                args.next();
                out.extend([arg.clone(), secret.display().to_string()]);
            }
            // A certificate made at start stands for the one the Secret mounts.
            "--tls-cert" => {
                args.next();
                out.push("--tls-self-signed".to_owned());
            }
            "--tls-key" => {
                args.next();
            }
            // Any free port here: tests run side by side.
            "--metrics-listen" => {
                args.next();
                out.extend([arg.clone(), "127.0.0.1:0".to_owned()]);
            }
            _ => out.push(arg.clone()),
        }
    }
    out
}

/// Starts `tether serve` with `args` (on a loopback port), mints a token with `tether token
/// mint` as a control plane would, and runs a command through the server with it.
async fn serves_a_client_with(args: &[String], audience: Option<&str>) {
    let scratch = Scratch::new("deploy");
    let secret = scratch.file("shared-secret", b"0123456789abcdef0123456789abcdef0123456789\n");
    let args = runnable(args, &secret);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();

    let mut mint = Command::new(tether_binary().unwrap());
    mint.args(["token", "mint", "--ttl", "5m", "--shared-secret-file"]).arg(&secret);
    if let Some(audience) = audience {
        mint.args(["--audience", audience]);
    }
    let minted = mint.output().unwrap();
    assert!(minted.status.success(), "{}", String::from_utf8_lossy(&minted.stderr));
    let token = String::from_utf8(minted.stdout).unwrap();

    let mut pinned = Vec::new();
    if let Some(fingerprint) = &server.fingerprint {
        pinned.extend(["--tls-fingerprint".to_owned(), fingerprint.clone()]);
    }
    let exec = tokio::process::Command::new(tether_binary().unwrap())
        .args(["exec", "--url", &server.url, "--no-stdin"])
        .args(&pinned)
        .args(["--", "echo", "from the pod"])
        .env("TETHER_TOKEN", token.trim())
        .kill_on_drop(true)
        .output();
    let out =
        tokio::time::timeout(std::time::Duration::from_secs(30), exec).await.unwrap().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from the pod\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_pods_command_line_serves_a_client_with_a_minted_token() {
    let container = Container::of_statefulset();
    serves_a_client_with(&container.args, container.flag("--ws-audience")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_images_command_line_serves_a_client_with_a_minted_token() {
    let recipe = std::fs::read_to_string(deploy_dir().join("Containerfile")).unwrap();
    let line = |directive: &str| {
        recipe
            .lines()
            .find_map(|line| line.strip_prefix(directive))
            .unwrap_or_else(|| panic!("no {directive} in the Containerfile"))
            .trim()
            .to_owned()
    };
    assert_eq!(line("STOPSIGNAL "), "SIGTERM");
    let entrypoint: Vec<String> = serde_json::from_str(&line("ENTRYPOINT ")).unwrap();
    assert_eq!(entrypoint[1..], ["serve"]);
    let cmd: Vec<String> = serde_json::from_str(&line("CMD ")).unwrap();
    assert!(cmd.windows(2).any(|pair| pair == ["--listen", "ws://0.0.0.0:4500"]), "{cmd:?}");
    serves_a_client_with(&cmd, None).await;
}

/// What a platform engineer applying `deploy/kubernetes` to a fresh cluster needs of it: the
/// namespace exists, at the Pod Security level the executor pod's unconfined profiles need;
/// egress reaches neither the cloud's metadata address nor the cluster's private ranges (the
/// API server, the nodes); every scratch volume is bounded; executors spread over nodes.
#[test]
fn the_manifests_fit_a_fresh_cluster() {
    let kustomization = yaml(&deploy_dir().join("kubernetes/kustomization.yaml"));
    let namespace = yaml(&deploy_dir().join("kubernetes/namespace.yaml"));
    assert_eq!(namespace["kind"], "Namespace");
    assert_eq!(namespace["metadata"]["name"], kustomization["namespace"]);
    let pod = &statefulset()["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "Unconfined");
    let labels = &namespace["metadata"]["labels"];
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "privileged", "Unconfined needs it");

    let policy = yaml(&deploy_dir().join("kubernetes/networkpolicy.yaml"));
    let types: Vec<&str> = policy["spec"]["policyTypes"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(types.contains(&"Egress"), "{types:?}");
    let blocks: Vec<&Value> = policy["spec"]["egress"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|rule| rule["to"].as_sequence().into_iter().flatten())
        .filter_map(|peer| peer.get("ipBlock"))
        .collect();
    assert!(!blocks.is_empty());
    let ipv4_open = blocks.iter().find(|block| block["cidr"] == "0.0.0.0/0").unwrap();
    let except: Vec<&str> =
        ipv4_open["except"].as_sequence().unwrap().iter().filter_map(Value::as_str).collect();
    for closed in ["169.254.0.0/16", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"] {
        assert!(except.contains(&closed), "egress reaches {closed}: {except:?}");
    }

    for volume in pod["volumes"].as_sequence().unwrap() {
        if let Some(dir) = volume.get("emptyDir") {
            assert!(dir.get("sizeLimit").is_some(), "{:?} has no size limit", volume["name"]);
        }
    }
    let spread = pod["topologySpreadConstraints"].as_sequence().unwrap();
    assert!(spread.iter().any(|c| c["topologyKey"] == "kubernetes.io/hostname"));
}

/// A `major.minor` Rust version, as `rust-version` and an image tag write it.
fn rust_version(text: &str) -> (u32, u32) {
    let mut parts = text.split('.').map(|part| part.parse::<u32>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

/// The image builds (a check without building it, which needs a container engine and the
/// network): its builder's Rust is the workspace's declared minimum (`rust-version`, which the
/// code keeps to), and no locked dependency asks for a newer one — cargo would refuse to
/// build it there.
#[test]
fn the_images_builder_is_new_enough_for_the_locked_tree() {
    let recipe = std::fs::read_to_string(deploy_dir().join("Containerfile")).unwrap();
    let builder = recipe
        .lines()
        .find_map(|line| line.strip_prefix("FROM docker.io/library/rust:"))
        .expect("a rust builder stage in the Containerfile");
    let builder = builder.split_whitespace().next().unwrap();
    let builder = rust_version(builder.split('-').next().unwrap());

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manifest: toml::Table =
        std::fs::read_to_string(root.join("Cargo.toml")).unwrap().parse().unwrap();
    let declared = manifest["workspace"]["package"]["rust-version"].as_str().unwrap();
    assert_eq!(
        builder,
        rust_version(declared),
        "the Containerfile builds with Rust {builder:?}; the workspace declares {declared}"
    );

    let metadata = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--manifest-path"])
        .arg(root.join("Cargo.toml"))
        .output()
        .unwrap();
    assert!(metadata.status.success(), "{}", String::from_utf8_lossy(&metadata.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&metadata.stdout).unwrap();
    let newer: Vec<String> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|package| {
            let wanted = package["rust_version"].as_str()?;
            (rust_version(wanted) > builder)
                .then(|| format!("{} {} needs Rust {wanted}", package["name"], package["version"]))
        })
        .collect();
    assert!(newer.is_empty(), "newer than the image's builder: {newer:?}");
}
