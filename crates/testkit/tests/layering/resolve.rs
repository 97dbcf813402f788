//! Which module of the crate a written path names, as the compiler would resolve it: from
//! `crate`, from `self` or the `super`s above, or from a name in scope where it is written — a
//! child module, an item, a `use` (followed to where it leads, so a re-export names the module
//! that defines the item) or a glob import.
//!
//! A path whose first name is not the crate's (another crate, the prelude, a local binding, a
//! generic) names no module of it. A name the walk down does not know (an enum's variant, an
//! associated item, what a macro defines) belongs to the module reached so far.

use crate::tree::Crate;

/// How many `use`s and globs one resolution follows: more means imports that lead in a circle,
/// which the compiler refuses anyway.
const MAX_HOPS: usize = 32;

/// The module `segments`, written in `from`, names; `None` when it is not this crate's.
pub fn target(krate: &Crate, from: usize, segments: &[String]) -> Option<usize> {
    resolve(krate, from, segments, 0)
}

fn resolve(krate: &Crate, from: usize, segments: &[String], hops: usize) -> Option<usize> {
    if hops > MAX_HOPS {
        return None;
    }
    let (first, rest) = segments.split_first()?;
    match first.as_str() {
        "crate" => Some(descend(krate, 0, rest, hops)),
        "self" => Some(descend(krate, from, rest, hops)),
        "super" => Some(descend(krate, krate.modules[from].parent?, rest, hops)),
        _ => in_scope(krate, from, first, rest, hops),
    }
}

/// `name`, then `rest`, looked up in `module`'s scope.
fn in_scope(
    krate: &Crate,
    module: usize,
    name: &str,
    rest: &[String],
    hops: usize,
) -> Option<usize> {
    let here = &krate.modules[module];
    if let Some(&child) = here.children.get(name) {
        return Some(descend(krate, child, rest, hops));
    }
    if here.items.contains(name) {
        return Some(module);
    }
    if let Some(imported) = here.imports.get(name) {
        let path: Vec<String> = imported.iter().chain(rest).cloned().collect();
        return resolve(krate, module, &path, hops + 1);
    }
    here.globs.iter().find_map(|glob| {
        let source = resolve(krate, module, glob, hops + 1)?;
        in_scope(krate, source, name, rest, hops + 1)
    })
}

/// `rest` followed down from `module`.
fn descend(krate: &Crate, module: usize, rest: &[String], hops: usize) -> usize {
    let Some((first, tail)) = rest.split_first() else { return module };
    match first.as_str() {
        "self" => descend(krate, module, tail, hops),
        "super" => match krate.modules[module].parent {
            Some(parent) => descend(krate, parent, tail, hops),
            None => module,
        },
        _ => in_scope(krate, module, first, tail, hops).unwrap_or(module),
    }
}
