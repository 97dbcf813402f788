//! Trust on first use of a `wss://` executor, as ssh trusts a host key it has not seen: for a
//! certificate nothing vouches for (a `tether serve --tls-self-signed` server's), the
//! fingerprint is shown and, once accepted, remembered for the executor
//! ([`crate::known_fingerprints`]) and pinned on every later connection — reconnections of the
//! same session included, which reuse the options. A certificate that no longer matches what
//! was remembered is refused loudly.
//!
//! Trust given explicitly — `--tls-fingerprint`, `--tls-ca-file`, or a config entry's
//! `tls_fingerprint` or `tls_ca_file` — wins: the file is not read then. A certificate the
//! system's roots vouch for is trusted as it is, and nothing is remembered.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;

use tether_client::error::ConnectErrorKind;
use tether_client::{ClientError, ClientOptions, TlsFingerprint};

use crate::executors::Executor;
use crate::known_fingerprints::{self, Remembered};

/// How an executor's certificate is to be trusted on this connection.
enum Trust {
    /// As the options say: a plain `ws://` URL, trust given explicitly, or no file to
    /// remember in (no home).
    AsGiven,
    /// The fingerprint remembered for it, pinned.
    Remembered(Place, Remembered),
    /// Nothing remembered yet: the system's roots, else the person decides.
    FirstUse(Place),
}

/// Where an executor's fingerprint is remembered: the file, and its key there.
struct Place {
    file: PathBuf,
    key: String,
}

/// Connects with `attempt` (a connect or a resume), trusting the executor's certificate on
/// first use as the module says; a failure this module does not decide on is given to
/// `explain`, which says it in the caller's words.
pub async fn connect<T>(
    executor: &Executor,
    mut options: ClientOptions,
    mut attempt: impl AsyncFnMut(ClientOptions) -> Result<T, ClientError>,
    explain: impl FnOnce(ClientError) -> anyhow::Error,
) -> anyhow::Result<T> {
    let url = executor.url.as_str();
    match trust(executor)? {
        Trust::AsGiven => attempt(options).await.map_err(explain),
        Trust::Remembered(place, remembered) => {
            options.tls_fingerprint = Some(remembered.fingerprint);
            match attempt(options).await {
                Err(ClientError::Connect(error))
                    if error.kind == ConnectErrorKind::WrongFingerprint =>
                {
                    Err(changed(url, &place, &remembered, error.presented()))
                }
                connected => connected.map_err(explain),
            }
        }
        Trust::FirstUse(place) => match attempt(options.clone()).await {
            Err(ClientError::Connect(error))
                if error.kind == ConnectErrorKind::UntrustedCertificate
                    && let Some(presented) = error.presented() =>
            {
                accept(executor, &place, presented, &error).await?;
                options.tls_fingerprint = Some(presented);
                attempt(options).await.map_err(explain)
            }
            connected => connected.map_err(explain),
        },
    }
}

/// How `executor`'s certificate is to be trusted, from its trust flags and the file.
fn trust(executor: &Executor) -> anyhow::Result<Trust> {
    let given = executor.tls_fingerprint.is_some() || executor.tls_ca_file.is_some();
    let (Some(address), false, Some(file)) =
        (tls_address(&executor.url), given, known_fingerprints::path())
    else {
        return Ok(Trust::AsGiven);
    };
    let key = executor.name.clone().unwrap_or(address);
    Ok(match known_fingerprints::lookup(&file, &key)? {
        Some(remembered) => Trust::Remembered(Place { file, key }, remembered),
        None => Trust::FirstUse(Place { file, key }),
    })
}

/// A `wss://` URL's `HOST:PORT` (the port 443 when it names none; the host in lower case,
/// without user information), the key an executor given as a URL is remembered by; `None`
/// for any other URL.
fn tls_address(url: &str) -> Option<String> {
    let rest = url.get(..6).filter(|scheme| scheme.eq_ignore_ascii_case("wss://"))?;
    let rest = &url[rest.len()..];
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host).to_lowercase();
    if authority.is_empty() {
        return None;
    }
    let has_port = match authority.rsplit_once(':') {
        // `[::1]` is a host without a port; `[::1]:8443` one with.
        Some((host, port)) => {
            !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!host.starts_with('[') || host.ends_with(']'))
        }
        None => false,
    };
    Some(if has_port { authority } else { format!("{authority}:443") })
}

