//! [`Names`]: short strings the entry index keeps as numbers (content
//! types, remote names), so a record holds two bytes for each.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// Interns short strings as numbers from 1 (`None` past `u16::MAX`).
#[derive(Default)]
pub(super) struct Names(RwLock<Table>);

#[derive(Default)]
struct Table {
    names: Vec<Arc<str>>,
    numbers: HashMap<Arc<str>, u16>,
}

impl Names {
    /// The number of `name`, interned if new (`None`: the table is full).
    pub(super) fn number(&self, name: &str) -> Option<u16> {
        let known = self
            .0
            .read()
            .expect("names poisoned")
            .numbers
            .get(name)
            .copied();
        if known.is_some() {
            return known;
        }
        let mut table = self.0.write().expect("names poisoned");
        if let Some(&n) = table.numbers.get(name) {
            return Some(n);
        }
        let n = u16::try_from(table.names.len() + 1).ok()?;
        let name: Arc<str> = Arc::from(name);
        table.names.push(name.clone());
        table.numbers.insert(name, n);
        Some(n)
    }

    /// The name numbered `n`, copied.
    pub(super) fn name(&self, n: u16) -> Option<String> {
        let table = self.0.read().expect("names poisoned");
        let name = table.names.get(usize::from(n).checked_sub(1)?)?;
        Some(String::from(&**name))
    }
}
