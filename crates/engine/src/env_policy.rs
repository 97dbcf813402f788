//! How a child's environment is built.
//!
//! Without a policy the child gets exactly the `env` the client sent: nothing of the executor
//! leaks in. With a policy, the executor's own environment is filtered in this order: inherit
//! (`core`, `all` or `none`), drop credential-looking names unless told not to, drop `exclude`
//! matches, add `set`, keep only `includeOnly` matches, and finally overlay the request's `env`,
//! so the caller's explicit values always win. Variables that carry the executor's own secrets
//! are stripped in every case.

use std::collections::BTreeMap;

use tether_protocol::process::{EnvInherit, EnvPolicy};

use crate::wildcard;

/// Names a `core` policy inherits: enough for a shell to find programs, a home and a locale.
pub const CORE_VARIABLES: &[&str] = &[
    "PATH", "SHELL", "TMPDIR", "TEMP", "TMP", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "LOGNAME",
    "USER",
];

/// Names dropped unless `ignoreDefaultExcludes` is set: anything that looks like a credential.
/// Wider than the reference's three (`*KEY*`, `*SECRET*`, `*TOKEN*`): passwords, credential
/// files, auth sockets and tokens, cookies and database URLs (which carry passwords) too, and
/// names whose value is a credential by convention: `*_DSN` (an error tracker's key), webhook
/// URLs (whoever has one may post) and `*_JWT` (a CI job's identity token). `*AUTH_*` and
/// `*_AUTH` rather than `*AUTH*`, so `GIT_AUTHOR_NAME` still reaches commits. Whatever its
/// name, a value with a URL that carries credentials is dropped too
/// ([`carries_url_credentials`]).
pub const DEFAULT_EXCLUDES: &[&str] = &[
    "*KEY*",
    "*SECRET*",
    "*TOKEN*",
    "*PASS*",
    "*CREDENTIAL*",
    "*AUTH_*",
    "*_AUTH",
    "*COOKIE*",
    "DATABASE_URL",
    "*_DATABASE_URL",
    "*_DSN",
    "*WEBHOOK*",
    "*_JWT",
];

/// The server's own settings (`TETHER_*`: tokens, URLs, limits): never inherited from the
/// executor, whatever the policy. A client may still set such a name in `env` itself.
const SERVER_OWN_PREFIX: &str = "TETHER_";

/// The executor's own credentials, never handed to a child whatever the request says.
pub const NEVER_INHERITED: &[&str] = &[
    "TETHER_AUTH_TOKEN",
    "CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN",
    "NODE_REPL_AUTH_TOKEN",
    "OPENAI_FEDERATION_RULE_ID",
    "OPENAI_IDENTITY_TOKEN_FILE",
    "OPENAI_WORKLOAD_IDENTITY_CONTEXT",
];

/// Builds the child environment from the request and the executor's environment `parent`.
pub fn child_env(
    env: &BTreeMap<String, String>,
    policy: Option<&EnvPolicy>,
    parent: impl IntoIterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(policy) = policy {
        let parent = parent.into_iter().filter(|(name, _)| {
            !name
                .get(..SERVER_OWN_PREFIX.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(SERVER_OWN_PREFIX))
        });
        out.extend(parent.filter(|(name, _)| match policy.inherit {
            EnvInherit::All => true,
            EnvInherit::None => false,
            EnvInherit::Core => CORE_VARIABLES.iter().any(|core| core.eq_ignore_ascii_case(name)),
        }));
        if !policy.ignore_default_excludes {
            out.retain(|name, value| {
                !matches_any(DEFAULT_EXCLUDES, name) && !carries_url_credentials(value)
            });
        }
        out.retain(|name, _| !matches_any(&policy.exclude, name));
        out.extend(policy.set.iter().map(|(k, v)| (k.clone(), v.clone())));
        if !policy.include_only.is_empty() {
            out.retain(|name, _| matches_any(&policy.include_only, name));
        }
    }
    out.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
    out.retain(|name, _| !NEVER_INHERITED.iter().any(|n| n.eq_ignore_ascii_case(name)));
    out
}

