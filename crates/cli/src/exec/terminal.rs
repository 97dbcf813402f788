//! The local terminal while a command runs on a remote one: raw mode, its size, and its
//! changes of size.

use tether_protocol::process::PtySize;

/// The local terminal in raw mode for as long as this lives: keys (Ctrl-C included) go to the
/// remote terminal as typed, and only the remote side echoes. Restored when dropped.
pub(super) struct RawTerminal {
    original: rustix::termios::Termios,
}

impl RawTerminal {
    /// `None` when stdin is not a terminal (nothing to do) or cannot be switched.
    pub(super) fn enable() -> Option<Self> {
        let stdin = std::io::stdin();
        if !rustix::termios::isatty(&stdin) {
            return None;
        }
        let original = rustix::termios::tcgetattr(&stdin).ok()?;
        let mut raw = original.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &raw).ok()?;
        Some(Self { original })
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let stdin = std::io::stdin();
        let _ = rustix::termios::tcsetattr(
            &stdin,
            rustix::termios::OptionalActions::Now,
            &self.original,
        );
    }
}

/// The size of the terminal on our stdout (or stdin), if either is one.
pub(super) fn local_terminal_size() -> Option<PtySize> {
    use std::os::fd::AsFd as _;
    let (stdout, stdin) = (std::io::stdout(), std::io::stdin());
    [stdout.as_fd(), stdin.as_fd()].into_iter().find_map(|fd| {
        let size = rustix::termios::tcgetwinsize(fd).ok()?;
        (size.ws_col > 0 && size.ws_row > 0)
            .then_some(PtySize { cols: size.ws_col, rows: size.ws_row })
    })
}

/// The next SIGWINCH, or never without a listener.
pub(super) async fn next_window_change(
    changes: &mut Option<tokio::signal::unix::Signal>,
) -> Option<()> {
    match changes {
        Some(changes) => changes.recv().await,
        None => std::future::pending().await,
    }
}
