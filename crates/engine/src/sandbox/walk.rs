//! A path reached one component at a time, each beneath the descriptor of the last, so that
//! the object at its end is held open as it was reached.
//!
//! A sandboxed command can change whatever lies inside its writable roots while the server
//! builds the next sandbox: a directory exchanged for one whose entry is a link, between the
//! server's look at a path and bubblewrap's mount of it, would have bubblewrap bind wherever
//! the link leads. A [`Walked`] path carries the object it reached (`O_PATH`) and every link
//! it followed on the way, found in the same steps: the server decides on those links and
//! hands bubblewrap the descriptor (`--bind-fd`), so what was checked is what is mounted.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{CWD, FileType, Mode, OFlags};
use rustix::io::Errno;

/// How many links one walk follows before it is refused with `ELOOP`: the kernel's own bound
/// for a path, so a walk fails where the kernel's lookup of the same path would.
const MAX_LINKS: usize = 40;

/// A path as the kernel reaches it, and what it reached.
#[derive(Debug)]
pub struct Walked {
    /// The path reached: every link replaced by where it leads (as `realpath` does), what does
    /// not exist appended as named.
    pub path: PathBuf,
    /// The object at [`Walked::path`], opened `O_PATH` without following it; `None` when
    /// some component on the way does not exist (or is not a directory).
    pub object: Option<OwnedFd>,
    /// Each link followed on the way (the path's own last component included), by the path
    /// at which it was found.
    pub links: Vec<PathBuf>,
}

impl Walked {
    /// What the object is; `None` when missing.
    pub fn file_type(&self) -> io::Result<Option<FileType>> {
        match &self.object {
            Some(object) => Ok(Some(FileType::from_raw_mode(rustix::fs::fstat(object)?.st_mode))),
            None => Ok(None),
        }
    }

    pub fn is_dir(&self) -> io::Result<bool> {
        Ok(self.file_type()? == Some(FileType::Directory))
    }

    /// Walks on from this directory through `rest` (names only); the links followed to get
    /// here are the new walk's first links.
    pub fn below(&self, rest: &Path) -> io::Result<Walked> {
        let Some(object) = &self.object else {
            return Ok(Walked {
                path: self.path.join(rest),
                object: None,
                links: self.links.clone(),
            });
        };
        let start = object.try_clone()?;
        walk_from(start, self.path.clone(), rest, self.links.clone())
    }
}

/// Walks `path` (absolute) from `/`. A failure other than a missing component (a directory
/// that cannot be searched, too many links) is an error: nothing can be pinned past it.
pub fn walk(path: &Path) -> io::Result<Walked> {
    let root = open(CWD, Path::new("/"))?;
    walk_from(root, PathBuf::from("/"), path, Vec::new())
}

/// `path` as the kernel reaches it (see [`Walked::path`]); as given when it cannot be walked.
pub fn resolved(path: &Path) -> PathBuf {
    walk(path).map(|walked| walked.path).unwrap_or_else(|_| path.to_path_buf())
}

fn walk_from(
    mut dir: OwnedFd,
    mut at: PathBuf,
    path: &Path,
    mut links: Vec<PathBuf>,
) -> io::Result<Walked> {
    let mut pending: VecDeque<Component<'_>> = path.components().collect();
    // Names read from links, which outlive the components borrowed from `path`.
    let mut from_links: VecDeque<OsString> = VecDeque::new();
    let mut followed = 0usize;
    loop {
        let name: OsString = match from_links.pop_front() {
            Some(name) => name,
            None => match pending.pop_front() {
                None => return Ok(Walked { path: at, object: Some(dir), links }),
                Some(Component::RootDir) => {
                    (dir, at) = (open(CWD, Path::new("/"))?, PathBuf::from("/"));
                    continue;
                }
                Some(Component::CurDir) => continue,
                Some(Component::Prefix(_)) => return Err(io::ErrorKind::InvalidInput.into()),
                Some(Component::ParentDir) => "..".into(),
                Some(Component::Normal(name)) => name.to_owned(),
            },
        };
        if name == "." || name.is_empty() {
            continue;
        }
        if name == ".." {
            dir = open(&dir, Path::new(".."))?;
            at.pop();
            continue;
        }
        let next = match open(&dir, Path::new(&name)) {
            Ok(next) => next,
            Err(Errno::NOENT | Errno::NOTDIR) => {
                at.push(&name);
                let rest = from_links.iter().map(|name| Component::Normal(name.as_os_str()));
                for component in rest.chain(pending) {
                    match component {
                        Component::Normal(name) if name == ".." => {
                            at.pop();
                        }
                        Component::ParentDir => {
                            at.pop();
                        }
                        Component::Normal(name) => at.push(name),
                        _ => {}
                    }
                }
                return Ok(Walked { path: at, object: None, links });
            }
            Err(errno) => return Err(errno.into()),
        };
        let kind = FileType::from_raw_mode(rustix::fs::fstat(&next)?.st_mode);
        if kind != FileType::Symlink {
            (dir, at) = (next, at.join(&name));
            continue;
        }
        followed += 1;
        if followed > MAX_LINKS {
            return Err(Errno::LOOP.into());
        }
        links.push(at.join(&name));
        let target = PathBuf::from(OsString::from_vec(
            rustix::fs::readlinkat(&next, "", Vec::new())?.into_bytes(),
        ));
        // The link's own components come before what was still to walk.
        let mut names: Vec<OsString> = Vec::new();
        for component in target.components() {
            match component {
                Component::RootDir => {
                    (dir, at) = (open(CWD, Path::new("/"))?, PathBuf::from("/"));
                    names.clear();
                }
                Component::CurDir => {}
                Component::ParentDir => names.push("..".into()),
                Component::Normal(name) => names.push(name.to_owned()),
                Component::Prefix(_) => return Err(io::ErrorKind::InvalidInput.into()),
            }
        }
        for name in names.into_iter().rev() {
            from_links.push_front(name);
        }
    }
}

