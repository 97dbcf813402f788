//! The policy's grants as the kernel reaches them: each path's links followed, as bubblewrap
//! follows them when it mounts — unless a path the sandbox must keep read-only or hidden
//! crosses a link that lies inside a writable root. A sandboxed command can change such a
//! link, so a mount made where it leads today would protect a snapshot; the sandbox is refused
//! instead ([`CrossesWritableLink`]), in the reference's words. [`super::mounts`] builds the
//! sandbox on these grants and [`super::host_view`] decides from them what a write in place
//! would reach, so the two never disagree.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::policy::{FullPolicy, Grant, GrantAccess, PROTECTED_NAMES};

/// What a path the sandbox must enforce is kept from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// A protected name of a writable root, or a read grant inside one.
    ReadOnly,
    /// A `none` grant.
    DenyRead,
}

impl std::fmt::Display for Protection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Protection::ReadOnly => "read-only",
            Protection::DenyRead => "deny-read",
        })
    }
}

/// A path the sandbox must keep read-only or hidden, reached through a link that lies inside a
/// writable root. A sandboxed command can change that link, so a mount made where it leads
/// would protect a snapshot: a command under workspace-write whose project is below `/tmp`
/// (writable too) can move the directory above the project aside and leave a link where the
/// project was, and the next sandbox would bind writable wherever the link leads, `/` included.
/// The sandbox is refused instead, in the reference's words (it refuses the same).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Fatal error: cannot enforce sandbox {protection} path {} because it crosses writable symlink {}",
    path.display(),
    link.display()
)]
pub struct CrossesWritableLink {
    pub protection: Protection,
    pub path: PathBuf,
    pub link: PathBuf,
}

/// The policy's grants as the kernel reaches them (see [`resolved`]), in the policy's order,
/// once no path the sandbox must enforce crosses a link inside a writable root
/// ([`CrossesWritableLink`]): each writable root's protected names and the read grants inside
/// a writable root (read-only), then the `none` grants (deny-read).
pub fn resolved_grants(policy: &FullPolicy) -> Result<Vec<Grant>, CrossesWritableLink> {
    let grants: Vec<Grant> = policy
        .grants
        .iter()
        .map(|grant| Grant { path: resolved(&grant.path), ..grant.clone() })
        .collect();
    let writable: Vec<&Path> = grants
        .iter()
        .filter(|g| g.access == GrantAccess::Write)
        .map(|g| g.path.as_path())
        .collect();
    let named_writes: HashSet<&Path> = policy
        .grants
        .iter()
        .filter(|g| g.access == GrantAccess::Write)
        .map(|g| g.path.as_path())
        .collect();
    let mut enforced: Vec<(PathBuf, Protection)> = Vec::new();
    for grant in policy.grants.iter().filter(|g| g.access == GrantAccess::Write) {
        let names = PROTECTED_NAMES.iter().map(|name| grant.path.join(name));
        // A name the intent itself makes writable is the intent's, not protected.
        enforced.extend(
            names
                .filter(|name| !named_writes.contains(name.as_path()))
                .map(|name| (name, Protection::ReadOnly)),
        );
    }
    for (named, grant) in policy.grants.iter().zip(&grants) {
        let inside = writable.iter().any(|root| grant.path.starts_with(root));
        match named.access {
            GrantAccess::Read if inside => {
                enforced.push((named.path.clone(), Protection::ReadOnly))
            }
            GrantAccess::Read | GrantAccess::Write => {}
            GrantAccess::None => enforced.push((named.path.clone(), Protection::DenyRead)),
        }
    }
    enforced.sort_by_key(|(_, protection)| *protection == Protection::DenyRead);
    // The enforced paths share most of their way (a root's four protected names): each step
    // is looked at once.
    let mut looked: HashMap<PathBuf, Step> = HashMap::new();
    for (path, protection) in enforced {
        if let Some(link) = writable_link_on_the_way(&path, &writable, &mut looked) {
            return Err(CrossesWritableLink { protection, path, link });
        }
    }
    Ok(grants)
}

/// What a step on the way to a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Link,
    Other,
    Missing,
}

/// The first link on the way to `path` (itself included) that lies inside one of `writable`;
/// `looked` keeps what each step was.
fn writable_link_on_the_way(
    path: &Path,
    writable: &[&Path],
    looked: &mut HashMap<PathBuf, Step>,
) -> Option<PathBuf> {
    let mut prefix = PathBuf::new();
    for component in path.components() {
        prefix.push(component);
        let step =
            *looked.entry(prefix.clone()).or_insert_with(|| {
                match std::fs::symlink_metadata(&prefix) {
                    Ok(meta) if meta.file_type().is_symlink() => Step::Link,
                    Ok(_) => Step::Other,
                    Err(_) => Step::Missing,
                }
            });
        match step {
            Step::Link if writable.iter().any(|root| prefix.starts_with(root)) => {
                return Some(prefix);
            }
            Step::Link | Step::Other => {}
            // Nothing further exists to be a link.
            Step::Missing => return None,
        }
    }
    None
}

