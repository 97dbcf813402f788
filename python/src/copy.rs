//! `upload` and `download`: a file or a tree between this machine and the executor, copied by
//! `tether-tree-copy` (the copier `tether cp` uses) from the engine's `LocalFileSystem` to the
//! session's `FileSystem` or back. A call cancelled (Ctrl-C, a cancelled task) is asked to stop
//! and removes what it left halfway (its staged files) before it ends.

use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tether_client::ExecServerClient;
use tether_engine::fs::LocalFileSystem;
use tether_tree_copy::{
    CLEANUP_DEADLINE, CopyError, CopyOptions, CopyReport, Observer, Side, TreeCopy, TreePath,
};

use crate::errors::NativeError;
use crate::pending::{Convert, Pending};

/// Entries skipped (unreadable) that a report names; past this it counts them only. A tree
/// unreadable in more places than this is one to look at by hand, and each name costs its
/// path in memory until the report is read.
const MAX_SKIPPED_NAMED: usize = 1_000;

/// Which way a copy goes.
#[derive(Clone, Copy)]
pub(crate) enum Direction {
    /// From this machine to the executor.
    Up,
    /// From the executor to this machine.
    Down,
}

/// A copy of `local` to `remote` (up) or `remote` to `local` (down), as scp copies (into a
/// directory under its own name, else as the destination; a directory with `recursive`).
pub(crate) fn start(
    client: ExecServerClient,
    direction: Direction,
    local: PathBuf,
    remote: PathBuf,
    recursive: bool,
) -> PyResult<Pending> {
    if !remote.is_absolute() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{}: give an absolute path on the executor",
            remote.display()
        )));
    }
    let local = TreePath::new(std::path::absolute(&local)?).shown_as(local);
    let remote = TreePath::new(remote);
    Ok(Pending::spawn_stoppable(CLEANUP_DEADLINE, move |stop| async move {
        let here = LocalFileSystem::new();
        let (near, far) = (Side::here(&here), Side::executor(&client));
        let (from, to, sides) = match direction {
            Direction::Up => (&local, &remote, (near, far)),
            Direction::Down => (&remote, &local, (far, near)),
        };
        let skipped = Skipped::default();
        let copy = TreeCopy::new(sides.0, sides.1).observed_by(&skipped);
        let options = CopyOptions { recursive, into_directory: false };
        tokio::select! {
            copied = copy.copy(from, to, options) => copied.map_err(NativeError::Copy)?,
            () = stop.requested() => {
                copy.remove_stages().await;
                return Err(NativeError::Cancelled);
            }
        }
        let report = copy.report();
        let named = std::mem::take(&mut *skipped.0.lock().unwrap_or_else(|p| p.into_inner()));
        Ok(Box::new(move |py: Python<'_>| report_to_python(py, &report, named)) as Convert)
    }))
}

/// The paths of the entries a copy skipped, at most [`MAX_SKIPPED_NAMED`].
#[derive(Default)]
struct Skipped(Mutex<Vec<String>>);

impl Observer for Skipped {
    fn skipped(&self, why: &CopyError) {
        let CopyError::Denied(shown) = why else { return };
        let mut named = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if named.len() < MAX_SKIPPED_NAMED {
            named.push(shown.path.display().to_string());
        }
    }
}

/// A `tether.CopyReport`.
fn report_to_python(
    py: Python<'_>,
    report: &CopyReport,
    skipped: Vec<String>,
) -> PyResult<Py<PyAny>> {
    let fields = PyDict::new(py);
    fields.set_item("files", report.files)?;
    fields.set_item("directories", report.directories)?;
    fields.set_item("links", report.links)?;
    fields.set_item("bytes", report.bytes)?;
    fields.set_item("skipped", skipped)?;
    fields.set_item("denied", report.denied)?;
    fields.set_item("special", report.special)?;
    fields.set_item("metadata_not_kept", report.metadata_not_kept)?;
    fields.set_item("links_skipped", report.links_skipped)?;
    fields.set_item("links_followed", report.links_followed)?;
    let class = py.import("tether._types")?.getattr("CopyReport")?;
    Ok(class.call((), Some(&fields))?.unbind())
}
