//! `tether token`: the HS256 tokens a server started with `--ws-auth signed-bearer-token`
//! accepts. `mint` signs one with the server's own secret file, read as the server reads it;
//! `inspect` shows what a token says and, given the secret, whether it was signed with it.
//! The signing and the checking are the server's own (`tether_server::jwt`), so what this
//! mints is what the server verifies.

use std::io::{IsTerminal as _, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, anyhow, bail};
use serde_json::{Map, Value};
use tether_protocol::time::rfc3339;
use tether_server::jwt::{DecodedToken, MIN_SECRET_BYTES, SecretError, SharedSecret};

#[derive(clap::Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    command: TokenCommand,
}

#[derive(clap::Subcommand)]
enum TokenCommand {
    /// Print a new token (one line) signed with the server's shared secret.
    #[command(after_help = MINT_EXAMPLES)]
    Mint(MintArgs),
    /// Show a token's header, claims and times; with the secret, check its signature.
    Inspect(InspectArgs),
}

const MINT_EXAMPLES: &str = "Examples:
  TETHER_TOKEN=$(tether token mint --shared-secret-file secret --ttl 10m) \\
    tether exec --url ws://127.0.0.1:4500 -- echo hi
  tether token mint --shared-secret-file secret --ttl 1h --issuer control-plane --audience executor";

#[derive(clap::Args)]
struct MintArgs {
    /// The secret file the server was given as `--ws-shared-secret-file`: text is trimmed,
    /// anything else is used byte for byte, as the server reads it.
    #[arg(long, value_name = "FILE")]
    shared_secret_file: PathBuf,
    /// How long the token is valid: a number and a unit (`30s`, `10m`, `2h`, `1d`) or plain
    /// seconds. Required: how long a credential lives is a choice, not a default.
    #[arg(long, value_name = "DURATION", value_parser = parse_ttl)]
    ttl: Duration,
    /// The `iss` claim (for a server started with `--ws-issuer`).
    #[arg(long)]
    issuer: Option<String>,
    /// The `aud` claim (for a server started with `--ws-audience`).
    #[arg(long)]
    audience: Option<String>,
    /// The `sub` claim: who the token is for (the server does not check it).
    #[arg(long)]
    subject: Option<String>,
}

#[derive(clap::Args)]
struct InspectArgs {
    /// The token; `-` or none reads it from stdin, which keeps it out of `ps`.
    token: Option<String>,
    /// Check the signature with this secret file (the server's `--ws-shared-secret-file`);
    /// an invalid signature exits 1.
    #[arg(long, value_name = "FILE")]
    shared_secret_file: Option<PathBuf>,
}

pub fn token(args: &TokenArgs) -> anyhow::Result<()> {
    match &args.command {
        TokenCommand::Mint(args) => mint(args),
        TokenCommand::Inspect(args) => inspect(args),
    }
}

fn mint(args: &MintArgs) -> anyhow::Result<()> {
    let secret = read_secret(&args.shared_secret_file)?;
    let now = unix_now();
    let exp = i64::try_from(args.ttl.as_secs())
        .ok()
        .and_then(|ttl| now.checked_add(ttl))
        .context("--ttl is too long for an `exp` claim; give a shorter one, such as 1d")?;
    let mut claims = Map::new();
    claims.insert("exp".into(), exp.into());
    claims.insert("iat".into(), now.into());
    for (name, value) in [("iss", &args.issuer), ("aud", &args.audience), ("sub", &args.subject)] {
        if let Some(value) = value {
            claims.insert(name.into(), value.as_str().into());
        }
    }
    writeln!(std::io::stdout().lock(), "{}", secret.mint(&claims))
        .context("cannot write the token to stdout")
}

