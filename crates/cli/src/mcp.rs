//! `tether mcp`: talk to an MCP server placed on an executor (or here, with `--local`) — list
//! its tools, or call one and print the result. For people trying a server out, and for
//! scripts.
//!
//! Exit codes: 0 when the call succeeded, 2 when the tool itself reported an error, 1 when
//! the server could not be reached or refused.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use tether_client::Environment;
use tether_mcp::rmcp::model::{CallToolResult, JsonObject};
use tether_mcp::{
    HttpServerConfig, McpClient, McpClientOptions, McpError, McpNotification, McpServerConfig,
    StdioServerCommand,
};
use tether_protocol::process::SpawnFailureKind;

/// Where the bearer token for `--http` comes from (never a flag, which `ps` would show).
const TOKEN_VARIABLE: &str = "TETHER_MCP_TOKEN";

const MCP_HELP: &str = "\
Examples:
  tether mcp --url ws://127.0.0.1:4500 --stdio 'npx -y @modelcontextprotocol/server-everything' tools
  tether mcp --url ws://127.0.0.1:4500 --stdio 'npx -y @modelcontextprotocol/server-everything' \\
      call get-sum --args '{\"a\": 2, \"b\": 3}'
  tether mcp --local --http http://127.0.0.1:3000/mcp tools

Exit codes: 0 the call succeeded; 2 the tool reported an error; 1 the MCP server could not be
started, reached or authorized, or the command line is wrong (one line on stderr says why).

Tokens: the exec-server's from --token-file or TETHER_TOKEN; an --http MCP server's from
--http-token-file or TETHER_MCP_TOKEN. Never from the command line, which `ps` shows.";

#[derive(Args)]
#[command(subcommand_value_name = "ACTION", subcommand_help_heading = "Actions", after_help = MCP_HELP)]
pub struct McpArgs {
    /// The exec-server the MCP server is placed on: `ws://HOST:PORT`, `wss://HOST:PORT`, or a
    /// named executor (`tether executors`).
    #[arg(
        long,
        env = "TETHER_URL",
        value_name = "URL|NAME",
        required_unless_present = "local",
        conflicts_with = "local"
    )]
    url: Option<String>,

    /// Place the MCP server here instead of on an exec-server.
    #[arg(long)]
    local: bool,

    /// Read the exec-server's bearer token from this file (default: the TETHER_TOKEN
    /// environment variable), for a server started with `--ws-auth` — as `tether exec`.
    #[arg(long, alias = "exec-server-token-file", value_name = "FILE", requires = "url")]
    token_file: Option<PathBuf>,

    /// For a `wss://` exec-server: trust only this CA certificate (PEM), or the server's own.
    #[arg(long, value_name = "PEM", env = "TETHER_TLS_CA_FILE", requires = "url")]
    tls_ca_file: Option<PathBuf>,

    /// For a `wss://` exec-server: trust exactly the certificate with this fingerprint.
    #[arg(long, value_name = "SHA256:HEX", env = "TETHER_TLS_FINGERPRINT", requires = "url")]
    tls_fingerprint: Option<tether_client::TlsFingerprint>,

    /// For a `wss://` exec-server: a certificate not yet known for it is remembered and
    /// trusted without asking (ssh's accept-new); a changed one is still refused.
    #[arg(long, requires = "url")]
    accept_new_fingerprint: bool,

    /// Start a stdio MCP server with this command line (words split as a shell would, without
    /// expansions), e.g. `--stdio 'npx -y @modelcontextprotocol/server-everything'`.
    #[arg(
        long,
        value_name = "COMMAND_LINE",
        required_unless_present = "http",
        conflicts_with = "http"
    )]
    stdio: Option<String>,

    /// Reach a Streamable HTTP MCP server at this URL. Its bearer token is read from the
    /// environment variable TETHER_MCP_TOKEN, or from --http-token-file.
    #[arg(long, value_name = "URL")]
    http: Option<String>,

    /// Read the bearer token for the `--http` MCP server from this file.
    #[arg(long, value_name = "FILE", requires = "http", conflicts_with = "stdio")]
    http_token_file: Option<PathBuf>,

    /// Send this header with every HTTP request (repeatable).
    #[arg(long = "header", value_name = "NAME=VALUE", requires = "http", conflicts_with = "stdio")]
    headers: Vec<String>,

    /// Working directory of a stdio server (on the executor). Default: `/`, or here the
    /// current directory.
    #[arg(short = 'w', long, value_name = "DIR", requires = "stdio", conflicts_with = "http")]
    cwd: Option<PathBuf>,

    /// Set an environment variable for a stdio server (repeatable); the server gets the
    /// executor's core variables (PATH, HOME, …) and these, nothing else.
    #[arg(
        short,
        long = "env",
        value_name = "NAME=VALUE",
        requires = "stdio",
        conflicts_with = "http"
    )]
    env: Vec<String>,

    /// Print JSON (the tool list, or the whole call result) instead of text.
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    action: McpAction,
}

