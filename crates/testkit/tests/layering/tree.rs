//! A crate's modules as its source declares them, each with what it defines, what it imports
//! and every path its code writes.
//!
//! The tree follows the `mod` declarations from the crate's root file, inline modules included,
//! so a module is found where the compiler finds it. Paths are read with `syn` from the code
//! itself — `use` trees, expressions, types, patterns, and the tokens of macro calls — never
//! from comments, doc comments or attributes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::visit::{self, Visit};
use syn::{Item, UseTree};

/// One module: the root is `modules[0]` of its [`Crate`].
#[derive(Debug, Default)]
pub struct Module {
    /// Its path from the crate's root (empty for the root).
    pub path: Vec<String>,
    pub parent: Option<usize>,
    pub children: BTreeMap<String, usize>,
    /// The names of the items it defines (functions, types, constants, traits, macros…).
    pub items: BTreeSet<String>,
    /// Each name a `use` brings in, and the path it stands for, as written here.
    pub imports: BTreeMap<String, Vec<String>>,
    /// The modules a `use …::*` brings every name of, as written here.
    pub globs: Vec<Vec<String>>,
    /// Every path written in its code, with where.
    pub references: Vec<Reference>,
}

/// One path as the code writes it.
#[derive(Debug)]
pub struct Reference {
    pub segments: Vec<String>,
    /// `file:line`, for the report.
    pub at: String,
}

#[derive(Debug)]
pub struct Crate {
    pub modules: Vec<Module>,
}

impl Crate {
    /// The crate whose root file is `root`, its other files read through `source` (`None`: no
    /// such file).
    pub fn read(root: &Path, source: &dyn Fn(&Path) -> Option<String>) -> Crate {
        let mut krate = Crate { modules: vec![Module::default()] };
        let text = source(root).unwrap_or_else(|| panic!("no crate root at {}", root.display()));
        let file = parse(root, &text);
        let directory = root.parent().expect("a root file lies in a directory").to_path_buf();
        krate.fill(0, &file.items, root, &directory, source);
        krate
    }

    /// A module's path as Rust writes it (`crate` for the root).
    pub fn name(&self, module: usize) -> String {
        match self.modules[module].path.join("::") {
            path if path.is_empty() => "crate".to_owned(),
            path => path,
        }
    }

    /// The modules from the root down to `module`, both included.
    pub fn ancestry(&self, module: usize) -> Vec<usize> {
        let mut line = vec![module];
        while let Some(parent) = self.modules[*line.last().unwrap()].parent {
            line.push(parent);
        }
        line.reverse();
        line
    }

    /// Reads `items` into `module`: its children (from `directory` when out of line), item
    /// names, imports and references.
    fn fill(
        &mut self,
        module: usize,
        items: &[Item],
        file: &Path,
        directory: &Path,
        source: &dyn Fn(&Path) -> Option<String>,
    ) {
        let mut collector = Collector { module: Module::default(), file };
        for item in items.iter().filter(|item| !test_only(item_attributes(item))) {
            if let Item::Mod(declared) = item {
                let name = declared.ident.unraw().to_string();
                let child = self.modules.len();
                let mut path = self.modules[module].path.clone();
                path.push(name.clone());
                self.modules.push(Module { path, parent: Some(module), ..Module::default() });
                self.modules[module].children.insert(name.clone(), child);
                let child_directory = directory.join(&name);
                match &declared.content {
                    Some((_, inline)) => self.fill(child, inline, file, &child_directory, source),
                    None => {
                        let (child_file, text) = match path_attribute(declared) {
                            // A `#[path]` file is relative to the declaring file's directory,
                            // and holds its own children beside it, as `mod.rs` does.
                            Some(relative) => {
                                let at = file.parent().unwrap().join(relative);
                                let text = source(&at);
                                (at, text)
                            }
                            None => {
                                let flat = directory.join(format!("{name}.rs"));
                                let nested = child_directory.join("mod.rs");
                                match source(&flat) {
                                    Some(text) => (flat, Some(text)),
                                    None => {
                                        let text = source(&nested);
                                        (nested, text)
                                    }
                                }
                            }
                        };
                        let text = text.unwrap_or_else(|| {
                            panic!("module {name} of {} has no file", file.display())
                        });
                        let parsed = parse(&child_file, &text);
                        let child_directory = match path_attribute(declared) {
                            Some(_) => child_file.parent().unwrap().to_path_buf(),
                            None => child_directory,
                        };
                        self.fill(child, &parsed.items, &child_file, &child_directory, source);
                    }
                }
                continue;
            }
            if let Some(name) = item_name(item) {
                collector.module.items.insert(name);
            }
            collector.visit_item(item);
        }
        let Module { items, imports, globs, references, .. } = collector.module;
        let target = &mut self.modules[module];
        target.items.extend(items);
        target.imports.extend(imports);
        target.globs.extend(globs);
        target.references.extend(references);
    }
}

