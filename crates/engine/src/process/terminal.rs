//! A PTY pair for a terminal child, never visible to another child.
//!
//! The master is opened close-on-exec from the start (`O_CLOEXEC` on `posix_openpt`), not
//! marked so a moment later: a child started meanwhile by another thread would otherwise
//! inherit a master of someone else's terminal, and could read and type into it.

use std::ffi::CString;
use std::os::fd::OwnedFd;

use rustix::pty::OpenptFlags;

/// A PTY's master and the path of its terminal side.
pub(crate) struct Terminal {
    /// Non-blocking, as [`super::pty_io::split`] needs: its thread reads what is ready without
    /// waiting for more, and its writer waits for room on the runtime.
    pub master: OwnedFd,
    /// `/dev/pts/N`, which the child opens as its controlling terminal.
    pub path: CString,
}

/// Opens a PTY of `cols` × `rows`.
pub(crate) fn open(cols: u16, rows: u16) -> std::io::Result<Terminal> {
    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let flags = rustix::fs::fcntl_getfl(&master)?;
    rustix::fs::fcntl_setfl(&master, flags | rustix::fs::OFlags::NONBLOCK)?;
    let size = rustix::termios::Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    rustix::termios::tcsetwinsize(&master, size)?;
    let path = rustix::pty::ptsname(&master, Vec::new())?;
    Ok(Terminal { master, path })
}

/// Opens the terminal side at `path` (close-on-exec, and not made this process's controlling
/// terminal).
pub(crate) fn open_side(path: &std::ffi::CStr) -> std::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    Ok(rustix::fs::open(path, OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty())?)
}

#[cfg(test)]
mod tests {
    /// Neither side is inherited by a child that is not given it; the master does not block.
    #[test]
    fn both_sides_are_close_on_exec() {
        let terminal = super::open(80, 24).unwrap();
        let side = super::open_side(&terminal.path).unwrap();
        for fd in [&terminal.master, &side] {
            let flags = rustix::io::fcntl_getfd(fd).unwrap();
            assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
        }
        let flags = rustix::fs::fcntl_getfl(&terminal.master).unwrap();
        assert!(flags.contains(rustix::fs::OFlags::NONBLOCK));
        let size = rustix::termios::tcgetwinsize(&side).unwrap();
        assert_eq!((size.ws_col, size.ws_row), (80, 24));
    }
}
