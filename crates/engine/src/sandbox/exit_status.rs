//! How the sandbox's helper exits when what it was to run never ran, each status saying why:
//! the server reads them back (to answer as the reference answers, or to build a sandbox
//! again), and every stage that exits with one (`inner`, `launch`'s failing child, `mounted`'s
//! check) takes it from here, so none imports another for a number.

/// The command could not be started inside the sandbox (the reference's status).
pub const EXEC_FAILED_STATUS: i32 = 101;

/// A sandbox refused as the reference refuses it ([`super::mounts::PlanError::refusal`]: the
/// app-server socket directory, a `none` glob), or whose mounts cannot be checked at all: as
/// the reference's helper exits when it will not build bubblewrap's command.
pub const BUILD_REFUSED_STATUS: i32 = 1;

/// A mount target does not hold what it must: sysexits' `EX_TEMPFAIL`, since nothing was done
/// and the same call, built again, may well pass (the server builds a file operation's sandbox
/// again on it, [`crate::fs::sandboxed`]).
pub const CHANGED_STATUS: i32 = 75;
