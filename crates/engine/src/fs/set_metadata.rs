//! `fs/setMetadata`: a path's permission bits and modification time, as a copy keeps them.
//!
//! Both act on the path itself. The time is set with `utimensat(AT_SYMLINK_NOFOLLOW)`, so a
//! link gets its own time and its target is untouched; a link has no mode of its own (Linux
//! ignores it), and `chmod` would change its target's, so a mode for a link is refused.

use std::io;
use std::path::Path;

use rustix::fs::{AtFlags, CWD, Mode, Timespec, Timestamps, UTIME_OMIT};

use super::metadata::PERMISSION_BITS;

/// Sets what is given of `mode` and `modified_at_ms` (Unix milliseconds) on `path`; nothing
/// given still requires the path to exist.
///
/// The link check and the `chmod` are two calls: a path swapped for a link between them has
/// its target's mode set, which the caller could have asked for by naming the target (and,
/// under a sandbox, only inside it).
pub(crate) fn set(path: &Path, mode: Option<u32>, modified_at_ms: Option<i64>) -> io::Result<()> {
    let own = std::fs::symlink_metadata(path)?;
    if let Some(mode) = mode {
        if own.file_type().is_symlink() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "`{}` is a symbolic link, which has no mode of its own: set the mode of its \
                     target instead",
                    path.display()
                ),
            ));
        }
        rustix::fs::chmodat(
            CWD,
            path,
            Mode::from_raw_mode(mode & PERMISSION_BITS),
            AtFlags::empty(),
        )?;
    }
    if let Some(ms) = modified_at_ms {
        let times = Timestamps {
            last_access: Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT },
            last_modification: timespec_of_ms(ms),
        };
        rustix::fs::utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW)?;
    }
    Ok(())
}

/// Unix milliseconds as a time, negative ones before 1970 included.
pub(super) fn timespec_of_ms(ms: i64) -> Timespec {
    Timespec { tv_sec: ms.div_euclid(1000), tv_nsec: ms.rem_euclid(1000) * 1_000_000 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_before_1970_round_down_to_a_whole_second_and_forward_nanoseconds() {
        let at = |ms| {
            let time = timespec_of_ms(ms);
            (time.tv_sec, time.tv_nsec)
        };
        assert_eq!(at(1_234), (1, 234_000_000));
        assert_eq!(at(0), (0, 0));
        assert_eq!(at(-1_234), (-2, 766_000_000));
        assert_eq!(at(-1_000), (-1, 0));
    }
}