fn inspect(args: &InspectArgs) -> anyhow::Result<()> {
    // The secret first: a wrong file is said before anything is printed.
    let secret = args.shared_secret_file.as_deref().map(read_secret).transpose()?;
    let token = match args.token.as_deref() {
        Some(token) if token != "-" => token.trim().to_owned(),
        _ => token_from_stdin()?,
    };
    let decoded = DecodedToken::decode(&token).map_err(|error| {
        anyhow!("cannot inspect the token: {error}; give it as `tether token mint` printed it")
    })?;
    let report = Report::of(&decoded, unix_now());
    let mut stdout = std::io::stdout().lock();
    for part in [&decoded.header, &decoded.claims] {
        writeln!(stdout, "{}", serde_json::to_string_pretty(part)?)?;
    }
    for line in &report.lines {
        writeln!(stdout, "{line}")?;
    }
    let (Some(secret), Some(file)) = (secret, &args.shared_secret_file) else {
        writeln!(stdout, "signature: not checked (no --shared-secret-file)")?;
        return Ok(());
    };
    let path = absolute(file);
    let alg = decoded.header.get("alg").and_then(Value::as_str);
    if alg != Some("HS256") {
        bail!(
            "signature: invalid (the header's alg is {}, not HS256, which the server refuses); mint a new token with `tether token mint`",
            decoded.header.get("alg").map_or("missing".into(), Value::to_string)
        );
    }
    if !secret.signed(&token) {
        bail!(
            "signature: invalid (not signed with the secret in {path}); check that it is the file the server reads, or mint a new token from it"
        );
    }
    writeln!(stdout, "signature: valid").map_err(Into::into)
}

/// The token piped in, trimmed; a terminal is refused rather than waited on, since nobody
/// types a token.
fn token_from_stdin() -> anyhow::Result<String> {
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        bail!(
            "no token given; pass it on stdin (`tether token inspect < FILE`) or as the argument"
        );
    }
    let mut token = String::new();
    stdin.read_to_string(&mut token).context("cannot read the token from stdin")?;
    let token = token.trim();
    if token.is_empty() {
        bail!(
            "stdin held no token; pipe one in, e.g. `tether token mint … | tether token inspect`"
        );
    }
    Ok(token.to_owned())
}

/// The server's secret from `file`, or why it cannot be one, in the server's terms and with
/// what to do.
fn read_secret(file: &Path) -> anyhow::Result<SharedSecret> {
    let path = absolute(file);
    let contents =
        std::fs::read(file).with_context(|| format!("cannot read the shared secret {path}"))?;
    SharedSecret::from_file_contents(&contents).map_err(|error| match error {
        SecretError::Empty => anyhow!(
            "the shared secret {path} is empty; give the file the server reads as --ws-shared-secret-file"
        ),
        SecretError::TooShort => anyhow!(
            "the shared secret {path} is shorter than {MIN_SECRET_BYTES} bytes, which `tether serve` refuses; make a longer one (`head -c 32 /dev/urandom | base64 > FILE`) and give it to the server too"
        ),
        SecretError::SkewTooLarge => unreachable!("only a verifier has a clock skew"),
    })
}

/// The lines under the JSON: each time claim as a date and relative to now.
struct Report {
    lines: Vec<String>,
}

impl Report {
    fn of(token: &DecodedToken, now: i64) -> Self {
        let mut lines = Vec::new();
        let claims = &token.claims;
        lines.push(match claims.get("exp") {
            None | Some(Value::Null) => {
                "exp: missing (the server refuses a token without an integer exp)".to_owned()
            }
            Some(exp) => match exp.as_i64() {
                Some(exp) if exp >= now => {
                    format!("exp: {} (valid for {} more)", rfc3339(exp), span(exp - now))
                }
                Some(exp) => format!("exp: {} (expired {} ago)", rfc3339(exp), span(now - exp)),
                None => "exp: not an integer (the server refuses the token)".to_owned(),
            },
        });
        match claims.get("nbf") {
            None | Some(Value::Null) => {}
            Some(nbf) => lines.push(match nbf.as_i64() {
                Some(nbf) if nbf <= now => {
                    format!("nbf: {} (valid since {} ago)", rfc3339(nbf), span(now - nbf))
                }
                Some(nbf) => {
                    format!("nbf: {} (not valid for {} more)", rfc3339(nbf), span(nbf - now))
                }
                None => "nbf: not an integer (the server refuses the token)".to_owned(),
            }),
        }
        match claims.get("iat") {
            None | Some(Value::Null) => {}
            Some(iat) => lines.push(match iat.as_i64() {
                Some(iat) if iat <= now => {
                    format!("iat: {} (issued {} ago)", rfc3339(iat), span(now - iat))
                }
                Some(iat) => format!("iat: {} ({} from now)", rfc3339(iat), span(iat - now)),
                None => "iat: not an integer (the server ignores it)".to_owned(),
            }),
        }
        Self { lines }
    }
}

