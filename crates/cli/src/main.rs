//! `tether`: the command-line entry point. It parses flags and wires the libraries together;
//! no engine or protocol logic lives here.

mod cp;
mod credentials;
mod exec;
mod executors;
mod guardian;
mod known_fingerprints;
mod mcp;
mod port_forward;
mod report;
mod serve;
mod sessions;
mod shell;
mod start_failure;
mod stdout;
mod token;
mod trust;

use std::time::Duration;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// The system allocator, with huge pages asked for behind big buffers (see
/// `tether_engine::allocator`).
#[global_allocator]
static ALLOCATOR: tether_engine::allocator::HugePageHint = tether_engine::allocator::HugePageHint;

#[derive(Parser)]
#[command(name = "tether", version, about = "Remote execution server for AI coding agents")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the exec-server (wire-compatible with `codex exec-server`).
    // Boxed: the serve flags outweigh every other command's.
    #[command(alias = "exec-server")]
    Serve(Box<serve::ServeArgs>),
    /// Run a command on an exec-server, streaming its output here and exiting with its code.
    Exec(exec::ExecArgs),
    /// Open a login shell on an exec-server, in the user's home, on a terminal (as `ssh host`).
    Shell(shell::ShellArgs),
    /// Use an MCP server placed on an exec-server (or here): list its tools, call one.
    Mcp(mcp::McpArgs),
    /// Copy files and directory trees to or from an executor (`:/path`, `NAME:/path`).
    Cp(cp::CpArgs),
    /// Forward a local port to a port on the executor's loopback, as `ssh -L` does.
    PortForward(port_forward::PortForwardArgs),
    /// List your sessions on an executor (detached commands among them).
    Sessions(sessions::SessionsArgs),
    /// End one of your detached sessions on an executor, killing its processes.
    Kill(sessions::KillArgs),
    /// List the named executors of the config file (`--url NAME` uses one).
    Executors {
        /// Print a JSON array of `{"name", "url"}` for a script.
        #[arg(long)]
        json: bool,
    },
    /// Mint or inspect the signed bearer tokens of `serve --ws-auth signed-bearer-token`.
    Token(token::TokenArgs),
    /// Print a completion script for a shell, e.g. `tether completions bash > ~/.local/share/bash-completion/completions/tether`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // One line, the whole chain of causes: what failed, why, and (where the message says
        // it) what to do.
        Err(error) if stdout::is_closed(&error) => {
            std::process::ExitCode::from(stdout::CLOSED_STDOUT_EXIT as u8)
        }
        Err(error) => {
            eprintln!("tether: {}", report::one_line(&error));
            // A command line Tether does not take exits as clap's refusals do.
            match error.downcast_ref::<serve::RegistrationRefused>() {
                Some(_) => std::process::ExitCode::from(2),
                None => std::process::ExitCode::FAILURE,
            }
        }
    }
}

/// A command line clap refuses exits with the command's own failure code, so that it cannot
/// be taken for an outcome the command documents: `tether exec`'s 255 (2 could be the remote
/// command's own), `tether mcp`'s and `tether cp`'s 1 (`mcp`'s 2 is "the tool reported an
/// error"); clap's 2 elsewhere. Help and the version go to stdout and exit 0, as clap's do.
fn parse() -> Cli {
    let error = match Cli::try_parse() {
        Ok(cli) => return cli,
        Err(error) => error,
    };
    use clap::error::ErrorKind;
    if matches!(error.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        error.exit();
    }
    let code = match std::env::args().nth(1).as_deref() {
        Some("exec" | "shell") => exec::TETHER_FAILURE,
        Some("mcp" | "cp" | "sessions" | "kill" | "port-forward") => 1,
        _ => 2,
    };
    let _ = error.print();
    std::process::exit(code);
}

