//! The import graph between sibling modules, at every level of nesting, and the circles in it.
//!
//! A module and the modules inside it are one unit: the parent declares its children and
//! holds what they share, and a child reaches it with `super::`. So an order is a matter
//! between siblings: a reference from anywhere inside one module to anywhere inside another,
//! neither holding the other, is an edge between the two children of their nearest common
//! ancestor that hold them. `crate::fs::sandboxed::op` naming `crate::capabilities::scan` is
//! `fs → capabilities` at the top; `process::pty_io` naming `super::pump` is
//! `pty_io → pump` inside `process`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::resolve::target;
use crate::tree::Crate;

/// The first reference that makes each edge, as `file:line path`, by (from, to) sibling.
pub type Edges = BTreeMap<(usize, usize), String>;

/// Every edge between siblings in `krate`.
pub fn sibling_edges(krate: &Crate) -> Edges {
    let mut edges = Edges::new();
    for (from, module) in krate.modules.iter().enumerate() {
        let from_line = krate.ancestry(from);
        for reference in &module.references {
            let Some(to) = target(krate, from, &reference.segments) else { continue };
            let to_line = krate.ancestry(to);
            let shared = from_line.iter().zip(&to_line).take_while(|(a, b)| a == b).count();
            // The same module, or one inside the other.
            if shared == from_line.len() || shared == to_line.len() {
                continue;
            }
            edges
                .entry((from_line[shared], to_line[shared]))
                .or_insert_with(|| format!("{} `{}`", reference.at, reference.segments.join("::")));
        }
    }
    edges
}

/// A set of nodes that all reach each other, and one circle through them.
#[derive(Debug, PartialEq, Eq)]
pub struct Circle<N> {
    /// From the set's first node back to it (`[a, b, c, a]`), the shortest way.
    pub path: Vec<N>,
    /// Every node of the set, on the path or on another circle with it.
    pub members: BTreeSet<N>,
}

/// One circle for each set of nodes that reach each other.
pub fn circles<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Vec<Circle<N>> {
    let no_edges = BTreeSet::new();
    let next = |node: &N| graph.get(node).unwrap_or(&no_edges);
    let reachable = |from: &N| {
        let mut seen = BTreeSet::new();
        let mut pending = vec![from.clone()];
        while let Some(node) = pending.pop() {
            for after in next(&node) {
                if seen.insert(after.clone()) {
                    pending.push(after.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<N, BTreeSet<N>> =
        graph.keys().map(|node| (node.clone(), reachable(node))).collect();
    let mut placed = BTreeSet::new();
    let mut found = Vec::new();
    for (node, reached) in &reach {
        if placed.contains(node) || !reached.contains(node) {
            continue;
        }
        let members: BTreeSet<N> = reached
            .iter()
            .filter(|other| reach.get(*other).is_some_and(|r| r.contains(node)))
            .cloned()
            .collect();
        placed.extend(members.iter().cloned());
        // Breadth first from `node` within its set, until an edge leads back to it.
        let mut came_from: BTreeMap<N, N> = BTreeMap::new();
        let mut queue = VecDeque::from([node.clone()]);
        'search: while let Some(at) = queue.pop_front() {
            for after in next(&at) {
                if after == node {
                    let mut path = vec![node.clone(), at.clone()];
                    // Back to `node`, the one member with nothing before it.
                    while let Some(before) = came_from.get(path.last().unwrap()) {
                        path.push(before.clone());
                    }
                    path.reverse();
                    found.push(Circle { path, members: members.clone() });
                    break 'search;
                }
                if members.contains(after) && !came_from.contains_key(after) {
                    came_from.insert(after.clone(), at.clone());
                    queue.push_back(after.clone());
                }
            }
        }
    }
    found
}

/// Each circle among `krate`'s siblings, described with the reference behind every step.
pub fn described_circles(krate: &Crate, edges: &Edges) -> Vec<String> {
    let mut graph: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for &(from, to) in edges.keys() {
        graph.entry(from).or_default().insert(to);
    }
    circles(&graph)
        .into_iter()
        .map(|Circle { path, members }| {
            let names: Vec<String> = path.iter().map(|&module| krate.name(module)).collect();
            let steps: Vec<String> = path
                .windows(2)
                .map(|step| {
                    let why = &edges[&(step[0], step[1])];
                    format!("\n    {} → {}: {why}", krate.name(step[0]), krate.name(step[1]))
                })
                .collect();
            let others: Vec<String> = members
                .iter()
                .filter(|member| !path.contains(member))
                .map(|&member| krate.name(member))
                .collect();
            let also = match others.is_empty() {
                true => String::new(),
                false => format!(" (and around other circles with it: {})", others.join(", ")),
            };
            format!("{}{also}{}", names.join(" → "), steps.concat())
        })
        .collect()
}
