//! How the client commands say what went wrong: one line, each cause said once, ending with
//! what to do where there is something to do.

use tether_client::error::{ConnectError, ConnectErrorKind};
use tether_client::{ClientError, ClientOptions, ExecServerClient};

use crate::executors::Executor;

/// The error and its causes on one line. Libraries differ on whether an error's text includes
/// its source's, so a cause already said is not said again.
pub fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        let text = text.trim();
        if text.is_empty() || line.contains(text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(text);
    }
    // A message that spans lines (a server's, a library's) would break "one line".
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Connects to `executor` (trusting its certificate on first use: [`crate::trust`]); a failure
/// names the URL and says what to try.
pub async fn connect(
    executor: &Executor,
    options: ClientOptions,
) -> anyhow::Result<ExecServerClient> {
    let url = executor.url.as_str();
    let with_token = options.bearer_token.is_some();
    crate::trust::connect(
        executor,
        options,
        async |options| ExecServerClient::connect(url, options).await,
        |error| connect_failure(url, error, with_token),
    )
    .await
}

/// A failure to connect to `url` (or to start or resume a session there), naming the URL and,
/// for a connection that could not be made, what to try.
pub fn connect_failure(url: &str, error: ClientError, with_token: bool) -> anyhow::Error {
    match &error {
        ClientError::Connect(connect) => {
            let hint = connect_hint(connect, with_token);
            anyhow::anyhow!("cannot connect to {url}: {connect}{hint}")
        }
        _ => anyhow::Error::new(error).context(format!("cannot start a session on {url}")),
    }
}

/// What a person can do about a connection that could not be made, by its kind.
fn connect_hint(error: &ConnectError, with_token: bool) -> &'static str {
    match error.kind {
        ConnectErrorKind::InvalidUrl => "; give a ws:// or wss:// URL, e.g. ws://127.0.0.1:8080",
        ConnectErrorKind::InvalidToken => "; the token must be one line of printable text",
        ConnectErrorKind::Refused { status: 401 } if with_token => {
            "; the server did not accept the token: check --token-file or TETHER_TOKEN"
        }
        ConnectErrorKind::Refused { status: 401 } => {
            "; the server wants a token: pass --token-file FILE or set TETHER_TOKEN"
        }
        ConnectErrorKind::Refused { status: 503 } => {
            "; the server is at its connection limit: try again later"
        }
        ConnectErrorKind::UntrustedCertificate => {
            "; if that fingerprint is your server's (`tether serve --tls-self-signed` prints it), pin it with --tls-fingerprint, or give --tls-ca-file PEM (the CA, or the server's own certificate)"
        }
        ConnectErrorKind::WrongFingerprint => {
            "; a server restarted with --tls-self-signed has a new certificate (--tls-self-signed-dir keeps one): pin the fingerprint it printed, if you trust that it is the server"
        }
        ConnectErrorKind::NotTls => {
            "; the server speaks plain WebSocket: use ws:// instead of wss://"
        }
        ConnectErrorKind::NotHttp => {
            "; if the server serves TLS, use wss:// instead of ws://; otherwise check the port"
        }
        ConnectErrorKind::TlsSetup => "; check --tls-ca-file (TETHER_TLS_CA_FILE)",
        ConnectErrorKind::Network => "; is `tether serve` running and listening on this address?",
        ConnectErrorKind::Timeout => {
            "; check the address, and that the network lets the connection through"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_is_said_once_on_one_line() {
        let inner = std::io::Error::from_raw_os_error(111);
        let error = anyhow::Error::new(inner)
            .context("cannot connect: Connection refused (os error 111)")
            .context("tether exec\nfailed");
        assert_eq!(
            one_line(&error),
            "tether exec failed: cannot connect: Connection refused (os error 111)"
        );
    }
}