/// `path` as the kernel reaches it: the links in the part that exists followed (as
/// `realpath` does), the rest appended as written. bubblewrap follows links in a mount's
/// source but mounts onto its destination as named, inside a root where a link's absolute
/// target leads nowhere: a writable root named through a link would fail the launch. The
/// command starts in the real path too, as the reference's does (`pwd` and `$PWD` show it).
pub fn resolved(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(mut real) = std::fs::canonicalize(existing) {
            real.extend(rest.iter().rev());
            return real;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use tether_protocol::sandbox::NetworkAccess;
    use tether_testkit::scratch::Scratch;

    use super::*;
    use crate::sandbox::mounts::{PlanError, Purpose, plan};
    use crate::sandbox::policy::Base;

    fn writable(paths: &[&Path]) -> FullPolicy {
        let grants = paths
            .iter()
            .map(|path| Grant {
                path: path.to_path_buf(),
                access: GrantAccess::Write,
                skip_if_missing: false,
            })
            .collect();
        FullPolicy {
            base: Base::Root,
            grants,
            denied_globs: vec![],
            network: NetworkAccess::Restricted,
        }
    }

    #[test]
    fn a_writable_root_behind_a_link_inside_another_writable_root_is_refused() {
        let scratch = Scratch::new("linked-root");
        let base = std::fs::canonicalize(scratch.path("")).unwrap();
        let (tmp, victim) = (base.join("tmp"), base.join("victim"));
        std::fs::create_dir_all(tmp.join("a")).unwrap();
        std::fs::create_dir(&victim).unwrap();
        // What a sandboxed command with `tmp` writable can leave where the project was.
        std::os::unix::fs::symlink(&victim, tmp.join("a/work")).unwrap();
        let project = tmp.join("a/work");
        let refused = resolved_grants(&writable(&[&tmp, &project])).unwrap_err();
        let expected = CrossesWritableLink {
            protection: Protection::ReadOnly,
            path: project.join(".git"),
            link: project.clone(),
        };
        assert_eq!(refused, expected);
        let words = PlanError::from(refused).refusal().unwrap();
        assert_eq!(
            words,
            format!(
                "error building bubblewrap command: Fatal error: cannot enforce sandbox read-only \
                 path {}/.git because it crosses writable symlink {}",
                project.display(),
                project.display()
            )
        );
        assert!(
            plan(&writable(&[&tmp, &project]), Path::new("/h"), &tmp, Purpose::Command).is_err()
        );

        // A link higher up, made the same way, is found too.
        let (moved, linked) = (base.join("tmp/b"), base.join("tmp/a"));
        std::fs::remove_file(tmp.join("a/work")).unwrap();
        std::fs::create_dir(tmp.join("a/work")).unwrap();
        std::fs::rename(&linked, &moved).unwrap();
        std::os::unix::fs::symlink(&victim, &linked).unwrap();
        let refused = resolved_grants(&writable(&[&tmp, &linked.join("work")])).unwrap_err();
        assert_eq!(refused.link, linked);
    }

    #[test]
    fn a_hidden_path_behind_a_link_inside_a_writable_root_is_refused() {
        let scratch = Scratch::new("linked-hidden");
        let base = std::fs::canonicalize(scratch.path("")).unwrap();
        let (project, elsewhere) = (base.join("project"), base.join("elsewhere"));
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, project.join("secrets")).unwrap();
        let mut policy = writable(&[&project]);
        let hidden = project.join("secrets/key");
        policy.grants.push(Grant {
            path: hidden.clone(),
            access: GrantAccess::None,
            skip_if_missing: true,
        });
        let refused = resolved_grants(&policy).unwrap_err();
        let expected = CrossesWritableLink {
            protection: Protection::DenyRead,
            path: hidden,
            link: project.join("secrets"),
        };
        assert_eq!(refused, expected);
        assert!(
            refused.to_string().starts_with("Fatal error: cannot enforce sandbox deny-read path")
        );
    }

    #[test]
    fn a_writable_root_behind_a_link_elsewhere_is_bound_where_it_leads() {
        let scratch = Scratch::new("linked-elsewhere");
        let base = std::fs::canonicalize(scratch.path("")).unwrap();
        let (tmp, real, link) = (base.join("tmp"), base.join("real"), base.join("link"));
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let grants = resolved_grants(&writable(&[&tmp, &link])).unwrap();
        assert_eq!(grants[1].path, real);
    }
}
