//! `tether shell`: the executor user's login shell in their home, on a terminal when this is
//! one, as `ssh host` gives it. It is `tether exec` with no command, under the name a person
//! reaches for, taking only what chooses and reaches the executor: a shell needs no command,
//! no environment of ours and no detaching.

use clap::Args;

use crate::exec::ExecArgs;

const SHELL_HELP: &str = "\
Examples:
  tether shell --url ws://127.0.0.1:4500                                as ssh host
  tether shell build                                                    a named executor
  echo 'make test' | tether shell --url ws://127.0.0.1:4500             no terminal: runs it

The same as tether exec with no command: the executor user's login shell, in their home, on a
terminal when stdin is one (the local terminal raw meanwhile, its size followed), reading
stdin without one. A dropped connection is resumed as tether exec resumes it.

Exit codes: the shell's own; 128+N if signal N killed it; 255 tether shell itself failed, or
its command line is wrong (one line on stderr says why and what to do).";

#[derive(Args)]
#[command(after_help = SHELL_HELP)]
pub struct ShellArgs {
    /// The executor: `ws://HOST:PORT`, `wss://HOST:PORT`, or the name of an executor in the
    /// config file (`tether executors` lists them).
    #[arg(long = "url", env = "TETHER_URL", value_name = "URL|NAME")]
    url_flag: Option<String>,

    /// The executor, as `--url` names it, given on its own as ssh takes its host (`tether
    /// shell build`); it wins over `--url` and `TETHER_URL`.
    #[arg(value_name = "URL|NAME")]
    url: Option<String>,

    #[command(flatten)]
    connection: crate::exec::ConnectionFlags,
}

impl ShellArgs {
    /// The `tether exec` that this is, or what is missing for it.
    pub fn into_exec(self) -> anyhow::Result<ExecArgs> {
        let Some(url) = self.url.or(self.url_flag) else {
            anyhow::bail!(
                "which executor? name it (tether shell NAME), or give --url (or TETHER_URL)"
            );
        };
        Ok(ExecArgs::login_shell(url, self.connection))
    }
}

/// `tether shell`: the login shell `args` names; returns the exit code to exit with.
pub async fn shell(args: ShellArgs) -> anyhow::Result<i32> {
    match args.into_exec() {
        Ok(args) => crate::exec::exec_as("tether shell", args).await,
        Err(error) => {
            eprintln!("tether shell: {}", crate::report::one_line(&error));
            Ok(crate::exec::TETHER_FAILURE)
        }
    }
}
