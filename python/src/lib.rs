//! `tether._native`: the Rust half of the `tether` Python package — Tether's own client
//! (`tether-client`: resume across drops, catch-up by sequence, bounded handles) exposed as a
//! few classes whose every call returns a [`pending::Pending`]. The Python half (`tether`,
//! `tether.aio`) gives them `subprocess`'s shape.
//!
//! - `pending`: calls on the client's runtime, waited for by a blocked thread (GIL released)
//!   or by an asyncio loop through a completion queue.
//! - `executor`: a session — run, spawn, attach, files.
//! - `copy`: `upload` and `download` of files and trees (`tether-tree-copy`, as `tether cp`).
//! - `process`: a followed process — its output in batches, stdin, signals.
//! - `mcp`: an MCP session whose server the executor places (`tether-mcp`'s client).
//! - `errors`: failures as Python's own exceptions or `tether._errors`'.

mod copy;
mod errors;
mod executor;
mod mcp;
mod pending;
mod process;

use pyo3::prelude::*;

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(executor::connect, module)?)?;
    module.add_class::<executor::NativeExecutor>()?;
    module.add_class::<process::NativeProcess>()?;
    module.add_class::<mcp::NativeMcpSession>()?;
    module.add_class::<mcp::NativeMcpNotifications>()?;
    module.add_class::<pending::Pending>()?;
    module.add_class::<pending::Completions>()?;
    Ok(())
}
