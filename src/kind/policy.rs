//! Cache policy: which paths of a remote are immutable (cached forever: the
//! ecosystem's rules, plus the operator's patterns) and how long the rest
//! stay fresh before they are revalidated upstream.

use std::time::Duration;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use super::Kind;

#[derive(Debug)]
pub struct CachePolicy {
    kind: Kind,
    immutable: GlobSet,
    revalidate_after: Duration,
}

impl CachePolicy {
    /// Patterns were checked when the config was validated; `*` crosses `/`,
    /// so `*.deb` matches a `.deb` at any depth, and `pool/**` a whole tree.
    pub fn new(kind: Kind, patterns: &[String], revalidate_after: Duration) -> CachePolicy {
        let mut set = GlobSetBuilder::new();
        for pattern in patterns {
            let glob = GlobBuilder::new(pattern)
                .build()
                .expect("patterns are validated with the config");
            set.add(glob);
        }
        CachePolicy {
            kind,
            immutable: set.build().expect("validated patterns build"),
            revalidate_after,
        }
    }

    /// The kind's own rules, then the operator's extra patterns.
    pub fn is_immutable(&self, path: &str) -> bool {
        self.kind.is_immutable(path) || self.immutable.is_match(path)
    }

    /// Whether an entry cached at `path`, `age` since it was fetched or
    /// revalidated, may be served without asking upstream.
    pub fn is_fresh(&self, path: &str, age: Duration) -> bool {
        age < self.revalidate_after || self.is_immutable(path)
    }

    /// [`is_fresh`](CachePolicy::is_fresh) for a request whose plan is at
    /// hand: `immutable` is the kind's answer ([`Plan::immutable`]), so
    /// only the operator's patterns are left to match.
    ///
    /// [`Plan::immutable`]: super::Plan::immutable
    pub fn is_fresh_as(&self, immutable: bool, path: &str, age: Duration) -> bool {
        age < self.revalidate_after || immutable || self.immutable.is_match(path)
    }
}
