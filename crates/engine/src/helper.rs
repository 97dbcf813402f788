//! The helper modes of the `tether` binary: what runs inside a sandbox on the server's behalf.
//!
//! `tether __tether-sandbox [--mounted …] exec …` is a sandboxed command's inner stage
//! ([`crate::sandbox::inner`]); `tether __tether-sandbox fs` performs one file operation inside
//! a sandbox ([`crate::fs::sandboxed`]), and `tether __tether-sandbox discover` one capability
//! discovery ([`crate::capabilities::sandboxed`]). A binary calls [`run_if_helper`] first thing in `main`,
//! before any runtime or logging starts.

use crate::capabilities::sandboxed::DiscoveryOp;
use crate::fs::sandboxed::{FileOp, HelperOp};
use crate::sandbox::exit_status::EXEC_FAILED_STATUS;
use crate::sandbox::inner::{self, ExecArgs, HELPER_ARG};
use crate::sandbox::mounted;

/// Runs the helper mode the arguments ask for, and exits; returns at once when they ask for
/// none. Either mode first checks that the sandbox holds what the server built it to hold
/// ([`mounted`]), and does nothing when it does not.
pub fn run_if_helper() {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(HELPER_ARG.as_ref()) {
        return;
    }
    // What the sandbox must hold is checked before anything else is done in it.
    let mode = match mounted::take(&mut args) {
        Ok((expected, mode)) => match mounted::verify(&expected) {
            Ok(()) => mode,
            Err(refusal) => {
                eprintln!("{refusal}");
                std::process::exit(refusal.status())
            }
        },
        Err(error) => fail(&format!("bad helper arguments: {error}")),
    };
    match mode.as_deref().and_then(|m| m.to_str()) {
        Some("exec") => match ExecArgs::parse(args) {
            Ok(exec) => inner::exec_main(exec),
            Err(error) => fail(&format!("bad inner-stage arguments: {error}")),
        },
        Some(mode) if mode == FileOp::MODE => crate::fs::sandboxed::serve_one::<FileOp>(),
        Some(mode) if mode == DiscoveryOp::MODE => crate::capabilities::sandboxed::serve_one(),
        _ => fail(&format!("unknown helper mode {:?}", mode.unwrap_or_default())),
    }
}

fn fail(why: &str) -> ! {
    eprintln!("tether sandbox: {why}");
    std::process::exit(EXEC_FAILED_STATUS)
}
