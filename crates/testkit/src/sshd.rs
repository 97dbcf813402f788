//! A local `sshd` of our own: on `127.0.0.1`, with throwaway keys and none of the user's own
//! ssh config, so what runs is OpenSSH itself on this machine. The bench compares Tether with
//! `scp` and `ssh` through it; the tests reach an executor through it as a user reaches one
//! on another machine.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

/// The line a missing `sshd`, `ssh` or `scp` fails with.
const SSHD_MISSING: &str = "sshd is not installed: apt-get install openssh-server (the bench's cp \
                            and wss rows and the tests that reach an executor over ssh run a \
                            local sshd)";

/// Debian's `sshd`: absolute, as `sshd` requires of itself to re-exec per connection.
const SSHD: &str = "/usr/sbin/sshd";

/// Debian's SFTP server. Since OpenSSH 9.0, `scp` speaks SFTP; without the subsystem it fails
/// with "Connection closed".
const SFTP_SERVER: &str = "/usr/lib/openssh/sftp-server";

/// Where Debian's `sshd` insists on its privilege-separation directory.
const PRIVSEP_DIR: &str = "/run/sshd";

/// Starts of `sshd`, each on a port free a moment before: another process may take the port
/// before `sshd` binds it, rarely enough that three starts never all lose that race.
const PORT_ATTEMPTS: usize = 3;

/// Logins tried, [`READY_INTERVAL`] apart, before `sshd` counts as not serving: 5 s, where it
/// serves in a few tens of milliseconds.
const READY_ATTEMPTS: usize = 100;
const READY_INTERVAL: Duration = Duration::from_millis(50);

/// Checks, [`READY_INTERVAL`] apart, that a control master serves before it counts as not
/// serving: 5 s, where it logs in in a few tens of milliseconds.
const MASTER_ATTEMPTS: usize = 100;

/// The longest control path `ssh -M` can listen on: a unix socket's path holds 107 bytes on
/// Linux (`sun_path`, with its closing NUL), and the master first binds the path with `.` and
/// 16 random characters added. Longer, it disables sharing and goes on as a plain login.
const CONTROL_PATH_MAX: usize = 107 - 17;

/// A local `sshd` of our own, on `127.0.0.1` and a free port, with throwaway keys; dropped, it
/// is stopped and its directory removed.
pub struct Sshd {
    dir: PathBuf,
    /// The loopback port it listens on.
    pub port: u16,
    /// The user key `ssh` and `scp` log in with.
    key: PathBuf,
    user: String,
    child: Option<Child>,
}

impl Sshd {
    /// Starts `sshd` and waits until it lets us log in. Fails with [`SSHD_MISSING`] without
    /// `sshd`, `ssh` or `scp`.
    pub fn start() -> anyhow::Result<Self> {
        if !Path::new(SSHD).is_file() || !on_path("ssh") || !on_path("scp") {
            bail!("{SSHD_MISSING}");
        }
        // A directory per server: tests in one process start theirs side by side.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tether-sshd-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let user = current_user()?;
        // From here on, dropping `sshd` removes the directory and stops what was started.
        let mut sshd = Self { key: dir.join("user_key"), dir, port: 0, user, child: None };
        std::fs::create_dir_all(PRIVSEP_DIR)
            .with_context(|| format!("cannot make {PRIVSEP_DIR}, which sshd needs"))?;
        keygen(&sshd.dir.join("host_key"))?;
        keygen(&sshd.key)?;
        std::fs::copy(sshd.key.with_extension("pub"), sshd.dir.join("authorized_keys"))?;
        let mut why = String::new();
        for _ in 0..PORT_ATTEMPTS {
            match sshd.serve_on_a_free_port()? {
                None => return Ok(sshd),
                Some(exited) => why = exited,
            }
        }
        bail!("sshd did not start: {why}")
    }

