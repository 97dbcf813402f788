//! What this executor is, as `environment/info` (and the `initialize` result) reports it.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tether_protocol::PathUri;
use tether_protocol::session::{Capabilities, EnvironmentInfo, ShellInfo};

/// The Codex exec-server release whose wire protocol Tether speaks.
pub const COMPATIBLE_CODEX_VERSION: &str = "0.171.0";

/// The `executorVersion` Tether reports: the compatible Codex version, with Tether's own version
/// as semver build metadata, so a version comparison sees a 0.171 executor and a person sees
/// which server it really is.
pub fn executor_version() -> String {
    format!("{COMPATIBLE_CODEX_VERSION}+tether.{}", env!("CARGO_PKG_VERSION"))
}

/// Describes this executor. `capabilities` are the server's to declare: it knows which optional
/// methods it serves.
pub fn environment_info(capabilities: Capabilities) -> EnvironmentInfo {
    let cwd = std::env::current_dir().ok();
    let home = home_dir();
    let temporary_directories = std::env::var_os("TMPDIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .map(|dir| match &cwd {
            Some(cwd) if dir.is_relative() => cwd.join(dir),
            _ => dir,
        })
        .into_iter()
        .filter_map(|dir| PathUri::from_path(&dir))
        .collect();
    EnvironmentInfo {
        shell: login_shell(),
        executor_version: Some(executor_version()),
        provider_id: Some(provider_id()),
        cwd: cwd.as_deref().and_then(PathUri::from_path),
        user_home_dir: home.as_deref().and_then(PathUri::from_path),
        platform_os: Some(std::env::consts::OS.to_owned()),
        // Tether installs no helper programs of its own to put in front of `PATH`.
        prepend_path_dirs: None,
        temporary_directories: Some(temporary_directories),
        temp_dir: PathUri::from_path(&std::env::temp_dir()),
        capabilities: Some(capabilities),
    }
}

/// The executor user's home: `$HOME` when it is absolute, else the account's.
pub fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| login_account().map(|a| a.home))
}

/// A stable id for "this build of this executor on this kind of machine": clients may cache
/// what they learned about an executor under it.
fn provider_id() -> String {
    let identity = format!(
        "tether:{}:{}-{}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        std::env::consts::OS
    );
    format!("sha256:{}", hex::encode(Sha256::digest(identity.as_bytes())))
}

/// The user's login shell from the account database, as the reference detects it (not
/// `$SHELL`, which a service manager may not set), falling back to bash, zsh, then `/bin/sh`.
pub fn login_shell() -> ShellInfo {
    let known = ["zsh", "bash", "sh"];
    let from_account = login_account()
        .map(|a| a.shell)
        .filter(|shell| shell.is_file())
        .filter(|shell| shell_name(shell).is_some_and(|n| known.contains(&n)));
    let path = from_account
        .or_else(|| find_on_path("bash"))
        .or_else(|| find_on_path("zsh"))
        .unwrap_or_else(|| PathBuf::from("/bin/sh"));
    ShellInfo {
        name: shell_name(&path).unwrap_or("sh").to_owned(),
        path: path.to_string_lossy().into_owned(),
    }
}

fn shell_name(path: &Path) -> Option<&str> {
    path.file_name()?.to_str()
}

/// Looks `program` up on the executor's `PATH`.
pub fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    find_in(program, &path)
}

/// Looks `program` up in a `PATH`-style list of directories.
pub fn find_in(program: &str, search_path: &std::ffi::OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(search_path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

struct Account {
    home: PathBuf,
    shell: PathBuf,
}

/// This process's entry in `/etc/passwd`.
fn login_account() -> Option<Account> {
    let uid = rustix::process::getuid().as_raw().to_string();
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 7 && fields[2] == uid)
            .then(|| Account { home: PathBuf::from(fields[5]), shell: PathBuf::from(fields[6]) })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_this_machine() {
        let info = environment_info(Capabilities::default());
        assert!(Path::new(&info.shell.path).is_file(), "{:?}", info.shell);
        assert_eq!(info.platform_os.as_deref(), Some(std::env::consts::OS));
        assert!(info.executor_version.unwrap().starts_with("0.171.0+tether."));
        assert!(info.provider_id.unwrap().starts_with("sha256:"));
        assert!(info.cwd.unwrap().as_str().starts_with("file:///"));
    }
}
