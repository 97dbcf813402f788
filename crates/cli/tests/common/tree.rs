//! A tree on this machine as a copy must keep it, for comparing a copy with its source.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

/// One entry: its path under the root, its kind (`"file"`, `"dir"`, `"link"`), its mode
/// (0 for a link), its mtime in ms, and its bytes (a link's target; nothing for a directory).
pub type Described = (String, &'static str, u32, i64, Vec<u8>);

/// Each entry under `root`, sorted.
pub fn describe(root: &Path) -> Vec<Described> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let relative = path.strip_prefix(root).unwrap().display().to_string();
            let mtime = meta.mtime() * 1000 + meta.mtime_nsec() / 1_000_000;
            let (kind, mode, body) = if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                ("link", 0, target.into_os_string().into_encoded_bytes())
            } else if meta.is_dir() {
                stack.push(path.clone());
                ("dir", meta.mode() & 0o7777, Vec::new())
            } else {
                ("file", meta.mode() & 0o7777, std::fs::read(&path).unwrap())
            };
            out.push((relative, kind, mode, mtime, body));
        }
    }
    out.sort();
    out
}
