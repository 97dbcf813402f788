//! The policy's grants as the kernel reaches them, each held open as it was reached: every
//! path walked one component at a time beneath descriptors ([`super::walk`]), its links
//! followed as bubblewrap would follow them — unless a path the sandbox must enforce (kept
//! read-only, hidden, or bound writable) crosses a link that lies inside a writable root. A
//! sandboxed command can change such a link, so a mount made where it leads today would
//! protect (or open) a snapshot; the sandbox is refused instead ([`CrossesWritableLink`]), in
//! the reference's words. The links are found in the same steps that reach the object the
//! sandbox mounts: [`super::mounts`] hands bubblewrap these objects, never their paths, so what
//! was checked here is what is mounted however the tree changes meanwhile. [`super::host_view`]
//! decides from the same grants what a write in place would reach, so the two never disagree.

use std::collections::HashSet;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::FileType;

use super::policy::{FullPolicy, GrantAccess, PROTECTED_NAMES};
use super::walk::{Walked, walk};

/// What a path the sandbox must enforce is kept from (or given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// A protected name of a writable root, or a read grant inside one.
    ReadOnly,
    /// A `none` grant.
    DenyRead,
    /// A write grant: bound writable where it leads, so where it leads must be the intent's.
    Writable,
}

impl std::fmt::Display for Protection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Protection::ReadOnly => "read-only",
            Protection::DenyRead => "deny-read",
            Protection::Writable => "writable",
        })
    }
}

/// A path the sandbox must enforce, reached through a link that lies inside a writable root. A
/// sandboxed command can change that link, so a mount made where it leads would protect a
/// snapshot: a command under workspace-write whose project is below `/tmp` (writable too) can
/// move the directory above the project aside and leave a link where the project was, and the
/// next sandbox would bind writable wherever the link leads, `/` included. The sandbox is
/// refused instead, in the reference's words (it refuses the same for paths it keeps read-only
/// or hidden; Tether refuses a write grant reached that way too).
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