fn parse(path: &Path, text: &str) -> syn::File {
    syn::parse_file(text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn path_attribute(declared: &syn::ItemMod) -> Option<PathBuf> {
    declared.attrs.iter().find(|a| a.path().is_ident("path")).map(|attribute| {
        let syn::Meta::NameValue(pair) = &attribute.meta else { panic!("a bare #[path]") };
        let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(text), .. }) = &pair.value else {
            panic!("#[path] without a string")
        };
        PathBuf::from(text.value())
    })
}

fn item_attributes(item: &Item) -> &[syn::Attribute] {
    match item {
        Item::Const(item) => &item.attrs,
        Item::Enum(item) => &item.attrs,
        Item::ExternCrate(item) => &item.attrs,
        Item::Fn(item) => &item.attrs,
        Item::ForeignMod(item) => &item.attrs,
        Item::Impl(item) => &item.attrs,
        Item::Macro(item) => &item.attrs,
        Item::Mod(item) => &item.attrs,
        Item::Static(item) => &item.attrs,
        Item::Struct(item) => &item.attrs,
        Item::Trait(item) => &item.attrs,
        Item::TraitAlias(item) => &item.attrs,
        Item::Type(item) => &item.attrs,
        Item::Union(item) => &item.attrs,
        Item::Use(item) => &item.attrs,
        _ => &[],
    }
}

/// Whether the attributes make their item a test's alone (`#[cfg(test)]`, `#[cfg(all(test,
/// …))]`): a module's tests may drive it through the modules above it, as its first caller;
/// what is built without them is what must import one way.
fn test_only(attributes: &[syn::Attribute]) -> bool {
    fn names_test(meta: &syn::Meta) -> bool {
        match meta {
            syn::Meta::Path(path) => path.is_ident("test"),
            syn::Meta::List(list) if list.path.is_ident("all") => list
                .parse_args_with(
                    syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
                )
                .is_ok_and(|all| all.iter().any(names_test)),
            _ => false,
        }
    }
    attributes.iter().any(|attribute| {
        attribute.path().is_ident("cfg")
            && attribute.parse_args::<syn::Meta>().is_ok_and(|meta| names_test(&meta))
    })
}

/// The name an item defines in its module's namespaces, if any.
fn item_name(item: &Item) -> Option<String> {
    let ident = match item {
        Item::Const(item) => &item.ident,
        Item::Enum(item) => &item.ident,
        Item::Fn(item) => &item.sig.ident,
        Item::Macro(item) => item.ident.as_ref()?,
        Item::Static(item) => &item.ident,
        Item::Struct(item) => &item.ident,
        Item::Trait(item) => &item.ident,
        Item::TraitAlias(item) => &item.ident,
        Item::Type(item) => &item.ident,
        Item::Union(item) => &item.ident,
        _ => return None,
    };
    Some(ident.unraw().to_string())
}

/// Gathers one module's imports and references from its items (and the items nested in
/// their bodies, whose `use`s count as the module's).
struct Collector<'a> {
    module: Module,
    file: &'a Path,
}