    /// Starts `sshd` on a port that was free a moment ago; `Some(why)` if it exited (another
    /// process took the port first).
    fn serve_on_a_free_port(&mut self) -> anyhow::Result<Option<String>> {
        self.port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let config = self.dir.join("sshd_config");
        let dir = self.dir.display();
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {dir}/host_key\n\
                 AuthorizedKeysFile {dir}/authorized_keys\nPidFile {dir}/sshd.pid\n\
                 StrictModes no\nUsePAM no\nPermitRootLogin yes\nPasswordAuthentication no\n\
                 Subsystem sftp {SFTP_SERVER}\n",
                port = self.port
            ),
        )?;
        // `-e` logs to stderr, kept in a file (unread, a pipe would fill and stall `sshd`).
        let log = self.dir.join("sshd.log");
        let child = Command::new(SSHD)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("cannot start sshd")?;
        let mut login = Command::new("ssh");
        login.arg("-p").arg(self.port.to_string()).args(self.client_options());
        login.arg(self.destination()).arg("true");
        login.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let child = self.child.insert(child);
        for _ in 0..READY_ATTEMPTS {
            if child.try_wait()?.is_some() {
                self.child = None;
                return Ok(Some(last_line(&std::fs::read(&log)?)));
            }
            if login.status()?.success() {
                return Ok(None);
            }
            std::thread::sleep(READY_INTERVAL);
        }
        bail!("sshd did not let us log in within {:?}", READY_INTERVAL * READY_ATTEMPTS as u32)
    }

    /// The options `ssh` and `scp` share (after the port, which they spell differently): our
    /// key only, no prompt, no host key check, and none of the user's own ssh config, whose
    /// connection sharing or compression would change what is measured.
    pub fn client_options(&self) -> Vec<OsString> {
        let mut options: Vec<OsString> = vec!["-F".into(), "/dev/null".into()];
        options.extend(["-i".into(), self.key.clone().into_os_string()]);
        for option in [
            "BatchMode=yes",
            "StrictHostKeyChecking=no",
            "UserKnownHostsFile=/dev/null",
            "IdentitiesOnly=yes",
        ] {
            options.extend(["-o".into(), option.into()]);
        }
        options
    }

    /// `ssh`'s arguments that log in to this server, before the remote command: the port, the
    /// [`Self::client_options`] and the destination.
    pub fn ssh_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["-p".into(), self.port.to_string().into()];
        args.extend(self.client_options());
        args.push(self.destination().into());
        args
    }

    /// `scp`'s name for `path` on this server.
    pub fn remote(&self, path: &Path) -> String {
        format!("{}:{}", self.destination(), path.display())
    }

    /// `ssh`'s name for this server: `user@127.0.0.1`.
    fn destination(&self) -> String {
        format!("{}@127.0.0.1", self.user)
    }

    /// A control master logged in to this server: one connection that `ssh` commands then
    /// share ([`SshMaster::command`]), as an agent's ssh connection is kept and reused, so
    /// none of them pays for a handshake or a login. Serving when this returns; dropped, it is
    /// stopped. One at a time: each takes the same socket.
    pub fn master(&self) -> anyhow::Result<SshMaster<'_>> {
        let socket = self.dir.join("master.sock");
        anyhow::ensure!(
            socket.as_os_str().len() <= CONTROL_PATH_MAX,
            "the ssh control socket {} is too long a path for a unix socket: set TMPDIR to a \
             shorter directory",
            socket.display()
        );
        // A socket left by a master that died would make `ssh -M` share no connection at all:
        // it says so on stderr and goes on as a plain login.
        let _ = std::fs::remove_file(&socket);
        // `-N`: no command, the connection only; in the foreground (no `-f`), so the child we
        // hold is the master itself and can always be stopped.
        let log = self.dir.join("master.log");
        let child = Command::new("ssh")
            .args(["-M", "-N", "-S"])
            .arg(&socket)
            .arg("-p")
            .arg(self.port.to_string())
            .args(self.client_options())
            .arg(self.destination())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("cannot start the ssh control master")?;
        // From here on, dropping the master stops it.
        let mut master = SshMaster { sshd: self, socket, child };
        for _ in 0..MASTER_ATTEMPTS {
            if master.child.try_wait()?.is_some() {
                bail!("the ssh control master exited: {}", last_line(&std::fs::read(&log)?));
            }
            if master.serving()? {
                return Ok(master);
            }
            std::thread::sleep(READY_INTERVAL);
        }
        bail!(
            "the ssh control master did not serve within {:?}: {}",
            READY_INTERVAL * MASTER_ATTEMPTS as u32,
            last_line(&std::fs::read(&log)?)
        )
    }
}

/// An `ssh` control master of [`Sshd::master`]; dropped, it is told to exit, stopped if it
/// lingers, and its socket removed, so no ssh process outlives it.
pub struct SshMaster<'a> {
    sshd: &'a Sshd,
    socket: PathBuf,
    child: Child,
}

impl SshMaster<'_> {
    /// `ssh -S <socket> user@127.0.0.1 REMOTE_COMMAND`: run over the master's connection, with
    /// no stdin, killed if dropped (a run abandoned at `--timeout-secs`). Options as the
    /// master's, so nothing but the socket differs.
    pub fn command(&self, remote_command: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("ssh");
        command.arg("-S").arg(&self.socket).args(["-o", "ControlMaster=no"]);
        command.arg("-p").arg(self.sshd.port.to_string()).args(self.sshd.client_options());
        command.arg(self.sshd.destination()).arg(remote_command);
        command.stdin(Stdio::null()).kill_on_drop(true);
        command
    }

    /// Whether the master answers on its socket (`ssh -O check`). `ssh` does not fail when it
    /// cannot reach the master: it logs in on a connection of its own instead, handshake and
    /// all, so a run over the master is only what it claims if the master served throughout.
    pub fn serving(&self) -> anyhow::Result<bool> {
        Ok(self.control("check").context("cannot run ssh -O check")?.success())
    }

    /// `ssh -S <socket> -O <request>`, the master's own control commands (without the user's
    /// ssh config, as everything here).
    fn control(&self, request: &str) -> std::io::Result<std::process::ExitStatus> {
        Command::new("ssh")
            .args(["-F", "/dev/null", "-S"])
            .arg(&self.socket)
            .args(["-O", request])
            .arg(self.sshd.destination())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
    }
}

impl Drop for SshMaster<'_> {
    fn drop(&mut self) {
        // Asked first, so it closes its connection to `sshd` as it would for a user; then made
        // sure of, should it not have.
        let _ = self.control("exit");
        stop(&mut self.child);
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            stop(child);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Stops `child` with SIGTERM, then SIGKILL if it is still there two seconds later, and reaps
/// it.
fn stop(child: &mut Child) {
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    for _ in 0..100 {
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Whether `program` is an executable file on `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// The user we log in as: whoever runs the bench or the tests.
fn current_user() -> anyhow::Result<String> {
    let name = Command::new("id")
        .arg("-un")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("USER").ok().filter(|name| !name.is_empty()));
    name.context("cannot tell who the current user is (`id -un`, $USER)")
}

/// A throwaway ed25519 key with no passphrase at `path` (and its public half at `path.pub`).
fn keygen(path: &Path) -> anyhow::Result<()> {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .context("cannot run ssh-keygen")?;
    if !out.status.success() {
        bail!("ssh-keygen failed: {}", last_line(&out.stderr));
    }
    Ok(())
}

/// The last non-blank line of a program's output: where it says why it failed.
pub fn last_line(output: &[u8]) -> String {
    let text = String::from_utf8_lossy(output);
    text.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or("").trim().to_owned()
}
