//! The tree copy scenarios, written against two [`FileSystem`]s — the side copied from and the
//! side copied to — so that one copier ([`tether_tree_copy::TreeCopy`]) is held to the same
//! behaviour in every pairing: here to an executor, an executor to here, one executor to
//! another, and here to here.
//!
//! Every side is this machine (a server under test runs here), so each scenario makes its
//! source and destination in scratch directories with `std::fs` (setup), copies through the
//! sides (exercise), and checks the files with `std::fs` (assert). Refusals are checked by
//! their [`CopyError`] variant, never by their words. Where a side lacks `fsMetadata` (the
//! reference), the bytes are what is shared; modes, times and links are their own scenario.

use std::io::Cursor;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::sync::Mutex;

use tether_engine::fs::FileSystem;
use tether_tree_copy::{CopyError, CopyOptions, Observer, Side, TreeCopy, TreePath};
use tokio::io::AsyncWriteExt as _;
use tokio::sync::Notify;

use crate::scratch::Scratch;

/// Every scenario of this suite, once, with the targets it does not run on and why; each
/// pairing of sides makes its tests from it ([`scenarios!`](crate::scenarios)). The target is
/// the kind of server on the remote sides (`local`: here to here, the engine on both).
#[doc(hidden)]
#[macro_export]
macro_rules! __every_tree_copy_scenario {
    ($($runner:tt)*) => {
        $crate::scenarios!(@each [$crate::suites::tree_copy] [
            a_tree_arrives_with_every_byte,
            modes_times_and_links_are_kept [reference: "the reference keeps no modes, times \
                or links (Tether's `fsMetadata` extension)"],
            a_file_goes_into_a_directory_or_onto_a_name,
            mistakes_are_refused_by_kind,
            a_link_where_a_directory_goes_stops_the_copy,
            a_fifo_in_a_tree_is_skipped_and_counted,
            a_reader_becomes_a_file_and_a_file_a_writer,
            an_abandoned_copy_leaves_nothing_once_its_stages_are_removed,
        ] $($runner)*);
    };
}
pub use crate::__every_tree_copy_scenario as every_scenario;

/// A file bigger than one block, so that it is streamed in blocks, not put whole.
const BIG_BYTES: usize = 3_500_000;

fn big() -> Vec<u8> {
    (0..BIG_BYTES as u32).map(|i| (i * 7 % 251) as u8).collect()
}

fn tree() -> CopyOptions {
    CopyOptions { recursive: true, ..CopyOptions::default() }
}

fn at(scratch: &Scratch, relative: &str) -> TreePath {
    TreePath::new(scratch.path(relative))
}

/// Every name under `root` that is a staged file (`.NAME.tether-…`), left behind.
fn stages_under(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(directory) = stack.pop() {
        for entry in std::fs::read_dir(&directory).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.contains(".tether-") {
                found.push(name);
            }
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            }
        }
    }
    found
}

/// A tree of files big and small, nested and empty directories: every byte arrives, the big
/// file through blocks, and no temporary file is left on either side.
pub async fn a_tree_arrives_with_every_byte(from: &dyn FileSystem, to: &dyn FileSystem) {
    // Setup: the tree on the source; nothing where it lands.
    let (source, destination) = (Scratch::new("copy-from"), Scratch::new("copy-to"));
    source.file("project/big.bin", &big());
    source.file("project/bin/run.sh", b"#!/bin/sh\necho run\n");
    source.file("project/empty", b"");
    source.file("project/a/b/c/deep.txt", b"deep\n");
    source.dir("project/nothing-here");
    let copy = TreeCopy::new(Side::here(from), Side::executor(to));

    // Exercise: the tree into a directory that is not there yet (it becomes the tree).
    copy.copy(&at(&source, "project"), &at(&destination, "landed"), tree()).await.unwrap();

    // Assert: every file, every directory, nothing staged left, and the report counts it.
    for file in ["big.bin", "bin/run.sh", "empty", "a/b/c/deep.txt"] {
        let (sent, landed) = (format!("project/{file}"), format!("landed/{file}"));
        assert_eq!(destination.read(&landed), source.read(&sent), "{file}");
    }
    assert!(destination.path("landed/nothing-here").is_dir());
    assert_eq!(stages_under(&destination.path("")), Vec::<String>::new());
    let report = copy.report();
    assert_eq!((report.files, report.directories), (4, 6));
    assert_eq!(report.bytes, (BIG_BYTES + 19 + 5) as u64);
    assert_eq!((report.denied, report.special), (0, 0));
}

