//! The bearer tokens client commands present (to an exec-server started with `--ws-auth`, to
//! an MCP server over HTTP): from a file, or from the environment — never a command-line
//! argument, which any user on the machine can read in `ps`.

use std::path::Path;

/// The environment variable holding the exec-server token.
pub const TOKEN_VARIABLE: &str = "TETHER_TOKEN";

/// The token from `file` (trimmed), else from `TETHER_TOKEN`, else none.
pub fn exec_server_token(file: Option<&Path>) -> anyhow::Result<Option<String>> {
    token(file, TOKEN_VARIABLE)
}

/// A bearer token from `file` (trimmed; an empty one is an error), else from the environment
/// variable `variable`, else none.
pub fn token(file: Option<&Path>, variable: &str) -> anyhow::Result<Option<String>> {
    if let Some(file) = file {
        let token = std::fs::read_to_string(file).map_err(|error| {
            anyhow::anyhow!(
                "cannot read the token file {}: {error}; give a file this user can read, or set \
                 {variable} instead",
                file.display()
            )
        })?;
        let token = token.trim();
        anyhow::ensure!(
            !token.is_empty(),
            "the token file {} is empty; write the token into it, or set {variable} instead",
            file.display()
        );
        return Ok(Some(token.to_owned()));
    }
    Ok(std::env::var(variable).ok().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()))
}
