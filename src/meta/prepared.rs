//! [`Prepared`]: a slot in each cache entry for what another room derives
//! from it once, of a type this room does not know.

use std::any::Any;
use std::sync::{Arc, OnceLock};

/// A slot filled once with a value of a type the cache does not know: the
/// front end's derivations of an entry (its header values), built on the
/// entry's first response and read on every hit at the cost of one atomic
/// load and a type check. A clone (a revalidated entry) keeps what was
/// filled.
#[derive(Clone, Default)]
pub struct Prepared(OnceLock<Arc<dyn Any + Send + Sync>>);

impl Prepared {
    /// The value, built by `init` on the first call. One type per slot:
    /// every caller must ask for the same `T`.
    pub fn get_or_init<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> &T {
        self.0
            .get_or_init(|| Arc::new(init()))
            .downcast_ref::<T>()
            .expect("an entry's prepared slot holds one type")
    }
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = if self.0.get().is_some() {
            "filled"
        } else {
            "empty"
        };
        f.debug_tuple("Prepared").field(&state).finish()
    }
}
