//! What a child is handed at `exec`, shared by every way Tether starts one (`posix_spawn`, a
//! forked child's own exec, the sandbox's inner stage): arguments and environment as the
//! kernel takes them, and the descriptors a process keeps from its children.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;

/// `text` as a NUL-terminated string, refused as `std::process` refuses it (in its words, which
/// the reference's answers carry) when it holds a NUL.
pub fn c_string(text: &OsStr) -> io::Result<CString> {
    CString::new(text.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "nul byte found in provided data"))
}

/// How `std::process::Command` refuses an environment with a NUL in it: the words the
/// reference answers every start with (an argument with a NUL gets [`c_string`]'s).
pub const COMMAND_ENV_NUL: &str = "data provided contains a nul byte";

/// `env` as `KEY=value` strings, in order.
pub fn env_strings(env: &BTreeMap<String, String>) -> io::Result<Vec<CString>> {
    env.iter().map(|(key, value)| c_string(OsStr::new(&format!("{key}={value}")))).collect()
}

/// Pointers to `strings`, ending in a null pointer: the array `exec` and `posix_spawn` take.
/// It points into `strings`, which must outlive it unmoved.
pub fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings.iter().map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect()
}

/// Marks every open descriptor numbered `first` or above close-on-exec, so that no child
/// inherits it while this process keeps using it. `close_range` does it in one call (Linux
/// 5.11); on older kernels each descriptor listed in `/proc/self/fd` is marked in turn.
pub fn close_on_exec_from(first: i32) -> io::Result<()> {
    let first = u32::try_from(first).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a plain system call with integer arguments; it closes nothing.
    let done =
        unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    if done == 0 {
        return Ok(());
    }
    // The listing's own descriptor is among those marked: harmless, it is closed after.
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let fd = entry?.file_name().to_str().and_then(|name| name.parse::<u32>().ok());
        let Some(fd) = fd.filter(|&fd| fd >= first) else { continue };
        // SAFETY: a plain system call on a descriptor number; a closed one fails harmlessly.
        unsafe { libc::fcntl(fd as i32, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// A descriptor inherited without close-on-exec stays usable here and reaches no child.
    #[test]
    fn an_inheritable_descriptor_stays_open_here_and_reaches_no_child() {
        let (read, write) = rustix::pipe::pipe().unwrap();
        let fd = write.as_raw_fd();
        // SAFETY: a plain system call on a descriptor this test owns.
        let flags = |fd| unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_eq!(flags(fd) & libc::FD_CLOEXEC, 0, "made inheritable, as a launcher's is");
        close_on_exec_from(3).unwrap();
        assert_eq!(flags(fd) & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        assert_eq!(rustix::io::write(&write, b"x").unwrap(), 1, "still usable here");
        let check = format!("[ -e /proc/self/fd/{fd} ] && echo inherited || echo closed");
        let output = std::process::Command::new("/bin/sh").args(["-c", &check]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&output.stdout), "closed\n");
        drop(read);
    }
}