/// `--ttl`: a whole number and one unit (`s`, `m`, `h`, `d`), or a plain number of seconds;
/// at least a second, since a token that is born expired is a mistake.
fn parse_ttl(text: &str) -> Result<Duration, String> {
    let expected = "expected a number and a unit, such as 30s, 10m, 2h or 1d";
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let scale: u64 = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 60 * 60,
        "d" => 24 * 60 * 60,
        _ => return Err(expected.to_owned()),
    };
    let count: u64 = digits.parse().map_err(|_| expected.to_owned())?;
    let seconds = count.checked_mul(scale).ok_or("too long; give a shorter one, such as 1d")?;
    if seconds == 0 {
        return Err("a token must live at least 1s".to_owned());
    }
    Ok(Duration::from_secs(seconds))
}

/// Seconds since the Unix epoch, as `exp` and `iat` count them.
fn unix_now() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    i64::try_from(now).unwrap_or(i64::MAX)
}

/// A span of seconds as a person reads it: its two largest units, `9m 59s`, `1d 2h`, `0s`.
fn span(seconds: i64) -> String {
    let units = [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)];
    let first = units.iter().position(|(_, size)| seconds >= *size).unwrap_or(units.len() - 1);
    let mut rest = seconds;
    let mut parts = Vec::new();
    for (name, size) in &units[first..(first + 2).min(units.len())] {
        let count = rest / size;
        rest %= size;
        if count > 0 || parts.is_empty() {
            parts.push(format!("{count}{name}"));
        }
    }
    parts.join(" ")
}

/// A path as an error shows it: made absolute against the current directory.
fn absolute(path: &Path) -> String {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned()).display().to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ttls_are_a_number_and_one_unit_and_at_least_a_second() {
        for (text, seconds) in [("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86_400), ("45", 45)]
        {
            assert_eq!(parse_ttl(text), Ok(Duration::from_secs(seconds)), "{text}");
        }
        for bad in [
            "",
            "s",
            "0",
            "0m",
            "10 m",
            "1h30m",
            "-5s",
            "1.5h",
            "10M",
            "1w",
            "99999999999999999999d",
        ] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_ttl("0s"), Err("a token must live at least 1s".to_owned()));
    }

    #[test]
    fn spans_show_their_two_largest_units() {
        for (seconds, text) in
            [(0, "0s"), (59, "59s"), (599, "9m 59s"), (3600, "1h"), (93_784, "1d 2h"), (120, "2m")]
        {
            assert_eq!(span(seconds), text, "{seconds}");
        }
    }

    #[test]
    fn the_report_places_each_time_claim_against_now() {
        let now = 1_800_000_000;
        let report = |claims: Value| {
            let claims = claims.as_object().unwrap().clone();
            Report::of(&DecodedToken { header: Map::new(), claims }, now).lines
        };
        assert_eq!(
            report(json!({"exp": now + 599, "iat": now - 1, "nbf": now + 60})),
            [
                "exp: 2027-01-15T08:09:59Z (valid for 9m 59s more)",
                "nbf: 2027-01-15T08:01:00Z (not valid for 1m more)",
                "iat: 2027-01-15T07:59:59Z (issued 1s ago)",
            ]
        );
        assert_eq!(
            report(json!({"exp": now - 3, "nbf": now - 7200})),
            [
                "exp: 2027-01-15T07:59:57Z (expired 3s ago)",
                "nbf: 2027-01-15T06:00:00Z (valid since 2h ago)",
            ]
        );
        assert_eq!(
            report(json!({"iat": "soon"})),
            [
                "exp: missing (the server refuses a token without an integer exp)",
                "iat: not an integer (the server ignores it)",
            ]
        );
    }
}