fn run() -> anyhow::Result<()> {
    // Inside a sandbox this binary is the inner stage or the file helper, not the CLI.
    tether_engine::helper::run_if_helper();
    tether_engine::allocator::tune_for_streaming();
    let cli = parse();
    match &cli.command {
        // Refused before anything starts; then, before any thread exists: see `guardian`.
        Command::Serve(args) => {
            args.refuse_registration()?;
            guardian::split()
        }
        _ => tether_engine::allocator::one_heap(),
    }
    // Logs go to stderr: stdout carries the bound URL, and on stdio the protocol itself.
    let filter = std::env::var("TETHER_LOG").ok();
    let misread = filter
        .as_deref()
        .is_some_and(|f| matches!(f.trim(), "json" | "text") || EnvFilter::try_new(f).is_err());
    let json = std::env::var("TETHER_LOG_FORMAT").is_ok_and(|format| format == "json");
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("TETHER_LOG").ok().filter(|_| !misread).unwrap_or_else(|| {
                // A command's own output must not drown in the client's progress reports.
                // rmcp reports at error level what `tether mcp` then says once, in its own words.
                EnvFilter::new(match cli.command {
                    Command::Serve(_) => "info",
                    // What goes wrong reaches the person once, as the command's own one-line error;
                    // a reconnect that works needs no word. `TETHER_LOG=info` shows the client's.
                    Command::Exec(_) | Command::Shell(_) => "error",
                    Command::Mcp(_) => "error,rmcp=off",
                    Command::Cp(_)
                    | Command::PortForward(_)
                    | Command::Sessions(_)
                    | Command::Kill(_)
                    | Command::Executors { .. }
                    | Command::Token(_)
                    | Command::Completions { .. } => "error",
                })
            }),
        )
        .with_writer(std::io::stderr)
        // A log line that cannot be written (stderr a pipe nobody reads any more) is dropped.
        // Reporting it would go to the same stderr with `eprintln!`, which panics there — and
        // a panic in the task that logged took the shutdown with it, leaving a server that no
        // signal stops.
        .log_internal_errors(false)
        // Colour only for a person at a terminal; a log file or a collector gets plain text.
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none()
                && !json,
        );
    // One JSON object per line (`TETHER_LOG_FORMAT=json`), for a collector.
    match json {
        true => logs.json().init(),
        false => logs.init(),
    }
    // Said whatever the filter lets through: a person who asked for logs must not get silence.
    if misread {
        eprintln!(
            "tether: TETHER_LOG takes a filter (info, debug, tether=debug, …), not {:?}; the \
             default is used. For JSON lines, set TETHER_LOG_FORMAT=json",
            filter.unwrap_or_default()
        );
    }
    match &cli.command {
        Command::Completions { shell } => {
            // Made whole first: clap's generator panics on a stdout that fails.
            let mut command = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut command, "tether", &mut script);
            return stdout::write(&script).map_err(Into::into);
        }
        Command::Executors { json } => return executors::list(*json),
        // Files and arithmetic only: no runtime to start.
        Command::Token(args) => return token::token(args),
        _ => {}
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = match cli.command {
        Command::Serve(args) => runtime.block_on(serve::serve(*args)),
        Command::Exec(args) => match runtime.block_on(exec::exec(args)) {
            Ok(code) => {
                runtime.shutdown_timeout(Duration::from_millis(100));
                std::process::exit(code);
            }
            Err(error) => Err(error),
        },
        Command::Shell(args) => match runtime.block_on(shell::shell(args)) {
            Ok(code) => {
                runtime.shutdown_timeout(Duration::from_millis(100));
                std::process::exit(code);
            }
            Err(error) => Err(error),
        },
        Command::Mcp(args) => {
            let code = runtime.block_on(mcp::mcp(args));
            runtime.shutdown_timeout(Duration::from_millis(100));
            std::process::exit(code);
        }
        Command::Cp(args) => {
            let code = runtime.block_on(cp::cp(args));
            runtime.shutdown_timeout(Duration::from_millis(100));
            std::process::exit(code);
        }
        // Their failures are one line, then exit 1 (the tail of `main`).
        Command::PortForward(args) => runtime.block_on(port_forward::port_forward(args)),
        Command::Sessions(args) => runtime.block_on(sessions::sessions(args)),
        Command::Kill(args) => runtime.block_on(sessions::kill(args)),
        Command::Executors { .. } | Command::Token(_) | Command::Completions { .. } => {
            unreachable!("handled above")
        }
    };
    // A stdio server stopped by a signal still has a thread blocked reading stdin; do not wait
    // for it.
    runtime.shutdown_timeout(Duration::from_millis(100));
    result
}
