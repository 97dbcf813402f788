//! A path as a person named it, with the side it is on: what every message about it says.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// Where a side's files are, as the messages say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// This machine: a path is said as it is.
    Here,
    /// An executor: `PATH on the executor`, or `PATH on NAME` where it has a name worth saying
    /// (a copy from one executor to another).
    Executor(Option<Arc<str>>),
}

/// A path as a person named it, with the side it is on: what every message about it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub path: PathBuf,
    pub place: Place,
}

impl Shown {
    /// ` here` where the path is on this machine: `X is a symbolic link here` reads as
    /// `X on the executor is a symbolic link` does.
    pub(crate) fn here_word(&self) -> &'static str {
        match self.place {
            Place::Here => " here",
            Place::Executor(_) => "",
        }
    }
}

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.place {
            Place::Here => write!(f, "{}", self.path.display()),
            Place::Executor(None) => write!(f, "{} on the executor", self.path.display()),
            Place::Executor(Some(name)) => write!(f, "{} on {name}", self.path.display()),
        }
    }
}
