//! Remote patterns: `tether cp ':/var/log/*.log' ./logs/`. The executor has no shell between
//! the copy and its files, so the copy expands the pattern itself, as scp's remote shell would:
//! the last part of the path only (`*`, `?`, `[abc]`, `[a-z]`, `[!x]`), against the names its
//! directory lists, sorted; `*` and `?` match no leading dot, as in `sh`. A pattern that
//! matches nothing is an error naming it, as in a shell without `nullglob`.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use tether_client::ExecServerClient;
use tether_engine::fs::FileSystem as _;
use tether_protocol::fs::FsReadDirectoryParams;

/// Whether `path`'s last part is a pattern rather than a name.
pub(super) fn is_pattern(path: &Path) -> bool {
    path.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.contains(['*', '?', '[']))
}

/// The paths on the executor that `pattern` (absolute, its last part a pattern) names, sorted.
pub(super) async fn expand(
    client: &ExecServerClient,
    pattern: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    let directory = pattern.parent().context("a pattern needs a directory")?;
    let wanted = pattern.file_name().and_then(|name| name.to_str()).unwrap_or_default();
    let params = FsReadDirectoryParams {
        path: super::uri(directory)?,
        include_metadata: None,
        sandbox: None,
    };
    let listing =
        client.read_directory(params).await.map_err(|error| super::remote(directory, error))?;
    let mut names: Vec<String> = listing
        .entries
        .into_iter()
        .map(|entry| entry.file_name)
        .filter(|name| matches(wanted, name))
        .collect();
    if names.is_empty() {
        bail!(
            ":{}: no match on the executor; check the pattern, or name the files one by one",
            pattern.display()
        );
    }
    names.sort();
    Ok(names.into_iter().map(|name| directory.join(name)).collect())
}

/// Whether `name` matches the pattern `pattern` (see the module's doc).
fn matches(pattern: &str, name: &str) -> bool {
    let (pattern, name): (Vec<char>, Vec<char>) =
        (pattern.chars().collect(), name.chars().collect());
    if name.first() == Some(&'.') && pattern.first() != Some(&'.') {
        return false;
    }
    matches_from(&pattern, &name)
}

/// The matching itself: iterative, with one point to go back to per `*` (the last one met),
/// so a pattern of many stars costs time linear in the name for each of them, never
/// exponential.
fn matches_from(pattern: &[char], name: &[char]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p += 1;
                continue;
            }
            Some('?') => {
                p += 1;
                n += 1;
                continue;
            }
            Some('[') => {
                if let Some((inside, next)) = class(&pattern[p..], name[n]) {
                    if inside {
                        p += next;
                        n += 1;
                        continue;
                    }
                } else if name[n] == '[' {
                    // An unclosed `[` is itself.
                    p += 1;
                    n += 1;
                    continue;
                }
            }
            Some(literal) if *literal == name[n] => {
                p += 1;
                n += 1;
                continue;
            }
            _ => {}
        }
        match star {
            // The last `*` takes one more character, and the rest is tried again from there.
            Some((at, taken)) => {
                star = Some((at, taken + 1));
                p = at + 1;
                n = taken + 1;
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// A `[…]` class at the start of `pattern`: whether `c` is in it, and its length; `None` when
/// it is not closed.
fn class(pattern: &[char], c: char) -> Option<(bool, usize)> {
    let mut at = 1;
    let negated = matches!(pattern.get(at), Some('!' | '^'));
    if negated {
        at += 1;
    }
    let mut inside = false;
    let mut first = true;
    while let Some(&member) = pattern.get(at) {
        if member == ']' && !first {
            return Some((inside != negated, at + 1));
        }
        first = false;
        if pattern.get(at + 1) == Some(&'-') && pattern.get(at + 2).is_some_and(|end| *end != ']') {
            let end = pattern[at + 2];
            inside |= member <= c && c <= end;
            at += 3;
        } else {
            inside |= member == c;
            at += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_as_sh_matches_them() {
        for (pattern, name) in [
            ("*.log", "a.log"),
            ("*", "x"),
            ("a?c", "abc"),
            ("[ab]*", "beta"),
            ("[a-c]x", "bx"),
            ("[!a]x", "bx"),
            (".*", ".hidden"),
            ("*.*.gz", "a.b.gz"),
            ("x[", "x["),
            ("**a", "bba"),
        ] {
            assert!(matches(pattern, name), "{pattern} {name}");
        }
        for (pattern, name) in [
            ("*.log", ".hidden.log"),
            ("?x", ".x"),
            ("*.log", "a.log.1"),
            ("a?c", "ac"),
            ("[ab]*", "cab"),
            ("[!a]x", "ax"),
            ("[a-c]x", "dx"),
        ] {
            assert!(!matches(pattern, name), "{pattern} {name}");
        }
        assert!(is_pattern(Path::new("/x/*.log")));
        assert!(!is_pattern(Path::new("/x*/y.log")));
    }

    /// Many stars against a long name that does not match: linear, not exponential.
    #[test]
    fn many_stars_stay_cheap() {
        let pattern = "*a".repeat(40) + "b";
        let name = "a".repeat(4000);
        assert!(!matches(&pattern, &name));
    }
}
