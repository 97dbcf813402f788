//! Imports point one way inside every crate of the workspace, at every level of nesting: no
//! modules that share a parent reach into each other, directly or around a circle, and the
//! orders ARCHITECTURE.md states hold between the top-level modules it names.
//!
//! Every path the code writes counts — `crate::`, `super::`, `self::` and a name in scope —
//! resolved to the module it names, through `use`s and re-exports; comments do not.

mod circles;
mod resolve;
mod stated;
mod tree;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use tether_testkit::server::workspace_root;

use crate::circles::{circles, described_circles, sibling_edges};
use crate::stated::STATED_ORDERS;
use crate::tree::Crate;

/// Every crate of the workspace: its name and its root file.
fn crate_roots() -> Vec<(String, PathBuf)> {
    let root = workspace_root();
    let mut directories: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    directories.push(root.join("python"));
    directories.sort();
    let mut roots = Vec::new();
    for directory in directories {
        let name = directory.file_name().unwrap().to_string_lossy().into_owned();
        for file in ["lib.rs", "main.rs"] {
            let path = directory.join("src").join(file);
            if path.is_file() {
                roots.push((name.clone(), path));
            }
        }
    }
    roots
}

fn read_crate(root: &Path) -> Crate {
    Crate::read(root, &|path| std::fs::read_to_string(path).ok())
}

#[test]
fn no_modules_import_each_other_around_a_circle() {
    let mut found = Vec::new();
    for (name, root) in crate_roots() {
        let krate = read_crate(&root);
        for circle in described_circles(&krate, &sibling_edges(&krate)) {
            found.push(format!("{name}: {circle}"));
        }
    }
    assert!(found.is_empty(), "modules that import each other:\n{}", found.join("\n"));
}

#[test]
fn the_orders_architecture_states_hold() {
    let root = workspace_root();
    let document = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut found = Vec::new();
    for order in STATED_ORDERS {
        if let Some(why) = order.unstated_in(&document) {
            found.push(format!("{}: ARCHITECTURE.md: {why}", order.krate));
        }
        let krate = read_crate(&root.join("crates").join(order.krate).join("src/lib.rs"));
        for broken in order.broken_in(&krate, &sibling_edges(&krate)) {
            found.push(format!("{}: {broken}", order.krate));
        }
    }
    assert!(found.is_empty(), "stated orders that do not hold:\n{}", found.join("\n"));
}

#[test]
fn a_circle_is_found_with_its_path() {
    let graph: BTreeMap<&str, BTreeSet<&str>> = [
        ("a", vec!["b"]),
        ("b", vec!["c", "d"]),
        ("c", vec!["a"]),
        ("d", vec!["e"]),
        ("e", vec![]),
        ("f", vec!["g"]),
        ("g", vec!["f"]),
    ]
    .into_iter()
    .map(|(node, next)| (node, next.into_iter().collect()))
    .collect();
    let found = circles(&graph);
    let paths: Vec<&[&str]> = found.iter().map(|circle| circle.path.as_slice()).collect();
    assert_eq!(paths, [&["a", "b", "c", "a"][..], &["f", "g", "f"]]);
    assert_eq!(found[0].members, BTreeSet::from(["a", "b", "c"]));
}

/// A crate written here, its files by path under `src/`.
fn crate_of(files: &[(&str, &str)]) -> Crate {
    let files: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(path, text)| (Path::new("src").join(path), (*text).to_owned()))
        .collect();
    Crate::read(Path::new("src/lib.rs"), &|path| files.get(path).cloned())
}

/// Each way a path can name a module is followed to it, at any depth: `super::`, `self::`,
/// `crate::`, a name a `use` brought in (through a re-export to the module defining the item),
/// a glob import, and a path inside a macro call; what tests alone use is left out.
#[test]
fn every_way_of_naming_a_module_is_followed() {
    let krate = crate_of(&[
        ("lib.rs", "mod outer; mod other; pub use other::Thing;"),
        ("other.rs", "pub struct Thing; pub fn make() {}"),
        ("outer/mod.rs", "mod a; mod b; mod c; mod d; mod e; use self::e::*;"),
        ("outer/a.rs", "pub(crate) fn run() { super::b::run() }"),
        ("outer/b.rs", "use self::inner::go; mod inner { pub fn go() {} } pub fn run() { go() }"),
        ("outer/c.rs", "pub fn run() -> crate::Thing { crate::Thing }"),
        ("outer/d.rs", "pub fn run() { println!(\"{}\", super::Shared::NAME); }"),
        ("outer/e.rs", "pub struct Shared; impl Shared { pub const NAME: &str = \"e\"; }"),
    ]);
    let module = |name: &str| (0..krate.modules.len()).find(|&m| krate.name(m) == name).unwrap();
    let edges: BTreeSet<(String, String)> = sibling_edges(&krate)
        .keys()
        .map(|&(from, to)| (krate.name(from), krate.name(to)))
        .collect();
    let expected: BTreeSet<(String, String)> =
        [("outer::a", "outer::b"), ("outer", "other"), ("outer::d", "outer::e")]
            .into_iter()
            .map(|(from, to)| (from.to_owned(), to.to_owned()))
            .collect();
    assert_eq!(edges, expected);
    assert_eq!(krate.name(module("outer::b::inner")), "outer::b::inner");
    assert!(described_circles(&krate, &sibling_edges(&krate)).is_empty());

    let circled = crate_of(&[
        ("lib.rs", "mod process;"),
        ("process/mod.rs", "mod pump; mod spawn; mod pty_io;"),
        ("process/pump.rs", "use super::spawn::Spawned; pub const CHUNK: usize = 1;"),
        ("process/spawn.rs", "pub struct Spawned(super::pty_io::Reader);"),
        ("process/pty_io.rs", "pub struct Reader([u8; super::pump::CHUNK]);"),
    ]);
    let found = described_circles(&circled, &sibling_edges(&circled));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("process::pump → process::spawn → process::pty_io → process::pump"),
        "{}",
        found[0]
    );

    let tested = crate_of(&[
        ("lib.rs", "mod low; mod high;"),
        ("low.rs", "pub fn f() {} #[cfg(test)] mod tests { fn t() { crate::high::g() } }"),
        ("high.rs", "pub fn g() { crate::low::f() }"),
    ]);
    assert!(described_circles(&tested, &sibling_edges(&tested)).is_empty());
}
