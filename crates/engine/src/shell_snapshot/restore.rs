//! Restoring a snapshot: the start request rewritten so the shell evaluates the captured state,
//! then runs the command's script.
//!
//! The state travels in the environment, in chunks (one variable may hold at most 128 KiB on
//! Linux), which reaches the shell wherever it runs, a sandbox included. The restore removes
//! those variables before anything else runs, so the command and its children never see them.
//! The shell is started so that its startup files do not run again (`bash -p`, `zsh -f`): what
//! they would do is in the state already.

use std::sync::Arc;

use tether_protocol::process::ExecParams;

use super::{Shell, Snapshot};

/// The prefix of the variables that carry the state.
pub(super) const STATE_VARIABLE: &str = "__TETHER_SHELL_SNAPSHOT_";
/// The most of the state one variable carries: well under Linux's 128 KiB per string.
const CHUNK_BYTES: usize = 60 * 1024;

/// `params` (a `<shell> -lc <script>` start) rewritten to restore `snapshot` first. Captured
/// variables are the base of the request's `env`; the request's own values win.
pub(super) fn restore(mut params: ExecParams, shell: Shell, snapshot: Arc<Snapshot>) -> ExecParams {
    let requested = std::mem::take(&mut params.env);
    params.env = snapshot.environment.clone();
    params.env.extend(requested);
    let mut names = Vec::new();
    let mut state = snapshot.state.as_str();
    while !state.is_empty() {
        let mut end = state.len().min(CHUNK_BYTES);
        while !state.is_char_boundary(end) {
            end -= 1;
        }
        let (chunk, rest) = state.split_at(end);
        let name = format!("{STATE_VARIABLE}{}", names.len());
        params.env.insert(name.clone(), chunk.to_owned());
        names.push(name);
        state = rest;
    }
    let expansions: String = names.iter().map(|name| format!("${{{name}}}")).collect();
    let evaluate = if names.is_empty() {
        ":".to_owned()
    } else {
        format!("eval \"unset {}\n{expansions}\"", names.join(" "))
    };
    let (flag, startup) = match shell {
        Shell::Bash => ("-pc", "set +o privileged\n"),
        Shell::Zsh => ("-fc", "setopt RCS\n"),
        Shell::Sh => ("-c", ""),
    };
    params.argv[1] = flag.to_owned();
    params.argv[2] = format!(
        "{startup}if ! {evaluate} >/dev/null; then printf 'failed to restore shell snapshot\\n' >&2; fi\n{}",
        params.argv[2]
    );
    params
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tether_protocol::PathUri;

    use super::*;

    fn params(env: &[(&str, &str)]) -> ExecParams {
        let argv = ["/bin/bash", "-lc", "rcfn", "extra"].map(String::from).to_vec();
        let mut params = ExecParams::new("p", argv, PathUri::parse("file:///").unwrap());
        params.env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        params
    }

    #[test]
    fn the_request_env_wins_and_the_state_is_chunked() {
        let snapshot = Arc::new(Snapshot {
            state: "é".repeat(CHUNK_BYTES),
            environment: BTreeMap::from([
                ("A".into(), "captured".into()),
                ("B".into(), "b".into()),
            ]),
        });
        let restored = restore(params(&[("A", "requested")]), Shell::Bash, snapshot);
        assert_eq!(restored.env["A"], "requested");
        assert_eq!(restored.env["B"], "b");
        let chunks: Vec<_> =
            restored.env.keys().filter(|k| k.starts_with(STATE_VARIABLE)).collect();
        assert_eq!(chunks.len(), 2);
        assert_eq!(&restored.argv[..2], ["/bin/bash", "-pc"]);
        assert!(restored.argv[2].starts_with("set +o privileged\nif ! eval \"unset __TETHER_SHELL_SNAPSHOT_0 __TETHER_SHELL_SNAPSHOT_1\n"));
        assert!(restored.argv[2].ends_with("\nrcfn"));
        assert_eq!(restored.argv[3], "extra");
    }
}
