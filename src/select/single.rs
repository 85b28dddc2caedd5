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
