//! Our stdin, forwarded to the command's, and how its end reaches the command.

use tether_client::ProcessControl;
use tokio::io::AsyncReadExt;

/// How the end of our input reaches the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum InputEnd {
    /// Its stdin is closed (a pipe process, where the server can close it).
    Close,
    /// Its terminal is sent end-of-file, Ctrl-D (`echo x | tether exec -t -- cat`): our input
    /// is not a terminal, so no one will type the key that ends it.
    TerminalEof,
    /// Nothing more: our input is a terminal, whose Ctrl-D is forwarded like any key, or the
    /// server cannot close the command's stdin.
    Nothing,
}

impl InputEnd {
    /// The end for a command on a terminal (`tty`) or not, whose stdin the server can close
    /// or not (`close_stdin`), given whether our own stdin is a terminal.
    pub(super) fn of(tty: bool, close_stdin: bool) -> Self {
        match (tty, std::io::IsTerminal::is_terminal(&std::io::stdin())) {
            (true, false) => InputEnd::TerminalEof,
            (true, true) => InputEnd::Nothing,
            (false, _) if close_stdin => InputEnd::Close,
            (false, _) => InputEnd::Nothing,
        }
    }
}

/// The key a terminal reads as end of input at the start of a line (VEOF, Ctrl-D).
const TERMINAL_EOF: u8 = 0x04;

/// Copies our stdin to the command's, in order, each write answered before the next; at the
/// end of our input, ends the command's as `end` says.
pub(super) async fn forward_stdin(control: ProcessControl, end: InputEnd) -> anyhow::Result<()> {
    let mut stdin = tokio::io::stdin();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut last = None;
    loop {
        match stdin.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                last = buffer[..n].last().copied();
                control.write(buffer[..n].to_vec()).await?;
            }
        }
    }
    match end {
        InputEnd::Close => control.close_stdin().await?,
        InputEnd::TerminalEof => {
            // Mid-line, a first Ctrl-D only hands the partial line over; a second, at the
            // start of the (now empty) line, is the end of input.
            let keys = match last {
                None | Some(b'\n') => vec![TERMINAL_EOF],
                Some(_) => vec![TERMINAL_EOF, TERMINAL_EOF],
            };
            control.write(keys).await?;
        }
        InputEnd::Nothing => {}
    }
    Ok(())
}