#[derive(Subcommand)]
enum McpAction {
    /// List the server's tools.
    Tools,
    /// Call a tool and print its result; progress and log messages go to stderr.
    Call {
        /// The tool's name.
        tool: String,
        /// Its arguments, a JSON object.
        #[arg(long, value_name = "JSON", default_value = "{}")]
        args: String,
    },
}

/// Runs the action; returns the exit code.
pub async fn mcp(args: McpArgs) -> i32 {
    match run(args).await {
        Ok(code) => code,
        Err(error) if crate::stdout::is_closed(&error) => crate::stdout::CLOSED_STDOUT_EXIT,
        Err(error) => {
            eprintln!("tether mcp: {}", crate::report::one_line(&error));
            1
        }
    }
}

async fn run(args: McpArgs) -> anyhow::Result<i32> {
    // Checked before anything is started.
    let arguments = match &args.action {
        McpAction::Call { args, .. } => Some(parse_arguments(args)?),
        McpAction::Tools => None,
    };
    let server = server_config(&args)?;
    let environment = match &args.url {
        Some(url) => {
            let executor = crate::executors::resolve(url)?.with_flags(
                args.token_file.clone(),
                args.tls_ca_file.clone(),
                args.tls_fingerprint,
                args.accept_new_fingerprint,
            );
            let options = executor.client_options("tether-mcp")?;
            Environment::remote(crate::report::connect(&executor, options).await?)
        }
        None => Environment::local(),
    };
    let client = McpClient::connect(&environment, &server, McpClientOptions::default()).await;
    // Where the MCP server runs, for what to do about one that cannot be started or reached.
    let place = if args.url.is_some() { "the executor" } else { "this machine" };
    let client = match client {
        Err(error @ McpError::Unauthorized { .. }) => {
            bail!("{error}; set {TOKEN_VARIABLE}, or pass --http-token-file FILE")
        }
        Err(error @ McpError::Launch { spawn_failure, .. }) => match spawn_failure {
            Some(SpawnFailureKind::SpawnPermissionDenied) => {
                bail!("{error}; make it executable on {place}, or name the program that runs it")
            }
            Some(SpawnFailureKind::SpawnNotFound) => {
                bail!("{error}; install it on {place}, or give its full path there")
            }
            _ => bail!("{error}; check that {place} can run it"),
        },
        Err(error @ McpError::Transport { .. }) if args.http.is_some() => {
            let url = args.http.as_deref().unwrap_or_default();
            // Without its query, which may hold a key.
            let url = url.split(['?', '#']).next().unwrap_or_default();
            bail!("{error}; check that it serves {url} and that {place} can reach it")
        }
        client => client?,
    };
    let code = match args.action {
        McpAction::Tools => {
            let tools = client.list_tools().await?;
            if args.json {
                crate::stdout::line(serde_json::to_string_pretty(&tools)?)?;
            } else {
                for tool in tools {
                    let description = tool.description.as_deref().unwrap_or_default();
                    let summary = description.lines().next().unwrap_or_default();
                    crate::stdout::line(format_args!("{}\t{summary}", tool.name))?;
                }
            }
            0
        }
        McpAction::Call { tool, .. } => {
            let mut notifications = client.subscribe();
            let call = client.call_tool(&tool, arguments);
            tokio::pin!(call);
            let result = loop {
                tokio::select! {
                    result = &mut call => break result,
                    Ok(notification) = notifications.recv() => report(&notification),
                }
            };
            // What came before the answer is published before it: report all of it.
            while let Ok(notification) = notifications.try_recv() {
                report(&notification);
            }
            let result = result.with_context(|| format!("calling {tool}"))?;
            print_result(&result, args.json)?;
            if result.is_error == Some(true) { 2 } else { 0 }
        }
    };
    client.close().await;
    Ok(code)
}