/// Decides on a certificate nothing vouches for, which presented `presented`: accepted (and
/// remembered) with `--accept-new-fingerprint` or by the person at a terminal, else refused.
async fn accept(
    executor: &Executor,
    place: &Place,
    presented: TlsFingerprint,
    error: &tether_client::error::ConnectError,
) -> anyhow::Result<()> {
    let url = &executor.url;
    let at_terminal = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    if !executor.accept_new_fingerprint && !at_terminal {
        anyhow::bail!(
            "cannot connect to {url}: {error}; if that fingerprint is your server's (`tether serve --tls-self-signed` prints it), accept it with --accept-new-fingerprint (remembered for {} in {}), or pin it with --tls-fingerprint",
            place.key,
            place.file.display()
        );
    }
    if !executor.accept_new_fingerprint {
        let (key, shown) = (place.key.clone(), url.clone());
        let yes = tokio::task::spawn_blocking(move || ask(&key, &shown, presented))
            .await
            .unwrap_or(false);
        if !yes {
            anyhow::bail!(
                "cannot connect to {url}: the certificate it presented ({presented}) was not accepted"
            );
        }
    }
    known_fingerprints::remember(&place.file, &place.key, presented)?;
    eprintln!("tether: remembered {presented} for {} in {}", place.key, place.file.display());
    Ok(())
}

/// Asks the person at the terminal, as ssh asks about a host key it does not know, whether to
/// trust the certificate `key` (at `url`) presented: `yes`, `no`, or the fingerprint itself
/// pasted from where the server printed it. The end of the input is a no.
fn ask(key: &str, url: &str, presented: TlsFingerprint) -> bool {
    let mut stderr = std::io::stderr();
    let _ = write!(
        stderr,
        "The authenticity of executor '{key}' ({url}) can't be established.\n\
         Its TLS certificate's fingerprint is {presented}.\n\
         (`tether serve --tls-self-signed` printed the server's under its URL: compare them.)\n\
         Are you sure you want to continue connecting (yes/no/[fingerprint])? "
    );
    loop {
        let _ = stderr.flush();
        let mut answer = String::new();
        match std::io::stdin().read_line(&mut answer) {
            Ok(0) | Err(_) => {
                let _ = writeln!(stderr);
                return false;
            }
            Ok(_) => {}
        }
        let answer = answer.trim();
        if answer.eq_ignore_ascii_case("yes") {
            return true;
        }
        if answer.eq_ignore_ascii_case("no") {
            return false;
        }
        if let Ok(typed) = answer.parse::<TlsFingerprint>() {
            if typed == presented {
                return true;
            }
            let _ = writeln!(stderr, "That is not the fingerprint this server presented.");
        }
        let _ = write!(stderr, "Please type 'yes', 'no' or the fingerprint: ");
    }
}

/// The loud refusal of a server whose certificate is not the one remembered for it, as ssh
/// refuses a changed host key: a warning block on stderr, then the error (the command's one
/// line) naming the line to remove.
fn changed(
    url: &str,
    place: &Place,
    remembered: &Remembered,
    presented: Option<TlsFingerprint>,
) -> anyhow::Error {
    let presented = presented.map_or("another".to_owned(), |fingerprint| fingerprint.to_string());
    let (file, line) = (place.file.display(), remembered.line);
    eprint!(
        "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n\
         @    WARNING: EXECUTOR IDENTIFICATION HAS CHANGED!        @\n\
         @@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n\
         IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!\n\
         Someone could be between you and the executor right now (a man-in-the-middle attack)!\n\
         It is also possible that its certificate has just been changed (a server restarted\n\
         with --tls-self-signed makes a new one; --tls-self-signed-dir keeps one).\n\
         The fingerprint of the certificate executor '{key}' ({url}) presented is\n\
         {presented}.\n\
         The one remembered for it is\n\
         {expected}.\n\
         If the change is expected, remove its line from {file}:\n\
         \x20 {file}:{line}\n\
         and connect again to be asked about the new one.\n",
        key = place.key,
        expected = remembered.fingerprint,
    );
    anyhow::anyhow!(
        "cannot connect to {url}: the server's certificate is {presented}, not {} as remembered for {} at {file}:{line}; refused (remove that line if the server's certificate changed on purpose)",
        remembered.fingerprint,
        place.key,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_remembered_by_its_host_and_port() {
        assert_eq!(tls_address("wss://127.0.0.1:8443").as_deref(), Some("127.0.0.1:8443"));
        assert_eq!(tls_address("WSS://Build-Box/path?q").as_deref(), Some("build-box:443"));
        assert_eq!(tls_address("wss://user@[::1]:8443/").as_deref(), Some("[::1]:8443"));
        assert_eq!(tls_address("wss://[::1]").as_deref(), Some("[::1]:443"));
        assert_eq!(tls_address("ws://127.0.0.1:4500"), None);
        assert_eq!(tls_address("wss://"), None);
    }

    #[test]
    fn a_changed_certificate_names_the_line_to_remove() {
        let place =
            Place { file: "/h/.config/tether/known_fingerprints".into(), key: "build".into() };
        let remembered = Remembered { fingerprint: TlsFingerprint([1; 32]), line: 7 };
        let error = changed("wss://b:1", &place, &remembered, None).to_string();
        assert!(
            error.contains("as remembered for build at /h/.config/tether/known_fingerprints:7"),
            "{error}"
        );
    }
}
