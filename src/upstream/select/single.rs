//! `single`: the first mirror is the primary; the others, in order, are fallbacks.

use std::sync::Arc;

use super::{AttemptOrder, Mirror, Selection};

#[derive(Debug, Default)]
pub struct Single;

impl Selection for Single {
    #[inline]
    fn order(&self, mirrors: &[Arc<Mirror>]) -> AttemptOrder {
        AttemptOrder::list_order(mirrors.len())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{mirrors, DECAY};
    use super::super::{GaugeRegistry, Selection, Selector};
    use crate::config::Strategy;

    #[test]
    fn single_is_primary_then_fallbacks() {
        let gauges = GaugeRegistry::default();
        let ms = mirrors(3, &gauges);
        let sel = Selector::new(Strategy::Single, DECAY);
        assert_eq!(sel.order(&ms).collect::<Vec<_>>(), vec![0, 1, 2]);
    }
}
