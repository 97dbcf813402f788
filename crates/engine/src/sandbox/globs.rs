//! `none` globs: the existing files a pattern hides, found as the reference finds them.
//!
//! - The pattern is absolute (a relative one was made the policy cwd's by the policy); `.`
//!   components and trailing slashes are dropped. `*`, `?`, `[…]` and `{a,b}` stay within a
//!   name, `**` spans any number of directories (globset's rules, the reference's crate).
//! - Its literal part, up to the first of `*?[`, names where the search starts: that
//!   directory, or the one holding it when the literal part ends inside a name (none there,
//!   nothing hidden). A pattern with
//!   no wildcard, or with one right after the leading `/`, would search the whole filesystem
//!   or hide nothing as a glob: it is refused ([`GlobRefusal::Unsafe`]).
//! - Every directory below is read, in name order, links not followed; an unreadable one
//!   fails the search
//!   ([`GlobRefusal::Unreadable`]) rather than leave a match in it unhidden. Only regular files
//!   match: directories and links are never hidden by a glob.
//! - The search runs on the thread that starts the process, told to the runtime as blocking
//!   ([`searching`]: the worker's other tasks move to another thread meanwhile, so other
//!   connections are served), and it is bounded: [`MAX_GLOB_ENTRIES`] entries looked at, past
//!   which the start is refused ([`GlobRefusal::TooLarge`]; the reference searches on without
//!   limit).

use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};

/// Most directory entries one sandbox's globs may look at: a large monorepo's tree (this
/// machine's `/usr`, 135,000 entries, is searched in about half a second); a pattern that
/// would search a whole disk is refused in about a second instead of holding the start for
/// minutes.
pub const MAX_GLOB_ENTRIES: usize = 200_000;

/// Why a sandbox with a `none` glob is not built, in the reference's words where it has them.
#[derive(Debug, thiserror::Error)]
pub enum GlobRefusal {
    #[error(
        "Fatal error: unreadable glob `{0}` cannot be safely expanded; use a pattern with a \
         non-root directory prefix"
    )]
    Unsafe(String),
    #[error(
        "Fatal error: failed to enumerate unreadable glob paths under {}: {}: {error}",
        root.display(),
        path.display()
    )]
    Unreadable { root: PathBuf, path: PathBuf, error: std::io::Error },
    #[error(
        "Fatal error: failed to enumerate unreadable glob paths under {}: more than \
         {MAX_GLOB_ENTRIES} entries; use a narrower pattern",
        root.display()
    )]
    TooLarge { root: PathBuf },
}

/// The regular files `pattern` matches, at most `limit` of them (more than that is for the
/// caller to refuse); entries looked at count against `budget`, shared by a sandbox's globs.
pub fn expand(
    pattern: &str,
    limit: usize,
    budget: &mut usize,
) -> Result<Vec<PathBuf>, GlobRefusal> {
    let pattern = normalised(pattern);
    // `{a,b}` chooses when a wildcard is there too, but alone it does not make a glob.
    let Some(literal_end) = pattern.find(['*', '?', '[']) else {
        return Err(GlobRefusal::Unsafe(pattern));
    };
    let literal = &pattern[..literal_end];
    if literal == "/" || !literal.starts_with('/') {
        return Err(GlobRefusal::Unsafe(pattern));
    }
    let root = match literal.strip_suffix('/') {
        Some(directory) => PathBuf::from(directory),
        None => Path::new(literal).parent().map_or_else(|| "/".into(), Path::to_path_buf),
    };
    // A pattern globset cannot read names nothing.
    let Ok(glob) = GlobBuilder::new(&pattern).literal_separator(true).build() else {
        return Ok(Vec::new());
    };
    // Nothing to search, nothing to hide (a link to a directory is searched).
    if !root.is_dir() {
        return Ok(Vec::new());
    }
    let mut search = Search { matcher: glob.compile_matcher(), limit, budget, found: Vec::new() };
    search.tree(&root)?;
    Ok(search.found)
}

/// Runs `search` as work that may block for a while: on a multi-threaded runtime the worker
/// hands its other tasks to another thread first; anywhere else it just runs.
pub(crate) fn searching<T>(search: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(runtime) if runtime.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(search)
        }
        _ => search(),
    }
}

/// `pattern` without `.` components, repeated slashes or a trailing slash.
fn normalised(pattern: &str) -> String {
    let parts: Vec<&str> =
        pattern.split('/').filter(|part| !part.is_empty() && *part != ".").collect();
    format!("/{}", parts.join("/"))
}

struct Search<'a> {
    matcher: GlobMatcher,
    limit: usize,
    budget: &'a mut usize,
    found: Vec<PathBuf>,
}