/// Where both sides keep them (Tether's `fsMetadata`, the engine): modes, times to the
/// millisecond and links as links, with a link's own time, on files and directories alike.
pub async fn modes_times_and_links_are_kept(from: &dyn FileSystem, to: &dyn FileSystem) {
    let (source, destination) = (Scratch::new("keep-from"), Scratch::new("keep-to"));
    source.file("tree/big.bin", &big());
    source.file("tree/bin/run.sh", b"#!/bin/sh\n");
    source.symlink("bin/run.sh", "tree/link");
    for (relative, mode) in
        [("tree/big.bin", 0o640), ("tree/bin/run.sh", 0o755), ("tree/bin", 0o750)]
    {
        std::fs::set_permissions(source.path(relative), std::fs::Permissions::from_mode(mode))
            .unwrap();
    }
    for (n, relative) in
        ["tree/big.bin", "tree/bin/run.sh", "tree/link", "tree/bin"].iter().enumerate()
    {
        set_mtime(&source.path(relative), 1_600_000_000 + n as i64 * 100);
    }
    let copy = TreeCopy::new(Side::here(from), Side::executor(to));

    copy.copy(&at(&source, "tree"), &at(&destination, "tree"), tree()).await.unwrap();

    for relative in ["tree/big.bin", "tree/bin/run.sh", "tree/link", "tree/bin"] {
        let (sent, landed) = (
            std::fs::symlink_metadata(source.path(relative)).unwrap(),
            std::fs::symlink_metadata(destination.path(relative)).unwrap(),
        );
        let described = |m: &std::fs::Metadata| {
            (m.file_type().is_symlink(), m.mode() & 0o7777, m.mtime(), m.mtime_nsec() / 1_000_000)
        };
        let (sent, landed) = (described(&sent), described(&landed));
        if sent.0 {
            // A link's mode is not its own.
            assert_eq!((landed.0, landed.2, landed.3), (sent.0, sent.2, sent.3), "{relative}");
        } else {
            assert_eq!(landed, sent, "{relative}");
        }
    }
    assert_eq!(std::fs::read_link(destination.path("tree/link")).unwrap(), Path::new("bin/run.sh"));
    assert_eq!(copy.report().links, 1);
    assert!(copy.report().is_whole(), "{:?}", copy.report());
}

fn set_mtime(path: &Path, seconds: i64) {
    use rustix::fs::{AtFlags, CWD, Timespec, Timestamps, utimensat};
    let time = Timespec { tv_sec: seconds, tv_nsec: 250_000_000 };
    let times = Timestamps { last_access: time, last_modification: time };
    utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
}

/// One file goes into a directory under its own name, or onto a new name, and replaces a file
/// that is there whole.
pub async fn a_file_goes_into_a_directory_or_onto_a_name(
    from: &dyn FileSystem,
    to: &dyn FileSystem,
) {
    let (source, destination) = (Scratch::new("file-from"), Scratch::new("file-to"));
    source.file("notes.txt", b"new notes\n");
    source.file("big.bin", &big());
    destination.dir("inbox");
    destination.file("older.bin", b"an older, longer text that must go entirely\n");
    let copy = TreeCopy::new(Side::here(from), Side::executor(to));
    let file = CopyOptions::default();

    copy.copy(&at(&source, "notes.txt"), &at(&destination, "inbox"), file).await.unwrap();
    copy.copy(&at(&source, "notes.txt"), &at(&destination, "renamed.txt"), file).await.unwrap();
    copy.copy(&at(&source, "big.bin"), &at(&destination, "older.bin"), file).await.unwrap();

    assert_eq!(destination.read("inbox/notes.txt"), b"new notes\n");
    assert_eq!(destination.read("renamed.txt"), b"new notes\n");
    assert_eq!(destination.read("older.bin"), big());
    assert_eq!(stages_under(&destination.path("")), Vec::<String>::new());
}

/// What cannot be copied is refused before anything is written, each by its kind.
pub async fn mistakes_are_refused_by_kind(from: &dyn FileSystem, to: &dyn FileSystem) {
    let (source, destination) = (Scratch::new("refused-from"), Scratch::new("refused-to"));
    source.file("file", b"x");
    source.dir("dir");
    destination.file("file", b"there");
    let copy = TreeCopy::new(Side::here(from), Side::executor(to));
    let (file, several) = (CopyOptions::default(), CopyOptions { into_directory: true, ..tree() });
    let slash = TreePath::new(destination.path("nodir/"));

    let refusals = [
        copy.copy(&at(&source, "missing"), &at(&destination, ""), file).await,
        copy.copy(&at(&source, "dir"), &at(&destination, ""), file).await,
        copy.copy(&at(&source, "dir"), &at(&destination, "file"), tree()).await,
        copy.copy(&at(&source, "file"), &at(&destination, "file"), several).await,
        copy.copy(&at(&source, "file"), &slash, file).await,
        copy.copy(&at(&source, "file"), &at(&destination, "absent/new"), file).await,
    ];

    let [missing, directory, onto_file, several, slash, no_parent] = refusals;
    assert!(matches!(missing, Err(CopyError::NotFound(_))), "{missing:?}");
    assert!(matches!(directory, Err(CopyError::IsADirectory(_))), "{directory:?}");
    assert!(matches!(onto_file, Err(CopyError::DirectoryOntoFile { .. })), "{onto_file:?}");
    assert!(matches!(several, Err(CopyError::NotADirectoryForSeveral(_))), "{several:?}");
    assert!(matches!(slash, Err(CopyError::SlashOntoNothing(_))), "{slash:?}");
    assert!(matches!(no_parent, Err(CopyError::NoSuchDirectory(_))), "{no_parent:?}");
    assert_eq!(destination.read("file"), b"there", "nothing was changed");
    assert!(!destination.exists("nodir") && !destination.exists("absent"));
}