/// Whether `value` holds a URL with userinfo (`scheme://user:password@host`, or
/// `scheme://token@host`): proxies, package indexes, databases and queues all take their
/// credentials that way, under names no list foresees (`HTTPS_PROXY`, `PIP_INDEX_URL`,
/// `REDIS_URL`). Every `://` in the value is looked at, since one variable may list several
/// URLs. As RFC 3986 reads a URL, the userinfo is the part of the authority before an `@`, and
/// the authority ends at the first `/`, `?` or `#`; so an `@` in a path or query
/// (`http://example.com/a@b`) is no credential. Whitespace ends it too, separating URLs in a
/// list.
pub fn carries_url_credentials(value: &str) -> bool {
    value.match_indices("://").any(|(at, separator)| {
        // A scheme is a letter, then letters, digits, `+`, `-` or `.`: the characters before
        // `://` hold one if any of them, back to the first that cannot be in one, is a letter.
        let has_scheme = value[..at]
            .bytes()
            .rev()
            .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
            .any(|b| b.is_ascii_alphabetic());
        has_scheme
            && value[at + separator.len()..]
                .split(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
                .next()
                .is_some_and(|authority| authority.contains('@'))
    })
}

fn matches_any<S: AsRef<str>>(patterns: &[S], name: &str) -> bool {
    patterns.iter().any(|p| wildcard::matches(p.as_ref().as_bytes(), name.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn parent() -> Vec<(String, String)> {
        map(&[
            ("PATH", "/bin"),
            ("HOME", "/root"),
            ("MY_API_KEY", "k"),
            ("my_token", "t"),
            ("FOO_PLAIN", "f"),
            ("NODE_REPL_AUTH_TOKEN", "n"),
            ("PGPASSWORD", "p"),
            ("DATABASE_URL", "postgres://u:p@h/db"),
            ("SSH_AUTH_SOCK", "/tmp/agent"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "/k.json"),
            ("GIT_AUTHOR_NAME", "A"),
            ("TETHER_WS_TOKEN", "server's"),
        ])
        .into_iter()
        .collect()
    }

    fn policy(inherit: EnvInherit) -> EnvPolicy {
        EnvPolicy {
            inherit,
            ignore_default_excludes: false,
            exclude: vec![],
            set: BTreeMap::new(),
            include_only: vec![],
        }
    }

    #[test]
    fn without_a_policy_the_env_is_exact() {
        let env = map(&[("FOO", "bar")]);
        assert_eq!(child_env(&env, None, parent()), env);
    }

    #[test]
    fn core_inherits_the_core_names_only() {
        let out = child_env(&BTreeMap::new(), Some(&policy(EnvInherit::Core)), parent());
        assert_eq!(out, map(&[("HOME", "/root"), ("PATH", "/bin")]));
    }

    #[test]
    fn all_drops_credentials_unless_told_not_to() {
        let out = child_env(&BTreeMap::new(), Some(&policy(EnvInherit::All)), parent());
        assert_eq!(
            out,
            map(&[
                ("FOO_PLAIN", "f"),
                ("GIT_AUTHOR_NAME", "A"),
                ("HOME", "/root"),
                ("PATH", "/bin")
            ])
        );
        let mut keep = policy(EnvInherit::All);
        keep.ignore_default_excludes = true;
        let out = child_env(&BTreeMap::new(), Some(&keep), parent());
        assert!(out.contains_key("MY_API_KEY") && out.contains_key("my_token"));
        assert!(out.contains_key("PGPASSWORD") && out.contains_key("SSH_AUTH_SOCK"));
        assert!(!out.contains_key("NODE_REPL_AUTH_TOKEN"), "executor secrets never leak");
        assert!(!out.contains_key("TETHER_WS_TOKEN"), "nor the server's own settings");
        let asked = map(&[("TETHER_MODE", "the client's own")]);
        assert_eq!(child_env(&asked, Some(&keep), parent())["TETHER_MODE"], "the client's own");
    }

    #[test]
    fn credentials_in_urls_and_conventional_names_are_withheld_by_default() {
        let secrets = [
            ("HTTPS_PROXY", "http://user:pass@proxy.internal:3128"),
            ("PIP_INDEX_URL", "https://build:s3cr3t@pypi.internal/simple"),
            ("REDIS_URL", "redis://:hunter2@cache:6379/0"),
            ("MONGODB_URI", "mongodb+srv://app:pw@cluster0.example.net/db?retryWrites=true"),
            ("SENTRY_DSN", "https://abc123@o1.ingest.sentry.io/42"),
            ("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T0/B0/XYZ"),
            ("CI_JOB_JWT", "eyJhbGciOiJSUzI1NiJ9.e30.sig"),
            ("PIP_EXTRA_INDEX_URL", "https://pypi.org/simple https://u:p@extra.internal/simple"),
            ("AMQP_ADDR", "amqp://guest@rabbit"),
        ];
        let harmless = [
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("HOME", "/root"),
            ("DOCS", "http://example.com/a@b"),
            ("SEARCH", "https://example.com/find?who=a@b#c@d"),
            ("HTTP_PROXY", "http://proxy.internal:3128"),
            ("NO_PROXY", "localhost,127.0.0.1"),
            ("GIT_AUTHOR_EMAIL", "dev@example.com"),
            ("GIT_REMOTE", "git@github.com:org/repo.git"),
            ("NOTE", "no scheme before ://u@h, nor in 9://u@h"),
        ];
        let parent: Vec<(String, String)> =
            secrets.iter().chain(&harmless).map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let out = child_env(&BTreeMap::new(), Some(&policy(EnvInherit::All)), parent.clone());
        let passed: Vec<&str> = out.keys().map(String::as_str).collect();
        let mut expected: Vec<&str> = harmless.iter().map(|(k, _)| *k).collect();
        expected.sort();
        assert_eq!(passed, expected);

        let mut keep = policy(EnvInherit::All);
        keep.ignore_default_excludes = true;
        let out = child_env(&BTreeMap::new(), Some(&keep), parent);
        assert_eq!(out.len(), secrets.len() + harmless.len(), "the defaults can be turned off");
        let asked = map(&[("REDIS_URL", "redis://:mine@localhost")]);
        let out = child_env(&asked, Some(&policy(EnvInherit::All)), Vec::new());
        assert_eq!(out, asked, "what the client sends itself is its to send");
    }

    #[test]
    fn exclude_set_include_only_then_env_overlay() {
        let mut p = policy(EnvInherit::All);
        p.exclude = vec!["foo*".into()];
        p.set = map(&[("A", "from-set"), ("B", "from-set")]);
        p.include_only = vec!["a".into(), "B".into(), "PATH".into(), "FOO_PLAIN".into()];
        let env = map(&[("B", "from-env")]);
        let out = child_env(&env, Some(&p), parent());
        assert_eq!(out, map(&[("A", "from-set"), ("B", "from-env"), ("PATH", "/bin")]));
    }
}
