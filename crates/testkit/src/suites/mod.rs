//! The surface suites: scenarios written once against the engine's traits
//! ([`ExecBackend`](tether_engine::exec::ExecBackend),
//! [`FileSystem`](tether_engine::fs::FileSystem), [`HttpClient`](tether_engine::http::HttpClient))
//! and run on every implementation — the engine in-process, and Tether and the reference through
//! the client — by [`scenarios!`](crate::scenarios).
//!
//! A scenario is a `pub async fn` that takes the implementation under test (and for HTTP, the
//! peer). Each suite lists its scenarios once, with the targets each does not run on and why
//! (`every_scenario`; `fs` has one list per surface); runners make their tests from the list.
//! What only one implementation has stays in that crate's tests.

pub mod exec;
pub mod fs;
pub mod http;
pub mod tree_copy;

/// Each suite's lists are where its runners find its scenarios: a scenario missing from them
/// would run nowhere, so every function that takes a surface under test must be listed.
#[cfg(test)]
mod every_scenario_is_listed {
    use std::collections::BTreeSet;

    /// What a scenario's first parameter is: the implementation under test.
    const SURFACES: [&str; 4] =
        ["&dyn ExecBackend", "&dyn FileSystem", "&mut FileHandles", "&dyn HttpClient"];

    /// The scenarios `source` defines that its lists (its `macro_rules!`) leave out.
    fn unlisted(source: &str) -> BTreeSet<String> {
        let lists: Vec<&str> = source
            .split("macro_rules!")
            .skip(1)
            .map(|list| list.split("\n}\n").next().unwrap_or(list))
            .collect();
        let listed: BTreeSet<&str> = lists
            .iter()
            .flat_map(|list| list.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
            .collect();
        source
            .split("\npub async fn ")
            .skip(1)
            .filter_map(|definition| {
                let (name, rest) = definition.split_once('(')?;
                let parameters = rest.split_once(')')?.0;
                SURFACES.iter().any(|surface| parameters.contains(surface)).then_some(name)
            })
            .filter(|name| !listed.contains(name))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn in_every_suite() {
        for (suite, source) in [
            ("exec", include_str!("exec.rs")),
            ("fs", include_str!("fs.rs")),
            ("http", include_str!("http.rs")),
            ("tree_copy", include_str!("tree_copy.rs")),
        ] {
            assert_eq!(unlisted(source), BTreeSet::new(), "scenarios of {suite} run nowhere");
        }
    }

    #[test]
    fn a_scenario_left_out_is_found() {
        let source = "macro_rules! __list {\n    [listed]\n}\n\
            \npub async fn listed(fs: &dyn FileSystem) {}\
            \npub async fn forgotten(handles: &mut FileHandles) {}\
            \npub async fn helper(process: &mut dyn ExecProcess) {}\n";
        assert_eq!(unlisted(source), BTreeSet::from(["forgotten".to_owned()]));
    }
}
