//! What a person reads before running anything: `--help` that the README matches, shell
//! completion, named executors from the config file, and what `tether serve` says of a
//! mistake at startup.

use std::process::Stdio;

use tether_testkit::server::{tether_binary, workspace_root};
use tether_testkit::{ServerProcess, Target};

fn tether(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    std::process::Command::new(tether_binary().unwrap())
        .args(args)
        .env_remove("TETHER_URL")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Every long flag `--help` shows is in the README, so the README's account is whole.
#[test]
fn every_flag_in_help_is_in_the_readme() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    for command in ["serve", "exec", "shell", "mcp", "cp", "port-forward"] {
        let help = tether(&[command, "--help"], &[]);
        assert_eq!(help.status.code(), Some(0));
        let help = String::from_utf8(help.stdout).unwrap();
        let flags: Vec<&str> = help
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|word| word.starts_with("--") && word.len() > 2 && word != &"--help")
            .collect();
        assert!(flags.len() > 5, "{help}");
        for flag in flags {
            assert!(
                readme.contains(flag),
                "`tether {command} --help` shows {flag}; the README does not"
            );
        }
    }
    let exec = String::from_utf8(tether(&["exec", "--help"], &[]).stdout).unwrap();
    for section in ["Examples:", "Exit codes:", "Ctrl-C:", "Environment:"] {
        assert!(exec.contains(section), "{exec}");
    }
}

#[test]
fn completion_scripts_for_each_shell() {
    for (shell, marker) in
        [("bash", "complete -F"), ("zsh", "#compdef tether"), ("fish", "complete -c tether")]
    {
        let output = tether(&["completions", shell], &[]);
        assert_eq!(output.status.code(), Some(0), "{shell}");
        let script = String::from_utf8(output.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(script.contains("tls-fingerprint"), "{shell} completes flags");
    }
    let output = tether(&["completions", "tcsh"], &[]);
    assert_eq!(output.status.code(), Some(2));
}

/// `[executors.NAME]` in `$XDG_CONFIG_HOME/tether/config.toml`: `tether executors` lists it,
/// `--url NAME` connects with its URL and token, and a name it lacks says which it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_executors_come_from_the_config_file() {
    let config = std::env::temp_dir().join(format!("tether-config-{}", std::process::id()));
    std::fs::create_dir_all(config.join("tether")).unwrap();
    std::fs::write(config.join("tether/box.token"), "named-token\n").unwrap();
    let token = config.join("tether/box.token");
    let auth = ["--ws-auth", "capability-token", "--ws-token-file", token.to_str().unwrap()];
    let server = ServerProcess::start_with(Target::Tether, &auth).await.unwrap();
    let file = format!(
        "[executors.box]\nurl = \"{}\"\ntoken_file = \"box.token\"\n\n[executors.other]\nurl = \"ws://127.0.0.1:9\"\n",
        server.url
    );
    std::fs::write(config.join("tether/config.toml"), file).unwrap();
    let env = [("XDG_CONFIG_HOME", config.to_str().unwrap())];

    let listed = tether(&["executors"], &env);
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        format!("box\t{}\nother\tws://127.0.0.1:9\n", server.url)
    );
    let listed = tether(&["executors", "--json"], &env);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(
        listed,
        serde_json::json!([{"name": "box", "url": server.url}, {"name": "other", "url": "ws://127.0.0.1:9"}])
    );

    let output = tether(&["exec", "--url", "box", "--", "echo", "named"], &env);
    assert_eq!((output.status.code(), output.stdout.as_slice()), (Some(0), &b"named\n"[..]));
    let output = tether(&["exec", "--", "echo", "by-env"], &[env[0], ("TETHER_URL", "box")]);
    assert_eq!(output.stdout, b"by-env\n");

    let output = tether(&["exec", "--url", "nosuch", "--", "true"], &env);
    assert_eq!(output.status.code(), Some(255));
    let path = config.join("tether/config.toml");
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).trim_end(),
        format!(
            "tether exec: --url nosuch is neither a URL nor an executor in {} (it names box, other); give a ws:// or wss:// URL, or add [executors.nosuch] there",
            path.display()
        )
    );

    // An address without its scheme is told the URL it means.
    let output = tether(&["exec", "--url", "127.0.0.1:4500", "--", "true"], &env);
    assert_eq!(output.status.code(), Some(255));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).trim_end(),
        format!(
            "tether exec: --url 127.0.0.1:4500 is not a URL nor an executor in {} (it names box, other); give ws://127.0.0.1:4500, or wss://127.0.0.1:4500 for a TLS server",
            path.display()
        )
    );

    // The README's sample as written, its local executor pointed at this test's server: the
    // placeholder fingerprint spoils its own entry, and only that one.
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let sample = readme
        .split("## Named executors")
        .nth(1)
        .and_then(|section| section.split("```toml\n").nth(1))
        .and_then(|block| block.split("```").next())
        .unwrap();
    std::fs::write(&path, sample.replace("ws://127.0.0.1:4500", &server.url)).unwrap();
    let with_token = [env[0], ("TETHER_TOKEN", "named-token")];
    let output = tether(&["exec", "--url", "local", "--", "echo", "local"], &with_token);
    assert_eq!(output.stdout, b"local\n", "{}", String::from_utf8_lossy(&output.stderr));
    let listed = tether(&["executors"], &env);
    assert_eq!(String::from_utf8_lossy(&listed.stdout), format!("local\t{}\n", server.url));
    let said = String::from_utf8_lossy(&listed.stderr);
    assert!(said.contains("[executors.build] tls_fingerprint"), "{said}");
    let output = tether(&["exec", "--url", "build", "--", "true"], &env);
    assert_eq!(output.status.code(), Some(255));

    std::fs::write(&path, "[executors.box]\nurl = \"ws://x:1\"\ntoken = \"t\"\n").unwrap();
    let output = tether(&["exec", "--url", "box", "--", "true"], &env);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with(&format!("tether exec: {}:3: unknown field `token`", path.display())),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&config);
}

