//! Where a copy lands, as scp decides it: pure, from what the destination is.

use std::path::{Path, PathBuf};

use crate::error::CopyError;
use crate::shown::Shown;

/// Where a copy of one source lands.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Landing {
    /// The path it is copied to, and as the person would name it.
    pub(crate) path: PathBuf,
    pub(crate) shown: Shown,
    /// A new file: its directory must be there already (a tree's root is made with its
    /// parents; a file copied into a directory, or onto a file, has its directory).
    pub(crate) new_file: bool,
}

/// Where a copy of `from` to `to` lands, given what `to` is on its side (`Some(true)` a
/// directory, `Some(false)` anything else, `None` nothing).
///
/// A `to` written with a trailing `/` names a directory, as it does to cp and scp: a file is
/// never written under that name, whether nothing is there or a file is. (A tree copied to a
/// missing `to/` becomes that directory, as `cp -r` makes it.)
pub(crate) fn landing(
    from: &Shown,
    (to, to_shown): (&Path, &Shown),
    found: Option<bool>,
    root_is_directory: bool,
    several: bool,
) -> Result<Landing, CopyError> {
    let names_a_directory = to_shown.path.as_os_str().as_encoded_bytes().ends_with(b"/");
    let at = |path: PathBuf, shown: PathBuf, new_file| Landing {
        path,
        shown: Shown { path: shown, place: to_shown.place.clone() },
        new_file,
    };
    Ok(match found {
        Some(true) => {
            let name = from.path.file_name().ok_or_else(|| CopyError::NoName(from.clone()))?;
            at(to.join(name), to_shown.path.join(name), false)
        }
        Some(false) if root_is_directory => {
            return Err(CopyError::DirectoryOntoFile { from: from.clone(), to: to_shown.clone() });
        }
        Some(false) | None if several => {
            return Err(CopyError::NotADirectoryForSeveral(to_shown.clone()));
        }
        Some(false) if names_a_directory => return Err(CopyError::SlashOntoFile(to_shown.clone())),
        None if !root_is_directory && names_a_directory => {
            return Err(CopyError::SlashOntoNothing(to_shown.clone()));
        }
        None if !root_is_directory => at(to.to_owned(), to_shown.path.clone(), true),
        _ => at(to.to_owned(), to_shown.path.clone(), false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shown::Place;

    fn here(path: &str) -> Shown {
        Shown { path: path.into(), place: Place::Here }
    }

    fn there(path: &str) -> Shown {
        Shown { path: path.into(), place: Place::Executor(None) }
    }

    #[test]
    fn a_copy_lands_as_scp_lands_it() {
        let to = |path: &'static str| (Path::new(path), there(path));
        let land = |found, directory, several, dst: &'static str| {
            let (path, shown) = to(dst);
            landing(&here("a/notes"), (path, &shown), found, directory, several)
        };
        // Into a directory under its own name; onto a file; a new file; a tree's new root.
        assert_eq!(land(Some(true), false, false, "/d").unwrap().path, Path::new("/d/notes"));
        let onto = land(Some(false), false, false, "/f").unwrap();
        assert_eq!((onto.path.as_path(), onto.new_file), (Path::new("/f"), false));
        assert!(land(None, false, false, "/new").unwrap().new_file);
        assert!(!land(None, true, false, "/new/").unwrap().new_file);
        // Refusals, each by its kind.
        assert!(matches!(
            land(Some(false), true, false, "/f"),
            Err(CopyError::DirectoryOntoFile { .. })
        ));
        assert!(matches!(
            land(None, false, true, "/x"),
            Err(CopyError::NotADirectoryForSeveral(_))
        ));
        assert!(matches!(land(Some(false), false, false, "/f/"), Err(CopyError::SlashOntoFile(_))));
        assert!(matches!(land(None, false, false, "/x/"), Err(CopyError::SlashOntoNothing(_))));
        let nameless =
            landing(&here("."), (Path::new("/d"), &there("/d")), Some(true), true, false);
        assert!(matches!(nameless, Err(CopyError::NoName(_))));
    }
}