/// A directory's entries still to search, in name order: each one's path and type. The
/// directory itself is closed once read, so a deep search holds no descriptors.
type Pending = std::vec::IntoIter<(PathBuf, std::io::Result<std::fs::FileType>)>;

impl Search<'_> {
    /// Depth first, from a stack of the directories being searched, so a tree's depth costs no
    /// stack (its entries still count against the budget).
    fn tree(&mut self, root: &Path) -> Result<(), GlobRefusal> {
        let mut levels = vec![self.entries(root, root)?];
        while let Some(entries) = levels.last_mut() {
            let Some((path, kind)) = entries.next() else {
                levels.pop();
                continue;
            };
            if self.found.len() > self.limit {
                return Ok(());
            }
            let kind = kind.map_err(|error| unreadable(root, &path, error))?;
            if kind.is_dir() {
                let below = self.entries(root, &path)?;
                levels.push(below);
            } else if kind.is_file() && self.matcher.is_match(&path) {
                self.found.push(path);
            }
        }
        Ok(())
    }

    fn entries(&mut self, root: &Path, dir: &Path) -> Result<Pending, GlobRefusal> {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|error| unreadable(root, dir, error))? {
            *self.budget =
                self.budget.checked_sub(1).ok_or(GlobRefusal::TooLarge { root: root.into() })?;
            let entry = entry.map_err(|error| unreadable(root, dir, error))?;
            entries.push((entry.path(), entry.file_type()));
        }
        // In name order, as the reference searches: the first unreadable directory it names is
        // the one it meets first.
        entries.sort_by(|(a, _), (b, _)| a.cmp(b));
        Ok(entries.into_iter())
    }
}

fn unreadable(root: &Path, path: &Path, error: std::io::Error) -> GlobRefusal {
    GlobRefusal::Unreadable { root: root.into(), path: path.into(), error }
}

#[cfg(test)]
mod tests {
    use tether_testkit::scratch::Scratch;

    use super::*;

    fn found(pattern: &str) -> Vec<PathBuf> {
        let mut budget = MAX_GLOB_ENTRIES;
        let mut found = expand(pattern, 256, &mut budget).unwrap();
        found.sort();
        found
    }

    #[test]
    fn only_regular_files_match_and_names_stay_within_a_component() {
        let scratch = Scratch::new("files");
        let root = scratch.path("");
        for file in ["a.key", "sub/b.key", "sub/deeper/c.key", "dir.key/inside"] {
            std::fs::create_dir_all(root.join(file).parent().unwrap()).unwrap();
            std::fs::write(root.join(file), "").unwrap();
        }
        std::os::unix::fs::symlink(root.join("a.key"), root.join("link.key")).unwrap();
        let r = root.display();
        assert_eq!(found(&format!("{r}/*.key")), vec![root.join("a.key")]);
        assert_eq!(
            found(&format!("{r}/**/*.key")),
            vec![root.join("a.key"), root.join("sub/b.key"), root.join("sub/deeper/c.key")]
        );
        assert_eq!(found(&format!("{r}/./sub/[bc].key/")), vec![root.join("sub/b.key")]);
        assert_eq!(found(&format!("{r}/{{a,x}}.k?y")), vec![root.join("a.key")]);
        assert_eq!(found(&format!("{r}/sub/**")).len(), 2);
        assert_eq!(
            found(&format!("{r}/[")),
            Vec::<PathBuf>::new(),
            "a pattern globset cannot read"
        );
    }

    #[test]
    fn a_pattern_without_a_directory_to_start_from_is_refused() {
        let mut budget = MAX_GLOB_ENTRIES;
        for pattern in ["/**/x", "/*/x", "/tmp/literal", "/tmp/dir/", "/tmp/{a,b}"] {
            let refused = expand(pattern, 256, &mut budget).unwrap_err();
            assert!(matches!(refused, GlobRefusal::Unsafe(_)), "{pattern}: {refused}");
        }
        assert_eq!(
            expand("/tmp/dir/", 256, &mut budget).unwrap_err().to_string(),
            "Fatal error: unreadable glob `/tmp/dir` cannot be safely expanded; use a pattern \
             with a non-root directory prefix"
        );
    }

    #[test]
    fn too_many_entries_fail_the_search_and_a_missing_directory_hides_nothing() {
        let scratch = Scratch::new("budget");
        let root = scratch.path("");
        for index in 0..10 {
            std::fs::write(root.join(format!("f{index}")), "").unwrap();
        }
        let mut budget = 5;
        let refused = expand(&format!("{}/*", root.display()), 256, &mut budget).unwrap_err();
        assert!(matches!(refused, GlobRefusal::TooLarge { .. }), "{refused}");
        assert_eq!(found(&format!("{}/missing/*", root.display())), Vec::<PathBuf>::new());
        assert_eq!(found(&format!("{}/f1/*", root.display())), Vec::<PathBuf>::new());
    }
}
