//! Each crate's modules import one way, as ARCHITECTURE.md lays them out: no two top-level
//! modules of a crate reach into each other, directly or around a circle. The one pair that
//! does, the engine's `fs` and `capabilities`, is one way beneath (ARCHITECTURE says how) and
//! is named here, so that no other pair joins it unnoticed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use tether_testkit::server::workspace_root;

/// Top-level modules that import each other, by crate, each pair as ARCHITECTURE explains it.
const KNOWN_CIRCLES: &[(&str, &[&str])] = &[("engine", &["capabilities", "fs"])];

/// Each top-level module of the crate at `src` and the top-level modules it names through
/// `crate::` in its code (comments and doc comments aside).
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.extension().is_none_or(|extension| extension != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap();
            let first = relative.components().next().unwrap().as_os_str().to_string_lossy();
            let module = first.trim_end_matches(".rs").to_owned();
            if module == "lib" || module == "main" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let names = graph.entry(module.clone()).or_default();
            for line in text.lines().filter(|line| !line.trim_start().starts_with("//")) {
                for (at, _) in line.match_indices("crate::") {
                    let rest = &line[at + "crate::".len()..];
                    let end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    let named = &rest[..end];
                    // `tether_crate::x` and `$crate::x` are other crates' paths.
                    let before = line[..at].chars().next_back();
                    let own = before.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
                    if own && before != Some('$') && !named.is_empty() && named != module {
                        names.insert(named.to_owned());
                    }
                }
            }
        }
    }
    // Only the crate's own modules: `crate::SomeType` names an item of `lib.rs`.
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for names in graph.values_mut() {
        names.retain(|name| modules.contains(name));
    }
    graph
}

/// The modules that lie on a circle of imports, each circle's members sorted.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<Vec<String>> {
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut pending = vec![from.to_owned()];
        while let Some(module) = pending.pop() {
            for next in &graph[&module] {
                if next == to {
                    return true;
                }
                if seen.insert(next.clone()) {
                    pending.push(next.clone());
                }
            }
        }
        false
    };
    graph
        .keys()
        .filter(|module| reaches(module, module))
        .map(|module| {
            let mut members: Vec<String> = graph
                .keys()
                .filter(|other| {
                    *other == module || (reaches(module, other) && reaches(other, module))
                })
                .cloned()
                .collect();
            members.sort();
            members
        })
        .collect()
}

#[test]
fn modules_import_one_way() {
    let crates = workspace_root().join("crates");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let directory = entry.unwrap().path();
        let src = directory.join("src");
        if !src.is_dir() {
            continue;
        }
        let name = directory.file_name().unwrap().to_string_lossy().into_owned();
        for circle in circles(&module_graph(&src)) {
            let known = KNOWN_CIRCLES
                .iter()
                .any(|(krate, members)| *krate == name && circle.iter().eq(members.iter()));
            if !known {
                found.push(format!("{name}: {}", circle.join(" ↔ ")));
            }
        }
    }
    assert!(found.is_empty(), "top-level modules that import each other: {found:?}");
}

#[test]
fn a_circle_is_found() {
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec!["a"])]
            .into_iter()
            .map(|(module, names)| (module.into(), names.into_iter().map(String::from).collect()))
            .collect();
    let expected: Vec<String> = vec!["a".into(), "b".into(), "c".into()];
    assert_eq!(circles(&graph), BTreeSet::from([expected]));
}
