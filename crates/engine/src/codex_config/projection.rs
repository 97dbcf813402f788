//! Selection: the keys a client asked for, cut out of one layer.
//!
//! The paths make a tree. Where a path ends, the whole value below it is kept; at a table on
//! the way, only the selected children are kept; where a path wants to descend into something
//! that is not a table, that value is kept whole. A selected table none of whose selected
//! children is there stays, empty: the client learns the table exists.

use toml::{Table, Value};

/// The selected key paths, as a tree.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Selection {
    /// A path ends here: everything below is kept.
    whole: bool,
    children: Vec<(String, Selection)>,
}

impl Selection {
    /// The tree of `paths`; every path has at least one key (checked by the caller).
    pub fn new(paths: &[Vec<String>]) -> Self {
        let mut root = Selection::default();
        for path in paths {
            let mut node = &mut root;
            for key in path {
                let at = match node.children.iter().position(|(name, _)| name == key) {
                    Some(at) => at,
                    None => {
                        node.children.push((key.clone(), Selection::default()));
                        node.children.len() - 1
                    }
                };
                node = &mut node.children[at].1;
            }
            node.whole = true;
        }
        root
    }

    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    fn child(&self, key: &str) -> Option<&Selection> {
        self.children.iter().find(|(name, _)| name == key).map(|(_, node)| node)
    }

    /// The selected part of `table`, in the table's own key order.
    pub fn project(&self, table: &Table) -> Table {
        let mut kept = Table::new();
        for (key, value) in table {
            let Some(node) = self.child(key) else { continue };
            let value = match value {
                Value::Table(inner) if !node.whole => Value::Table(node.project(inner)),
                other => other.clone(),
            };
            kept.insert(key.clone(), value);
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[&[&str]]) -> Vec<Vec<String>> {
        list.iter().map(|path| path.iter().map(|key| key.to_string()).collect()).collect()
    }

    fn project(list: &[&[&str]], text: &str) -> String {
        let table: Table = toml::from_str(text).unwrap();
        toml::to_string(&Selection::new(&paths(list)).project(&table)).unwrap()
    }

    #[test]
    fn a_path_keeps_the_whole_value_below_it() {
        let text = "model = \"m\"\n[a]\nb = 1\nc = 2\n[z]\nq = 1\n";
        assert_eq!(project(&[&["a"]], text), "[a]\nb = 1\nc = 2\n");
        assert_eq!(project(&[&["a"], &["a", "b"]], text), "[a]\nb = 1\nc = 2\n");
        assert_eq!(project(&[&["a", "b"]], text), "[a]\nb = 1\n");
        assert_eq!(project(&[&["model"], &["nope"]], text), "model = \"m\"\n");
    }

    #[test]
    fn a_value_that_is_not_a_table_is_kept_whole_and_an_empty_selection_stays_a_table() {
        let text = "tbl = \"not-a-table\"\n[mcp_servers.x]\nurl = \"u\"\n";
        assert_eq!(project(&[&["tbl", "b", "c"]], text), "tbl = \"not-a-table\"\n");
        assert_eq!(project(&[&["mcp_servers", "nope"]], text), "[mcp_servers]\n");
        assert_eq!(project(&[&["absent"]], text), "");
    }
}