/// `name` in `dir`, not followed if it is a link.
fn open(dir: impl std::os::fd::AsFd, name: &Path) -> rustix::io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(dir, name, flags, Mode::empty())
}

#[cfg(test)]
mod tests {
    use tether_testkit::scratch::Scratch;

    use super::*;

    fn base(scratch: &Scratch) -> PathBuf {
        std::fs::canonicalize(scratch.path("")).unwrap()
    }

    #[test]
    fn a_plain_path_is_itself_and_holds_its_object() {
        let scratch = Scratch::new("walk-plain");
        let dir = base(&scratch).join("a/b");
        std::fs::create_dir_all(&dir).unwrap();
        let walked = walk(&dir).unwrap();
        assert_eq!(walked.path, dir);
        assert!(walked.links.is_empty());
        assert!(walked.is_dir().unwrap());
        let held = rustix::fs::fstat(walked.object.as_ref().unwrap()).unwrap();
        let there = rustix::fs::stat(&dir).unwrap();
        assert_eq!((held.st_dev, held.st_ino), (there.st_dev, there.st_ino));
    }

    #[test]
    fn links_are_followed_and_named_where_they_were_found() {
        let scratch = Scratch::new("walk-links");
        let root = base(&scratch);
        std::fs::create_dir_all(root.join("real/inner")).unwrap();
        std::os::unix::fs::symlink("real", root.join("rel")).unwrap();
        std::os::unix::fs::symlink(root.join("rel"), root.join("abs")).unwrap();
        let walked = walk(&root.join("abs/inner")).unwrap();
        assert_eq!(walked.path, root.join("real/inner"));
        assert_eq!(walked.links, vec![root.join("abs"), root.join("rel")]);
        assert_eq!(walked.path, std::fs::canonicalize(root.join("abs/inner")).unwrap());
        // `..` after a link is taken from where the link led, as the kernel takes it.
        std::fs::create_dir_all(root.join("elsewhere/deep")).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere/deep"), root.join("d")).unwrap();
        assert_eq!(walk(&root.join("d/../x")).unwrap().path, root.join("elsewhere/x"));
    }

    #[test]
    fn what_is_missing_is_appended_as_named() {
        let scratch = Scratch::new("walk-missing");
        let root = base(&scratch);
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::os::unix::fs::symlink("real/not/yet", root.join("dangling")).unwrap();
        let walked = walk(&root.join("dangling/more")).unwrap();
        assert_eq!(walked.path, root.join("real/not/yet/more"));
        assert!(walked.object.is_none());
        assert_eq!(walked.links, vec![root.join("dangling")]);
        std::fs::write(root.join("file"), "x").unwrap();
        assert_eq!(walk(&root.join("file/below")).unwrap().path, root.join("file/below"));
    }

    #[test]
    fn a_walk_goes_on_below_a_walked_directory() {
        let scratch = Scratch::new("walk-below");
        let root = base(&scratch);
        std::fs::create_dir_all(root.join("real/.git")).unwrap();
        std::os::unix::fs::symlink("real", root.join("project")).unwrap();
        let project = walk(&root.join("project")).unwrap();
        let git = project.below(Path::new(".git")).unwrap();
        assert_eq!(git.path, root.join("real/.git"));
        assert_eq!(git.links, vec![root.join("project")]);
        assert!(git.is_dir().unwrap());
        // Below an object that changed since it was walked, the object walked counts.
        std::fs::rename(root.join("real"), root.join("moved")).unwrap();
        assert!(project.below(Path::new(".git")).unwrap().is_dir().unwrap());
    }

    #[test]
    fn a_loop_of_links_is_refused() {
        let scratch = Scratch::new("walk-loop");
        let root = base(&scratch);
        std::os::unix::fs::symlink("b", root.join("a")).unwrap();
        std::os::unix::fs::symlink("a", root.join("b")).unwrap();
        let error = walk(&root.join("a")).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(rustix::io::Errno::LOOP.raw_os_error()));
    }
}
