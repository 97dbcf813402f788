//! The helper modes of the `tether` binary: what runs inside a sandbox on the server's behalf.
//!
//! `tether __tether-sandbox exec …` is a sandboxed command's inner stage
//! ([`crate::sandbox::inner`]); `tether __tether-sandbox fs` performs one file operation inside
//! a sandbox ([`crate::fs::sandboxed`]). A binary calls [`run_if_helper`] first thing in `main`,
//! before any runtime or logging starts.

use crate::sandbox::inner::{self, ExecArgs, HELPER_ARG};

/// Runs the helper mode the arguments ask for, and exits; returns at once when they ask for
/// none.
pub fn run_if_helper() {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(HELPER_ARG.as_ref()) {
        return;
    }
    let mode = args.next();
    match mode.as_deref().and_then(|m| m.to_str()) {
        Some("exec") => match ExecArgs::parse(args) {
            Ok(exec) => inner::exec_main(exec),
            Err(error) => fail(&format!("bad inner-stage arguments: {error}")),
        },
        Some("fs") => crate::fs::sandboxed::serve_one(),
        _ => fail(&format!("unknown helper mode {:?}", mode.unwrap_or_default())),
    }
}

fn fail(why: &str) -> ! {
    eprintln!("tether sandbox: {why}");
    std::process::exit(inner::EXEC_FAILED_STATUS)
}