fn server_config(args: &McpArgs) -> anyhow::Result<McpServerConfig> {
    if let Some(command) = &args.stdio {
        let mut words = split_words(command)?.into_iter();
        let program = words.next().context("--stdio needs a command")?;
        let cwd = match (&args.cwd, args.local) {
            (Some(cwd), _) => cwd.clone(),
            (None, true) => std::env::current_dir()?,
            (None, false) => PathBuf::from("/"),
        };
        let mut env = BTreeMap::new();
        for pair in &args.env {
            let (name, value) = pair.split_once('=').context("--env takes NAME=VALUE")?;
            env.insert(name.to_owned(), value.to_owned());
        }
        return Ok(McpServerConfig::Stdio(StdioServerCommand {
            program,
            args: words.collect(),
            env,
            cwd,
        }));
    }
    let url = args.http.clone().context("give --stdio or --http")?;
    let bearer_token = crate::credentials::token(args.http_token_file.as_deref(), TOKEN_VARIABLE)?;
    let headers = args
        .headers
        .iter()
        .map(|pair| {
            let (name, value) = pair.split_once('=').context("--header takes NAME=VALUE")?;
            Ok((name.trim().to_owned(), value.to_owned()))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(McpServerConfig::Http(HttpServerConfig { url, bearer_token, headers }))
}

fn parse_arguments(text: &str) -> anyhow::Result<JsonObject> {
    match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(object)) => Ok(object),
        Ok(_) => bail!("--args must be a JSON object, like '{{\"a\": 1}}'"),
        Err(error) => bail!("--args is not JSON: {error}"),
    }
}

fn report(notification: &McpNotification) {
    match notification {
        McpNotification::Progress(progress) => match progress.total {
            Some(total) => eprintln!("[progress] {}/{total}", progress.progress),
            None => eprintln!("[progress] {}", progress.progress),
        },
        #[allow(deprecated)]
        McpNotification::Log(log) => {
            let text = log.data.as_str().map_or_else(|| log.data.to_string(), str::to_owned);
            eprintln!("[log {:?}] {text}", log.level);
        }
        _ => {}
    }
}

fn print_result(result: &CallToolResult, json: bool) -> anyhow::Result<()> {
    if json {
        crate::stdout::line(serde_json::to_string_pretty(result)?)?;
        return Ok(());
    }
    for content in &result.content {
        match content.as_text() {
            Some(text) => crate::stdout::line(&text.text)?,
            None => crate::stdout::line(serde_json::to_string(content)?)?,
        }
    }
    if let Some(structured) = &result.structured_content
        && result.content.is_empty()
    {
        crate::stdout::line(structured)?;
    }
    Ok(())
}

/// Splits a command line into words as a POSIX shell would, for quotes and backslashes only:
/// no variables, globs or operators.
fn split_words(line: &str) -> anyhow::Result<Vec<String>> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => words.extend(word.take()),
            '\'' => {
                let word = word.get_or_insert_default();
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => bail!("unterminated ' in --stdio"),
                    }
                }
            }
            '"' => {
                let word = word.get_or_insert_default();
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => bail!("unterminated \" in --stdio"),
                        },
                        Some(c) => word.push(c),
                        None => bail!("unterminated \" in --stdio"),
                    }
                }
            }
            '\\' => {
                let next = chars.next().context("--stdio ends with a backslash")?;
                word.get_or_insert_default().push(next);
            }
            c => word.get_or_insert_default().push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::split_words;

    #[test]
    fn words_split_as_a_shell_would() {
        let words = split_words(r#"node  'a b' "c \"d\"" e\ f '' g"#).unwrap();
        assert_eq!(words, ["node", "a b", "c \"d\"", "e f", "", "g"]);
        assert!(split_words("node 'open").is_err());
    }
}
