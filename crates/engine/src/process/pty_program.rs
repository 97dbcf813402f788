//! Which program an unconfined PTY start runs: the rules of the reference's terminal layer
//! (`portable-pty`), which differ from a pipe start's, so that a terminal start finds a program
//! or fails exactly where the reference's does.
//!
//! - A relative program name is looked up on the child's own `PATH` only (never the server's),
//!   each entry taken relative to that working directory; one naming `./` or `../` is taken
//!   relative to the working directory alone. A name found nowhere fails the start with every
//!   candidate that was rejected and why.
//! - An absolute program is executed as it is: `execve` reports what is wrong with it.
//!
//! One rule of that layer Tether does not follow: a working directory that is not a directory
//! (missing, or a file) fails the start, as a pipe start's does, where the reference's terminal
//! layer runs the command in the home directory instead. A command meant for one directory
//! (`rm -rf *` in a build directory just removed) must never run in another.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Access, access};

/// The program a PTY start executes for `name`, found from `dir` (the working directory) as
/// the module says. The failure is the reference's, word for word, and is no OS error (the
/// client sees `spawnFailed`).
pub(crate) fn program(
    name: &str,
    dir: &Path,
    env: &BTreeMap<String, String>,
) -> io::Result<PathBuf> {
    let exe = Path::new(name);
    if exe.is_absolute() {
        return Ok(exe.to_owned());
    }
    let failed = |message: String| Err(io::Error::other(message));
    if relative_to_cwd(exe) {
        let candidate = dir.join(exe);
        let shown = candidate.display();
        return match verdict(&candidate) {
            Verdict::Directory => {
                failed(format!("Unable to spawn {shown} because it is a directory"))
            }
            Verdict::Executable => Ok(candidate),
            Verdict::NotExecutable => {
                failed(format!("Unable to spawn {shown} because it is not executable"))
            }
            Verdict::Missing => {
                failed(format!("Unable to spawn {shown} because it does not exist"))
            }
        };
    }
    let mut reasons = Vec::new();
    match env.get("PATH") {
        Some(path) => {
            for entry in std::env::split_paths(OsStr::new(path)) {
                let candidate = dir.join(entry).join(exe);
                match verdict(&candidate) {
                    Verdict::Executable => return Ok(candidate),
                    Verdict::Directory => {
                        reasons.push(format!("{} exists but is a directory", candidate.display()))
                    }
                    Verdict::NotExecutable => reasons
                        .push(format!("{} exists but is not executable", candidate.display())),
                    Verdict::Missing => {}
                }
            }
            reasons.push(format!("No viable candidates found in PATH {path:?}"));
        }
        None => reasons.push("Unable to resolve the PATH".to_owned()),
    }
    failed(format!("Unable to spawn {name} because:\n{}", reasons.join(".\n")))
}

/// `./x` and `../x`: relative to the working directory, never searched for.
fn relative_to_cwd(exe: &Path) -> bool {
    matches!(exe.components().next(), Some(Component::CurDir | Component::ParentDir))
}

enum Verdict {
    Directory,
    Executable,
    NotExecutable,
    Missing,
}

/// What a candidate is, by the same checks (and so the same races) as the reference's: a
/// candidate only names a program to try; `execve` decides.
fn verdict(candidate: &Path) -> Verdict {
    if candidate.is_dir() {
        Verdict::Directory
    } else if access(candidate, Access::EXEC_OK).is_ok() {
        Verdict::Executable
    } else if access(candidate, Access::EXISTS).is_ok() {
        Verdict::NotExecutable
    } else {
        Verdict::Missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_name_is_looked_up_on_the_childs_path_only() {
        let dir = Path::new("/");
        let found = program("sh", dir, &env(&[("PATH", "/nonexistent:/bin")])).unwrap();
        assert_eq!(found, Path::new("/bin/sh"));
        let none = program("sh", dir, &env(&[])).unwrap_err();
        assert_eq!(none.to_string(), "Unable to spawn sh because:\nUnable to resolve the PATH");
        assert_eq!(none.kind(), io::ErrorKind::Other);
        let missing = program("no-such-tether-program", dir, &env(&[("PATH", "/bin")]));
        assert_eq!(
            missing.unwrap_err().to_string(),
            "Unable to spawn no-such-tether-program because:\nNo viable candidates found in PATH \"/bin\""
        );
        assert_eq!(program("/no/such", dir, &env(&[])).unwrap(), Path::new("/no/such"));
    }

    #[test]
    fn rejected_candidates_are_listed() {
        let dir = Path::new("/");
        let error = program("tmp", dir, &env(&[("PATH", "/")])).unwrap_err();
        assert_eq!(
            error.to_string(),
            "Unable to spawn tmp because:\n/tmp exists but is a directory.\nNo viable candidates found in PATH \"/\""
        );
        let error = program("./tmp", dir, &env(&[])).unwrap_err();
        assert_eq!(error.to_string(), "Unable to spawn /./tmp because it is a directory");
    }
}