/// Where the copy has a directory, the destination has a link to one outside it: the copy
/// stops there (`ThroughLink`), and nothing is written through the link.
pub async fn a_link_where_a_directory_goes_stops_the_copy(
    from: &dyn FileSystem,
    to: &dyn FileSystem,
) {
    let (source, destination) = (Scratch::new("through-from"), Scratch::new("through-to"));
    source.file("src/x/pwned", b"pwned\n");
    destination.dir("outside");
    destination.dir("into/src");
    destination.symlink(destination.path("outside").to_str().unwrap(), "into/src/x");
    let copy = TreeCopy::new(Side::here(from), Side::executor(to));

    let refused = copy.copy(&at(&source, "src"), &at(&destination, "into"), tree()).await;

    assert!(matches!(refused, Err(CopyError::ThroughLink(_))), "{refused:?}");
    assert_eq!(std::fs::read_dir(destination.path("outside")).unwrap().count(), 0);
}

/// A FIFO in a tree is skipped and counted, and the rest copied.
pub async fn a_fifo_in_a_tree_is_skipped_and_counted(from: &dyn FileSystem, to: &dyn FileSystem) {
    let (source, destination) = (Scratch::new("fifo-from"), Scratch::new("fifo-to"));
    source.file("tree/a.txt", b"a\n");
    source.file("tree/sub/b.txt", b"b\n");
    source.fifo("tree/fifo");
    let copy = TreeCopy::new(Side::here(from), Side::executor(to));

    copy.copy(&at(&source, "tree"), &at(&destination, "tree"), tree()).await.unwrap();

    assert_eq!(destination.read("tree/a.txt"), b"a\n");
    assert_eq!(destination.read("tree/sub/b.txt"), b"b\n");
    assert!(!destination.exists("tree/fifo"));
    assert_eq!(copy.report().special, 1);
}

/// A reader's bytes become a file (staged, then in place), and a file's bytes a writer's.
pub async fn a_reader_becomes_a_file_and_a_file_a_writer(
    from: &dyn FileSystem,
    to: &dyn FileSystem,
) {
    let destination = Scratch::new("reader-to");
    let up = TreeCopy::new(Side::here(from), Side::executor(to));
    let down = TreeCopy::new(Side::executor(to), Side::here(from));

    let landed = at(&destination, "piped.bin");
    up.copy_from_reader(Cursor::new(big()), "the reader", &landed).await.unwrap();
    let mut written = Vec::new();
    down.copy_to_writer(&landed, &mut written, "the writer").await.unwrap();
    let refused = up.copy_from_reader(Cursor::new(b"x"), "the reader", &at(&destination, "")).await;

    assert_eq!(destination.read("piped.bin"), big());
    assert_eq!(written, big());
    assert!(matches!(refused, Err(CopyError::ReaderIntoDirectory(..))), "{refused:?}");
    assert_eq!(stages_under(&destination.path("")), Vec::<String>::new());
}

/// Tells when the first bytes have been written.
#[derive(Default)]
struct FirstBytes(Notify, Mutex<u64>);

impl Observer for FirstBytes {
    fn copied(&self, bytes: u64) {
        *self.1.lock().unwrap() += bytes;
        self.0.notify_one();
    }
}

/// A copy abandoned halfway (its future dropped with a block in its temporary file) leaves
/// that file until `remove_stages`, and nothing after it; the final name never holds a part.
pub async fn an_abandoned_copy_leaves_nothing_once_its_stages_are_removed(
    from: &dyn FileSystem,
    to: &dyn FileSystem,
) {
    // Setup: a reader that gives one block and then nothing, never ending.
    let destination = Scratch::new("abandoned-to");
    let watched = FirstBytes::default();
    let copy = TreeCopy::new(Side::here(from), Side::executor(to)).observed_by(&watched);
    let (mut input, reader) = tokio::io::duplex(2 * tether_protocol::fs::FS_BLOCK_MAX_BYTES);
    input.write_all(&vec![7; tether_protocol::fs::FS_BLOCK_MAX_BYTES]).await.unwrap();
    let landed = at(&destination, "big.bin");

    // Exercise: the copy runs until its first block is written, and is dropped there.
    tokio::select! {
        copied = copy.copy_from_reader(reader, "the reader", &landed) => panic!("{copied:?}"),
        () = watched.0.notified() => {}
    }
    let staged = stages_under(&destination.path(""));
    copy.remove_stages().await;

    // Assert: one stage was there, and nothing is left.
    assert_eq!(staged.len(), 1, "{staged:?}");
    assert!(staged[0].starts_with(".big.bin.tether-"), "{staged:?}");
    let left: Vec<_> = std::fs::read_dir(destination.path("")).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    drop(input);
}