/// Why the grants could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    #[error(transparent)]
    CrossesWritableLink(#[from] CrossesWritableLink),
    /// A path could not be walked (a directory that cannot be searched, a loop of links):
    /// nothing past it can be held, so nothing past it is mounted.
    #[error("cannot reach sandbox path {}: {source}", path.display())]
    Unreachable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// A grant as the kernel reaches it, with the object it reached held open.
#[derive(Debug)]
pub struct PinnedGrant {
    /// The grant's path as the kernel reaches it (see [`Walked::path`]).
    pub path: PathBuf,
    pub access: GrantAccess,
    /// What the path reached, opened without following it (`O_PATH`); `None` when missing.
    pub object: Option<OwnedFd>,
    /// What [`PinnedGrant::object`] is; `None` when missing.
    pub kind: Option<FileType>,
    /// For a writable directory: its protected names, each walked below the object held (not
    /// below its path again), but those the intent itself makes writable.
    pub protected: Vec<Walked>,
}

impl PinnedGrant {
    pub fn is_dir(&self) -> bool {
        self.kind == Some(FileType::Directory)
    }
}

/// The policy's grants as the kernel reaches them, in the policy's order, once no path the
/// sandbox must enforce crosses a link inside a writable root ([`CrossesWritableLink`]): each
/// writable root's protected names and the read grants inside a writable root (read-only),
/// the `none` grants (deny-read), then the write grants themselves (writable).
pub fn resolved_grants(policy: &FullPolicy) -> Result<Vec<PinnedGrant>, GrantError> {
    let unreachable = |path: &Path| {
        let path = path.to_path_buf();
        move |source| GrantError::Unreachable { path, source }
    };
    let mut walks = Vec::with_capacity(policy.grants.len());
    for grant in &policy.grants {
        walks.push(walk(&grant.path).map_err(unreachable(&grant.path))?);
    }
    let writable: Vec<PathBuf> = policy
        .grants
        .iter()
        .zip(&walks)
        .filter(|(grant, _)| grant.access == GrantAccess::Write)
        .map(|(_, walked)| walked.path.clone())
        .collect();
    let write_names: HashSet<PathBuf> = policy
        .grants
        .iter()
        .zip(&walks)
        .filter(|(grant, _)| grant.access == GrantAccess::Write)
        .flat_map(|(grant, walked)| [grant.path.clone(), walked.path.clone()])
        .collect();

    let mut pinned = Vec::with_capacity(walks.len());
    // What to enforce: the path as named (for the words), its walk, what it is kept from.
    let mut enforced: Vec<(PathBuf, usize, Option<usize>, Protection)> = Vec::new();
    for (index, (grant, walked)) in policy.grants.iter().zip(walks).enumerate() {
        let kind = walked.file_type().map_err(unreachable(&grant.path))?;
        let mut protected = Vec::new();
        match grant.access {
            GrantAccess::Write if kind == Some(FileType::Directory) => {
                for name in PROTECTED_NAMES {
                    let named = grant.path.join(name);
                    // A name the intent itself makes writable is the intent's, not protected.
                    if write_names.contains(named.as_path()) {
                        continue;
                    }
                    let below = walked.below(Path::new(name)).map_err(unreachable(&named))?;
                    if write_names.contains(below.path.as_path()) {
                        continue;
                    }
                    enforced.push((named, index, Some(protected.len()), Protection::ReadOnly));
                    protected.push(below);
                }
            }
            GrantAccess::Write => {}
            GrantAccess::Read if writable.iter().any(|root| walked.path.starts_with(root)) => {
                enforced.push((grant.path.clone(), index, None, Protection::ReadOnly));
            }
            GrantAccess::Read => {}
            GrantAccess::None => {
                enforced.push((grant.path.clone(), index, None, Protection::DenyRead))
            }
        }
        if grant.access == GrantAccess::Write {
            enforced.push((grant.path.clone(), index, None, Protection::Writable));
        }
        let Walked { path, object, links } = walked;
        pinned.push((PinnedGrant { path, access: grant.access, object, kind, protected }, links));
    }
    enforced.sort_by_key(|(_, _, _, protection)| match protection {
        Protection::ReadOnly => 0,
        Protection::DenyRead => 1,
        Protection::Writable => 2,
    });
    for (path, index, name, protection) in enforced {
        let (grant, links) = &pinned[index];
        let links = match name {
            Some(name) => &grant.protected[name].links,
            None => links,
        };
        let inside = |link: &&PathBuf| writable.iter().any(|root| link.starts_with(root));
        if let Some(link) = links.iter().find(inside) {
            return Err(CrossesWritableLink { protection, path, link: link.clone() }.into());
        }
    }
    Ok(pinned.into_iter().map(|(grant, _)| grant).collect())
}

#[cfg(test)]
mod tests {
    use tether_protocol::sandbox::NetworkAccess;
    use tether_testkit::scratch::Scratch;

    use super::*;
    use crate::sandbox::PidNamespace;
    use crate::sandbox::mounts::{PlanError, Purpose, plan};
    use crate::sandbox::policy::{Base, Grant};

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

    fn refusal(policy: &FullPolicy) -> CrossesWritableLink {
        match resolved_grants(policy) {
            Err(GrantError::CrossesWritableLink(refused)) => refused,
            other => panic!("not refused for a link: {other:?}"),
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
        let refused = refusal(&writable(&[&tmp, &project]));
        let expected = CrossesWritableLink {
            protection: Protection::ReadOnly,
            path: project.join(".git"),
            link: project.clone(),
        };
        assert_eq!(refused, expected);
        let words = PlanError::from(GrantError::from(refused)).refusal().unwrap();
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
            plan(
                &writable(&[&tmp, &project]),
                Path::new("/h"),
                &tmp,
                Purpose::Command(PidNamespace::Isolate)
            )
            .is_err()
        );

        // A link higher up, made the same way, is found too.
        let (moved, linked) = (base.join("tmp/b"), base.join("tmp/a"));
        std::fs::remove_file(tmp.join("a/work")).unwrap();
        std::fs::create_dir(tmp.join("a/work")).unwrap();
        std::fs::rename(&linked, &moved).unwrap();
        std::os::unix::fs::symlink(&victim, &linked).unwrap();
        let refused = refusal(&writable(&[&tmp, &linked.join("work")]));
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
        let refused = refusal(&policy);
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

    #[test]
    fn a_file_granted_writable_through_a_link_inside_a_writable_root_is_refused() {
        let scratch = Scratch::new("linked-file");
        let base = std::fs::canonicalize(scratch.path("")).unwrap();
        let (project, elsewhere) = (base.join("project"), base.join("elsewhere"));
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("notes"), "x").unwrap();
        std::os::unix::fs::symlink(elsewhere.join("notes"), project.join("notes")).unwrap();
        let refused = refusal(&writable(&[&project, &project.join("notes")]));
        let expected = CrossesWritableLink {
            protection: Protection::Writable,
            path: project.join("notes"),
            link: project.join("notes"),
        };
        assert_eq!(refused, expected);
    }

    /// What is held is what was checked: a directory exchanged for a link after the grants
    /// were resolved changes neither the object held nor its protected names.
    #[test]
    fn the_objects_held_are_the_ones_checked_whatever_happens_to_their_paths() {
        let scratch = Scratch::new("held");
        let base = std::fs::canonicalize(scratch.path("")).unwrap();
        let (tmp, victim) = (base.join("tmp"), base.join("victim"));
        std::fs::create_dir_all(tmp.join("a/work/.git")).unwrap();
        std::fs::create_dir_all(victim.join(".git")).unwrap();
        let project = tmp.join("a/work");
        let grants = resolved_grants(&writable(&[&tmp, &project])).unwrap();
        let identity = |path: &Path| {
            let stat = rustix::fs::stat(path).unwrap();
            (stat.st_dev, stat.st_ino)
        };
        let held = |fd: &OwnedFd| {
            let stat = rustix::fs::fstat(fd).unwrap();
            (stat.st_dev, stat.st_ino)
        };
        let (work, git) = (identity(&project), identity(&project.join(".git")));
        std::fs::rename(tmp.join("a"), tmp.join("moved")).unwrap();
        std::fs::create_dir(tmp.join("a")).unwrap();
        std::os::unix::fs::symlink(&victim, &project).unwrap();
        assert_eq!(held(grants[1].object.as_ref().unwrap()), work);
        assert_eq!(held(grants[1].protected[0].object.as_ref().unwrap()), git);
        assert_ne!(identity(&project), work, "the path leads elsewhere now");
    }
}
