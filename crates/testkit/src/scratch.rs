//! A private directory per scenario, removed when the scenario ends, and the few ways the
//! scenarios build fixtures in it.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tether_protocol::PathUri;

pub struct Scratch {
    root: PathBuf,
}

impl Scratch {
    /// A new empty directory, unique to this process and call: scenarios run in parallel.
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let unique = NEXT.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir()
            .join(format!("tether-fs-suite-{}-{unique}-{name}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        Self { root: std::fs::canonicalize(root).unwrap() }
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        if relative.is_empty() { self.root.clone() } else { self.root.join(relative) }
    }

    /// The `file:` URI of `relative`, as a client would send it.
    pub fn uri(&self, relative: &str) -> PathUri {
        uri_of(&self.path(relative))
    }

    pub fn file(&self, relative: &str, contents: &[u8]) -> PathBuf {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, contents).unwrap();
        path
    }

    pub fn dir(&self, relative: &str) -> PathBuf {
        let path = self.path(relative);
        std::fs::create_dir_all(&path).unwrap();
        path
    }

    pub fn symlink(&self, target: &str, relative: &str) -> PathBuf {
        let path = self.path(relative);
        std::os::unix::fs::symlink(target, &path).unwrap();
        path
    }

    pub fn fifo(&self, relative: &str) -> PathBuf {
        let path = self.path(relative);
        let mode = rustix::fs::Mode::from_raw_mode(0o644);
        rustix::fs::mknodat(rustix::fs::CWD, &path, rustix::fs::FileType::Fifo, mode, 0).unwrap();
        path
    }

    /// The contents of the file at `relative`.
    pub fn read(&self, relative: &str) -> Vec<u8> {
        std::fs::read(self.path(relative)).unwrap()
    }

    /// Whether anything is at `relative`, a dangling link included.
    pub fn exists(&self, relative: &str) -> bool {
        std::fs::symlink_metadata(self.path(relative)).is_ok()
    }

    /// A file whose name is not UTF-8 (`bad-\xff`), in the directory `dir`.
    pub fn non_utf8_file(&self, dir: &str) -> PathBuf {
        let mut name = b"bad-".to_vec();
        name.push(0xff);
        let path = self.path(dir).join(std::ffi::OsStr::from_bytes(&name));
        std::fs::write(&path, b"x").unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

pub fn uri_of(path: &Path) -> PathUri {
    PathUri::from_path(path).unwrap()
}
