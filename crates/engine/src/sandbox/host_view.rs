//! Where a full sandbox shows a path exactly as the host has it, writable.
//!
//! A sandboxed write runs in a helper inside the sandbox, so that the kernel gives the
//! sandbox's answer. But most of what a full sandbox holds is the host itself: a writable root
//! is the host's directory bound onto its own path. Below such a root, away from everything
//! the sandbox mounts over it — its protected names, a grant below it that only reads, any
//! path it hides, a `none` glob's matches, the Codex daemon's socket directory, a fresh `/dev` or `/proc` —
//! a path is the host's own, and a write there does in the sandbox what it does on the host.
//! [`writable_in_place`] finds that root, so the write can be made without starting bubblewrap
//! (see `fs::sandboxed::in_place`, which adds what the words of a path cannot show: no link
//! and no mount on the way, and no more privilege than the helper has).
//!
//! It decides from the policy and the path's words alone, the grants resolved as
//! [`super::grants`] resolves them; whenever it cannot be sure, it answers `None`, and the
//! sandbox answers instead.

use std::path::{Component, Path, PathBuf};

use super::grants::resolved_grants;
use super::mounts::MAX_HIDDEN_PATHS;
use super::policy::{FullPolicy, GrantAccess, PROTECTED_NAMES};

/// The mounts every full sandbox makes fresh, whatever the grants: never the host's.
const FRESH_MOUNTS: [&str; 2] = ["/dev", "/proc"];

/// A path below a writable root that the sandbox shows as the host has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InPlace {
    /// The writable root, as the sandbox binds it (links resolved).
    pub root: PathBuf,
    /// The rest of the path below it: one or more plain names.
    pub rest: PathBuf,
}

/// The writable root `path` lies below, if the sandbox `policy` describes shows everything
/// between them as the host has it; `socket_dir` is the directory every full sandbox masks
/// (see [`super::socket_dir`]), as the sandbox would mask it. `path` is the client's, taken
/// by its words: one that goes through a link, or names `..`, is `None`.
pub fn writable_in_place(
    policy: &FullPolicy,
    path: &Path,
    socket_dir: Option<&Path>,
) -> Option<InPlace> {
    // A glob hides what matches it when the sandbox is built; more hidden paths than a
    // sandbox may have refuse it. The sandbox says either.
    let hidden = policy.grants.iter().filter(|g| g.access == GrantAccess::None).count();
    if !policy.denied_globs.is_empty() || hidden > MAX_HIDDEN_PATHS {
        return None;
    }
    if !plain(path) || FRESH_MOUNTS.iter().any(|fresh| path.starts_with(fresh)) {
        return None;
    }
    // Protected names are read-only at the top of every writable root; wherever one is named,
    // the sandbox decides.
    let protected = |c: Component<'_>| PROTECTED_NAMES.iter().any(|name| c.as_os_str() == *name);
    if path.components().any(protected) || socket_dir.is_some_and(|dir| path.starts_with(dir)) {
        return None;
    }
    // A root the sandbox would refuse to bind is the sandbox's to refuse.
    let grants: Vec<(PathBuf, GrantAccess)> =
        resolved_grants(policy).ok()?.into_iter().map(|grant| (grant.path, grant.access)).collect();
    // The most specific grant above the path is the one the sandbox mounts last.
    let (root, access) = grants
        .iter()
        .filter(|(granted, _)| granted != path && path.starts_with(granted))
        .max_by_key(|(granted, _)| granted.components().count())?;
    // A hidden path below the root may have its first missing component made on the host, as
    // a file, while any sandbox of the intent runs: the root's tree is not the host's alone.
    // (A grant below the root that only reads covers just what is below it, and the path is
    // not: the root is the most specific grant above it.)
    let hides = grants.iter().any(|(granted, other)| {
        *other == GrantAccess::None && granted != root && granted.starts_with(root)
    });
    // Two grants that name the root through different links: which is mounted last is the
    // mount order's to decide.
    let contested = grants.iter().any(|(granted, other)| granted == root && *other != *access);
    if *access != GrantAccess::Write || hides || contested {
        return None;
    }
    let rest = path.strip_prefix(root).ok()?.to_path_buf();
    Some(InPlace { root: root.clone(), rest })
}

