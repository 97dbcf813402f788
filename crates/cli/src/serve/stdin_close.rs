//! `--exit-on-stdin-close`: a server started by a parent that holds its standard input ends
//! when that input closes — when the parent exits or lets it go — as a stop signal would end
//! it (a drain first with `--shutdown-grace-secs`, then every session's processes killed).

use std::io::Read as _;

/// Bytes read from standard input at a time. What arrives is thrown away: only its end
/// matters, and a parent that writes to it is not kept waiting.
const DISCARD_BYTES: usize = 8 * 1024;

/// Resolves once standard input has ended (end of file, or an error reading it). Watched by a
/// thread of its own, blocked in `read`: marking the descriptor non-blocking for the runtime
/// would change it for the parent that shares it too.
pub fn closed() -> std::io::Result<tokio::sync::oneshot::Receiver<()>> {
    let (closed, watched) = tokio::sync::oneshot::channel();
    std::thread::Builder::new().name("stdin-watch".into()).spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut discard = [0u8; DISCARD_BYTES];
        loop {
            match stdin.read(&mut discard) {
                Ok(0) => break,
                Ok(_) => {}
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = closed.send(());
    })?;
    Ok(watched)
}
