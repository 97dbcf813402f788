//! `codex exec-server`'s registration with OpenAI's environment registry (`--remote` and the
//! flags that go with it, and the `forward` subcommand): taken on the command line, so that
//! the reference's command lines parse, and refused before anything starts. Tether serves
//! connections directly; Codex reaches it through `CODEX_EXEC_SERVER_URL`.

use std::ffi::OsString;

use clap::{Args, Subcommand};

/// The registration flags. Only `--name` and `--environment-id` are taken without `--remote`
/// by the reference (they mean nothing there); every other one needs `--remote`.
#[derive(Args)]
#[command(next_help_heading = "Registration with OpenAI's environment registry (refused: Tether \
                               serves connections directly)")]
pub struct RegistrationArgs {
    /// Register with the registry at this base URL. Refused.
    #[arg(long, value_name = "URL")]
    remote: Option<String>,

    /// The registration's transport (`noise` or `direct`). Refused.
    #[arg(long, value_name = "REMOTE_TRANSPORT")]
    remote_transport: Option<String>,

    /// The environment to register as. Ignored without --remote, as by the reference.
    #[arg(long, value_name = "ID")]
    environment_id: Option<String>,

    /// The environment's human-readable name. Ignored without --remote, as by the reference.
    #[arg(long, value_name = "NAME")]
    name: Option<String>,

    /// Register with Agent Identity auth from CODEX_ACCESS_TOKEN. Refused.
    #[arg(long)]
    use_agent_identity_auth: bool,

    /// Read one registration bearer from stdin. Refused.
    #[arg(long)]
    registration_bearer_stdin: bool,

    /// Read rotating executor credentials from stdin. Refused.
    #[arg(long)]
    executor_credential_stdin: bool,

    /// Read a ChatGPT access token from stdin for registration. Refused.
    #[arg(long)]
    chatgpt_token_stdin: bool,

    /// The ChatGPT account of the registration. Refused.
    #[arg(long, value_name = "ID")]
    chatgpt_account_id: Option<String>,

    /// Sign the registration with AWS SigV4. Refused.
    #[arg(long)]
    aws_sigv4: bool,

    /// The AWS profile of SigV4 signing. Refused.
    #[arg(long, value_name = "PROFILE")]
    aws_profile: Option<String>,

    /// The AWS region of SigV4 signing. Refused.
    #[arg(long, value_name = "REGION")]
    aws_region: Option<String>,

    /// The AWS service of SigV4 signing. Refused.
    #[arg(long, value_name = "SERVICE")]
    aws_service: Option<String>,
}

/// `tether serve forward`: `codex exec-server forward`, which registers another exec-server
/// with the registry.
#[derive(Subcommand)]
pub enum ServeCommand {
    /// Register an existing exec-server with OpenAI's environment registry
    /// (`codex exec-server forward`). Refused: Tether serves connections directly.
    Forward {
        /// Whatever `codex exec-server forward` takes (`--connect URL`, `--remote URL`, …).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
        args: Vec<OsString>,
    },
}

/// A registration asked for: refused, with the exit status of a command line Tether does not
/// take (2).
#[derive(Debug, thiserror::Error)]
#[error(
    "{what} registers an exec-server with OpenAI's environment registry, which Tether does not do: \
     it serves connections directly; start it with `tether serve --listen ws://HOST:PORT` and \
     point Codex at it with CODEX_EXEC_SERVER_URL=ws://HOST:PORT"
)]
pub struct RegistrationRefused {
    /// The flag or subcommand that asked, as given.
    what: &'static str,
}

impl RegistrationArgs {
    /// Refuses the first registration flag given (`forward` first of all); `--name` and
    /// `--environment-id` alone are not a registration.
    pub fn refuse(&self, command: Option<&ServeCommand>) -> Result<(), RegistrationRefused> {
        let asked = [
            (command.is_some(), "`serve forward`"),
            (self.remote.is_some(), "--remote"),
            (self.remote_transport.is_some(), "--remote-transport"),
            (self.use_agent_identity_auth, "--use-agent-identity-auth"),
            (self.registration_bearer_stdin, "--registration-bearer-stdin"),
            (self.executor_credential_stdin, "--executor-credential-stdin"),
            (self.chatgpt_token_stdin, "--chatgpt-token-stdin"),
            (self.chatgpt_account_id.is_some(), "--chatgpt-account-id"),
            (self.aws_sigv4, "--aws-sigv4"),
            (self.aws_profile.is_some(), "--aws-profile"),
            (self.aws_region.is_some(), "--aws-region"),
            (self.aws_service.is_some(), "--aws-service"),
        ];
        match asked.into_iter().find(|(given, _)| *given) {
            Some((_, what)) => Err(RegistrationRefused { what }),
            None => Ok(()),
        }
    }

    /// The flags given that name a registration none is made for, for a warning.
    pub fn ignored(&self) -> impl Iterator<Item = &'static str> {
        [(self.environment_id.is_some(), "--environment-id"), (self.name.is_some(), "--name")]
            .into_iter()
            .filter_map(|(given, flag)| given.then_some(flag))
    }
}