/// An address the system will not listen on, or a spill directory it cannot write in, is one
/// line naming it and the reason, ending with what to do; nothing is printed on standard
/// output, where the URL would go.
#[test]
fn startup_mistakes_are_said_in_one_line_with_what_to_do() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("ws://{}", taken.local_addr().unwrap());
    // An address of the documentation range (RFC 5737), which no interface here has.
    let absent = "ws://192.0.2.1:0";
    for (args, said, ending) in [
        (
            vec!["serve", "--listen", &url],
            format!("cannot listen on {url}: "),
            "another program listens on that port: pick another, or port 0 for a free one",
        ),
        (
            vec!["serve", "--listen", absent, "--insecure-no-auth"],
            format!("cannot listen on {absent}: "),
            "this machine has no such address: listen on one of its own, or on 0.0.0.0 for all",
        ),
        (
            vec!["serve", "--listen", "ws://127.0.0.1:0", "--spill-output-dir", "/nonexistent/d"],
            "--spill-output-dir: cannot create spill files in /nonexistent/d: ".to_owned(),
            "give a directory that exists and this user can write to",
        ),
    ] {
        let output = tether(&args, &[]);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(output.stdout.is_empty(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or_default();
        assert!(last.starts_with(&format!("tether: {said}")), "{stderr}");
        assert!(last.ends_with(&format!("; {ending}")), "{stderr}");
    }
}

/// Runs `tether ARGS…` with its stdout a pipe whose reader is already gone (`| head` after
/// its line): the command stops quietly, as a program killed by SIGPIPE does — no panic, no
/// message, exit 141 as a shell reports it.
fn into_closed_pipe(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    std::process::Command::new(tether_binary().unwrap())
        .args(args)
        .env_remove("TETHER_URL")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn a_closed_stdout_ends_a_listing_quietly() {
    let config = std::env::temp_dir().join(format!("tether-closed-stdout-{}", std::process::id()));
    std::fs::create_dir_all(config.join("tether")).unwrap();
    let executors = "[executors.box]\nurl = \"ws://127.0.0.1:4500\"\n";
    std::fs::write(config.join("tether/config.toml"), executors).unwrap();
    let config_home = config.to_str().unwrap();
    let env = [("XDG_CONFIG_HOME", config_home)];
    for args in [
        &["completions", "bash"][..],
        &["completions", "zsh"],
        &["completions", "fish"],
        &["executors"],
    ] {
        let output = into_closed_pipe(args, &env);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!((output.status.code(), stderr.as_ref()), (Some(141), ""), "{args:?}");
    }
    std::fs::remove_dir_all(config).unwrap();
}

/// A command line a command refuses exits with that command's own failure code, never one it
/// documents as an outcome: `tether exec`'s 255 (2 could be the remote command's), `tether
/// mcp`'s and `tether cp`'s 1 (`mcp`'s 2 is "the tool reported an error"); clap's 2 for the
/// rest. The refusal still says what is wrong; help still exits 0.
#[test]
fn a_wrong_command_line_exits_with_the_commands_own_failure_code() {
    for (command, code) in
        [("exec", 255), ("shell", 255), ("mcp", 1), ("cp", 1), ("serve", 2), ("token", 2)]
    {
        let refused = tether(&[command, "--no-such-flag"], &[]);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(code), "{command}: {stderr}");
        assert!(stderr.contains("--no-such-flag"), "{command}: {stderr}");
        assert_eq!(tether(&[command, "--help"], &[]).status.code(), Some(0), "{command}");
    }
}