impl Collector<'_> {
    fn refer(&mut self, segments: Vec<String>, line: usize) {
        let at = format!("{}:{line}", self.file.display());
        self.module.references.push(Reference { segments, at });
    }

    /// The imports of a `use` declaration's `tree` below `prefix`, each a reference too.
    fn use_tree(&mut self, tree: &UseTree, mut prefix: Vec<String>, line: usize) {
        match tree {
            UseTree::Path(path) => {
                prefix.push(path.ident.unraw().to_string());
                self.use_tree(&path.tree, prefix, line);
            }
            UseTree::Name(name) => self.import(prefix, &name.ident, &name.ident, line),
            UseTree::Rename(rename) => self.import(prefix, &rename.ident, &rename.rename, line),
            UseTree::Glob(_) => {
                self.module.globs.push(prefix.clone());
                self.refer(prefix, line);
            }
            UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(tree, prefix.clone(), line);
                }
            }
        }
    }

    /// `use prefix::ident as name`; `ident` may be `self`, the prefix's last module.
    fn import(
        &mut self,
        mut path: Vec<String>,
        ident: &syn::Ident,
        name: &syn::Ident,
        line: usize,
    ) {
        let ident = ident.unraw().to_string();
        let mut name = name.unraw().to_string();
        if ident == "self" {
            if name == "self" {
                name = path.last().cloned().unwrap_or_default();
            }
        } else {
            path.push(ident);
        }
        if name != "_" {
            self.module.imports.insert(name, path.clone());
        }
        self.refer(path, line);
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    /// A nested module is a module of its own, read apart.
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}

    fn visit_item(&mut self, item: &'ast Item) {
        if !test_only(item_attributes(item)) {
            visit::visit_item(self, item);
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attributes = match item {
            syn::ImplItem::Const(item) => &item.attrs,
            syn::ImplItem::Fn(item) => &item.attrs,
            syn::ImplItem::Type(item) => &item.attrs,
            syn::ImplItem::Macro(item) => &item.attrs,
            _ => return,
        };
        if !test_only(attributes) {
            visit::visit_impl_item(self, item);
        }
    }

    /// Doc comments, `cfg`s and derives name no module this code uses.
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}

    /// `pub(in crate::x)` says who may see an item, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if item.leading_colon.is_none() {
            self.use_tree(&item.tree, Vec::new(), item.use_token.span.start().line);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segments = path.segments.iter().map(|s| s.ident.unraw().to_string()).collect();
            let line = path.segments[0].ident.span().start().line;
            self.refer(segments, line);
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        for (segments, line) in token_paths(mac.tokens.clone()) {
            self.refer(segments, line);
        }
    }
}

/// The paths of two segments or more written in a macro's tokens (`a::b`, `crate::x::y`,
/// `$crate::z`), which no parser sees as paths until the macro is expanded.
fn token_paths(tokens: TokenStream) -> Vec<(Vec<String>, usize)> {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let punct = |at: usize, wanted: char| matches!(trees.get(at), Some(TokenTree::Punct(p)) if p.as_char() == wanted);
    // `::` is a joint `:` followed by a `:`.
    let separator = |at: usize| {
        matches!(trees.get(at), Some(TokenTree::Punct(p)) if p.as_char() == ':' && p.spacing() == Spacing::Joint)
            && punct(at + 1, ':')
    };
    let mut found = Vec::new();
    let mut at = 0;
    while at < trees.len() {
        match &trees[at] {
            TokenTree::Group(group) => {
                found.extend(token_paths(group.stream()));
                at += 1;
            }
            TokenTree::Ident(first) => {
                let mut segments = vec![first.unraw().to_string()];
                let mut next = at + 1;
                while separator(next) {
                    let Some(TokenTree::Ident(ident)) = trees.get(next + 2) else { break };
                    segments.push(ident.unraw().to_string());
                    next += 3;
                }
                let after_dollar = at > 0 && punct(at - 1, '$');
                // `::x::y` is another crate's; `$name::x` a macro variable's, but `$crate`.
                let absolute = at >= 2 && separator(at - 2);
                let variable = after_dollar && segments[0] != "crate";
                if segments.len() > 1 && !absolute && !variable {
                    found.push((segments, first.span().start().line));
                }
                at = next;
            }
            _ => at += 1,
        }
    }
    found
}
