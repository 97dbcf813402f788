//! What a process that runs other people's commands must keep from them, set once for the
//! whole process before it serves. Every embedder of the server runs commands as its own user,
//! so each would otherwise leak the same things; [`harden_process`] is the one place they are
//! kept.

/// Keeps the server's memory and its inherited descriptors from the commands it runs. Neither
/// failing stops the server (each is logged at WARN): both narrow what a command can reach,
/// and neither is what confines it.
pub fn harden_process() {
    keep_own_memory_private();
    keep_inherited_descriptors_from_commands();
}

/// Makes the server's `/proc` entries (its environment, memory, descriptors) unreadable by its
/// children: a command running as the same user could otherwise read the server's whole
/// environment, tokens included, from `/proc/$PPID/environ`. Children are unaffected (`exec`
/// makes them dumpable again). A process with `CAP_SYS_PTRACE` (root's commands, unless
/// sandboxed) can still read it; that is the kernel's rule, not one a server can lift.
fn keep_own_memory_private() {
    if let Err(error) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        tracing::warn!(%error, "the server's /proc entries stay readable by its children");
    }
}

/// Makes every descriptor the server inherited from whatever started it (above stdin, stdout
/// and stderr) close-on-exec: the server can still use one it is pointed at (`/dev/fd/N`), but
/// no command gets it. A launcher's open file (a secrets file, a socket, a pipe to a supervisor)
/// would otherwise reach every command, as it does under the reference. The server's own
/// descriptors are close-on-exec from the moment they are made.
fn keep_inherited_descriptors_from_commands() {
    if let Err(error) = tether_engine::exec_setup::close_on_exec_from(3) {
        tracing::warn!(%error, "descriptors the server inherited may reach its commands");
    }
}
