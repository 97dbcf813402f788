//! `fs/getMetadata`: what a path is, its size and its times.
//!
//! The two modes report times as the reference does, which is not the same in both: following
//! links, it has no creation time (`createdAtMs` is always 0) and clamps times before 1970 to
//! 0; not following them, it reports the birth time where the filesystem keeps one and signed
//! times before 1970. Clients compare these values between calls, so they must not change
//! meaning between the reference and Tether.
//!
//! The permission bits are always read (they come with the same `stat`); the caller keeps
//! them only for a request that asked for them (`includeMode`).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fs::{FileType, Statx, StatxFlags, StatxTimestamp};
use tether_protocol::fs::FsGetMetadataResponse;

use super::no_follow;

/// The refusal when `followSymlinks: false` meets a link as the path's last component.
pub(crate) const CONTAINS_SYMLINK: &str = "path contains a symbolic link";

/// What `includeMode` reports of `st_mode`, and what `fs/setMetadata` sets: the permission
/// bits (with setuid, setgid and sticky), not the file type.
pub(crate) const PERMISSION_BITS: u32 = 0o7777;

pub(crate) fn metadata(path: &Path, follow_symlinks: bool) -> io::Result<FsGetMetadataResponse> {
    if follow_symlinks { followed(path) } else { not_followed(path) }
}

/// Type and size of the link's target, `isSymlink` of the path itself. A dangling link is not
/// found, like the target it names.
pub(crate) fn followed(path: &Path) -> io::Result<FsGetMetadataResponse> {
    let own = std::fs::symlink_metadata(path)?;
    let is_symlink = own.file_type().is_symlink();
    let target = if is_symlink { std::fs::metadata(path)? } else { own };
    Ok(FsGetMetadataResponse {
        is_directory: target.is_dir(),
        is_file: target.is_file(),
        is_symlink,
        size: target.len(),
        created_at_ms: 0,
        modified_at_ms: target.modified().map_or(0, unix_ms_from_1970),
        mode: Some(target.mode() & PERMISSION_BITS),
    })
}

/// The path's own metadata; a link anywhere in it is refused (as the last component: `path
/// contains a symbolic link`; before it: `Not a directory`).
fn not_followed(path: &Path) -> io::Result<FsGetMetadataResponse> {
    let stat = no_follow::parent_of(path)?.stat()?;
    let file_type = no_follow::file_type(&stat);
    if file_type == FileType::Symlink {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, CONTAINS_SYMLINK));
    }
    Ok(of_statx(&stat, false))
}

/// What `statx` says of a file that is not a link (each mode answers a link in its own way),
/// with the times of the mode asked for: following links, no creation time and times before
/// 1970 as 0; not following them, the birth time where there is one and signed times.
pub(crate) fn of_statx(stat: &Statx, follow_symlinks: bool) -> FsGetMetadataResponse {
    let file_type = no_follow::file_type(stat);
    let has_birth_time = StatxFlags::from_bits_retain(stat.stx_mask).contains(StatxFlags::BTIME);
    let (created_at_ms, modified_at_ms) = match follow_symlinks {
        true => (0, unix_ms(&stat.stx_mtime).max(0)),
        false if has_birth_time => (unix_ms(&stat.stx_btime), unix_ms(&stat.stx_mtime)),
        false => (0, unix_ms(&stat.stx_mtime)),
    };
    FsGetMetadataResponse {
        is_directory: file_type == FileType::Directory,
        is_file: file_type == FileType::RegularFile,
        is_symlink: false,
        size: stat.stx_size,
        created_at_ms,
        modified_at_ms,
        mode: Some(u32::from(stat.stx_mode) & PERMISSION_BITS),
    }
}

/// Milliseconds since 1970, 0 for earlier times.
fn unix_ms_from_1970(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
}

/// Signed milliseconds since 1970, rounded toward 1970 as the reference rounds them.
fn unix_ms(time: &StatxTimestamp) -> i64 {
    unix_ms_of(time.tv_sec, time.tv_nsec)
}

pub(crate) fn unix_ms_of(seconds: i64, nanos: u32) -> i64 {
    let nanos = i128::from(seconds) * 1_000_000_000 + i128::from(nanos);
    (nanos / 1_000_000) as i64
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn times_before_1970_are_zero_when_following_and_signed_when_not() {
        assert_eq!(unix_ms_from_1970(UNIX_EPOCH - Duration::from_millis(1_234)), 0);
        assert_eq!(unix_ms_from_1970(UNIX_EPOCH + Duration::from_millis(1_234)), 1_234);
        // 1960-01-01T00:00:00.1235Z is -315,619,199.8765 s: truncated toward zero, as the
        // reference truncates it.
        assert_eq!(unix_ms_of(-315_619_200, 123_500_000), -315_619_199_876);
        assert_eq!(unix_ms_of(1, 999_999_999), 1_999);
    }
}