/// Absolute, and nothing but names after `/`.
fn plain(path: &Path) -> bool {
    let mut components = path.components();
    components.next() == Some(Component::RootDir)
        && components.all(|c| matches!(c, Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use tether_protocol::sandbox::NetworkAccess;
    use tether_testkit::scratch::Scratch;

    use super::*;
    use crate::sandbox::policy::{Base, Grant};

    fn grant(path: &Path, access: GrantAccess) -> Grant {
        Grant { path: path.to_path_buf(), access, skip_if_missing: false }
    }

    fn policy(grants: Vec<Grant>) -> FullPolicy {
        FullPolicy {
            base: Base::Root,
            grants,
            denied_globs: Vec::new(),
            network: NetworkAccess::Restricted,
        }
    }

    /// A real writable root (so that resolving it finds it), and a policy granting it.
    fn workspace(name: &str) -> (Scratch, PathBuf, FullPolicy) {
        let scratch = Scratch::new(name);
        let root = std::fs::canonicalize(scratch.path("")).unwrap().join("root");
        std::fs::create_dir_all(&root).unwrap();
        let policy = policy(vec![grant(&root, GrantAccess::Write)]);
        (scratch, root, policy)
    }

    #[test]
    fn a_path_below_a_writable_root_is_written_in_place() {
        let (_scratch, root, policy) = workspace("below");
        for rest in ["new", "src/deep/file.rs", ".gitignore", "git/config"] {
            let found = writable_in_place(&policy, &root.join(rest), None);
            assert_eq!(found, Some(InPlace { root: root.clone(), rest: rest.into() }), "{rest}");
        }
    }

    #[test]
    fn the_root_itself_and_paths_outside_it_are_for_the_sandbox() {
        let (_scratch, root, policy) = workspace("outside");
        for path in [root.clone(), root.with_file_name("sibling"), PathBuf::from("/etc/passwd")] {
            assert_eq!(writable_in_place(&policy, &path, None), None, "{}", path.display());
        }
    }

    #[test]
    fn a_protected_name_anywhere_on_the_way_is_for_the_sandbox() {
        let (_scratch, root, policy) = workspace("protected");
        for rest in [".git/config", ".codex", ".agents/x", ".aws/credentials", "sub/.git/HEAD"] {
            assert_eq!(writable_in_place(&policy, &root.join(rest), None), None, "{rest}");
        }
    }

    #[test]
    fn parent_components_and_relative_paths_are_for_the_sandbox() {
        let (_scratch, root, policy) = workspace("dots");
        let relative = PathBuf::from("root/new");
        for path in [root.join("a/../../escape"), root.join("new/.."), relative] {
            assert_eq!(writable_in_place(&policy, &path, None), None, "{}", path.display());
        }
    }

    #[test]
    fn a_hidden_path_below_the_root_leaves_the_whole_root_to_the_sandbox() {
        let (_scratch, root, mut policy) = workspace("hidden");
        policy.grants.push(grant(&root.join("vendor/missing"), GrantAccess::None));
        // Even a path beside what is hidden: a hidden path's first missing component is made
        // on the host while a sandbox runs.
        assert_eq!(writable_in_place(&policy, &root.join("vendor/x"), None), None);
        assert_eq!(writable_in_place(&policy, &root.join("other"), None), None);
    }

    #[test]
    fn a_read_grant_below_the_root_leaves_what_is_below_it_to_the_sandbox() {
        let (_scratch, root, mut policy) = workspace("read-below");
        // As Codex sends the protected names: readable, skipped when missing.
        policy.grants.push(grant(&root.join(".git"), GrantAccess::Read));
        policy.grants.push(grant(&root.join("docs"), GrantAccess::Read));
        assert_eq!(writable_in_place(&policy, &root.join("docs/readme"), None), None);
        assert_eq!(writable_in_place(&policy, &root.join(".git/config"), None), None);
        let beside = writable_in_place(&policy, &root.join("src/main.rs"), None).unwrap();
        assert_eq!(beside, InPlace { root: root.clone(), rest: "src/main.rs".into() });
    }

    #[test]
    fn a_writable_root_inside_another_is_the_one_that_counts() {
        let (_scratch, root, mut policy) = workspace("nested");
        let inner = root.join("inner");
        std::fs::create_dir(&inner).unwrap();
        policy.grants.push(grant(&inner, GrantAccess::Write));
        let found = writable_in_place(&policy, &inner.join("f"), None).unwrap();
        assert_eq!((found.root, found.rest), (inner, PathBuf::from("f")));
        assert_eq!(writable_in_place(&policy, &root.join("f"), None).unwrap().root, root);
    }

    #[test]
    fn a_root_also_granted_otherwise_through_a_link_is_for_the_sandbox() {
        let (scratch, root, mut policy) = workspace("contested");
        let link = std::fs::canonicalize(scratch.path("")).unwrap().join("link");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        // Whichever order they come in.
        policy.grants.push(grant(&link, GrantAccess::Read));
        assert_eq!(writable_in_place(&policy, &root.join("f"), None), None);
        policy.grants.reverse();
        assert_eq!(writable_in_place(&policy, &root.join("f"), None), None);
    }

    #[test]
    fn a_root_the_sandbox_refuses_is_for_the_sandbox() {
        let (scratch, root, mut policy) = workspace("refused");
        // The root reached through a link inside another writable root (see `grants`).
        let elsewhere = std::fs::canonicalize(scratch.path("")).unwrap().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join("link")).unwrap();
        policy.grants.push(grant(&root.join("link"), GrantAccess::Write));
        assert_eq!(writable_in_place(&policy, &elsewhere.join("f"), None), None);
    }

    #[test]
    fn globs_and_too_many_hidden_paths_are_for_the_sandbox() {
        let (_scratch, root, mut policy) = workspace("globs");
        policy.denied_globs.push("**/*.env".into());
        assert_eq!(writable_in_place(&policy, &root.join("new"), None), None);
        let (_scratch, root, mut policy) = workspace("many");
        for n in 0..=MAX_HIDDEN_PATHS {
            policy.grants.push(grant(&PathBuf::from(format!("/nowhere/{n}")), GrantAccess::None));
        }
        assert_eq!(writable_in_place(&policy, &root.join("new"), None), None);
    }

    #[test]
    fn the_socket_dir_and_the_fresh_mounts_are_never_the_hosts() {
        let (_scratch, root, policy) = workspace("masked");
        let socket_dir = root.join("codex-daemon-0");
        let inside = socket_dir.join("x.sock");
        assert_eq!(writable_in_place(&policy, &inside, Some(&socket_dir)), None);
        assert!(writable_in_place(&policy, &root.join("x"), Some(&socket_dir)).is_some());
        let everything = self::policy(vec![grant(Path::new("/"), GrantAccess::Write)]);
        for path in ["/dev/shm/x", "/proc/self/fd/1", "/dev"] {
            assert_eq!(writable_in_place(&everything, Path::new(path), None), None, "{path}");
        }
        assert!(writable_in_place(&everything, Path::new("/srv/x"), None).is_some());
    }

    #[test]
    fn a_root_named_through_a_link_is_found_by_where_it_leads() {
        let (scratch, root, _) = workspace("linked");
        let link = std::fs::canonicalize(scratch.path("")).unwrap().join("link");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        let policy = policy(vec![grant(&link, GrantAccess::Write)]);
        assert_eq!(writable_in_place(&policy, &root.join("f"), None).unwrap().root, root);
        // The client's path through the link is not taken by its words.
        assert_eq!(writable_in_place(&policy, &link.join("f"), None), None);
    }
}
