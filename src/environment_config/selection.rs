//! The key-path selection of `environmentConfig/read`, as codex's loader projects its layers:
//! the requested paths form a tree; a layer keeps only the keys on it, a layer left with
//! nothing is dropped, and the cloud insertion index counts the kept layers before it.

use super::{Layer, Stack};
use std::collections::BTreeMap;
use toml::{Table, Value};

#[derive(Default)]
struct Selector {
    /// The whole value below here is selected.
    whole: bool,
    children: BTreeMap<String, Selector>,
}

impl Selector {
    fn new(paths: &[Vec<String>]) -> Self {
        let mut root = Self::default();
        for path in paths {
            root.insert(path);
        }
        root
    }

    fn insert(&mut self, path: &[String]) {
        if self.whole {
            return;
        }
        let Some((key, rest)) = path.split_first() else {
            self.whole = true;
            self.children.clear();
            return;
        };
        self.children.entry(key.clone()).or_default().insert(rest);
    }
}

pub(super) fn select(stack: Stack, paths: &[Vec<String>]) -> Stack {
    let selector = Selector::new(paths);
    let mut layers = Vec::new();
    let mut cloud_insertion_index = 0;
    for (index, layer) in stack.layers.into_iter().enumerate() {
        let toml = select_table(&layer.toml, &selector);
        if toml.is_empty() {
            continue;
        }
        if index < stack.cloud_insertion_index {
            cloud_insertion_index += 1;
        }
        layers.push(Layer { toml, ..layer });
    }
    Stack {
        layers,
        cloud_insertion_index,
    }
}

fn select_table(table: &Table, selector: &Selector) -> Table {
    let mut selected = Table::new();
    for (key, value) in table {
        if let Some(child) = selector.children.get(key) {
            selected.insert(key.clone(), select_value(value, child));
        }
    }
    selected
}

fn select_value(value: &Value, selector: &Selector) -> Value {
    match value {
        Value::Table(table) if !selector.whole => Value::Table(select_table(table, selector)),
        // A selected value, or a non-table where a table was asked for: kept whole, as codex
        // does, so it still overrides the lower layers.
        other => other.clone(),
    }
}
