//! Purges win: a purge (the admin API's DELETE of a path or of a remote,
//! and `verify --remove` through Redis) makes the next request for each
//! purged path go upstream, whatever is in flight.
//!
//! One mechanism, a **purge generation**: this process's purge clock, and
//! the clock value of the last purge of each key, each remote and of
//! everything. Whatever may make an entry visible later — a fill (which
//! could commit, or be joined), a database lookup (which puts the row it
//! read in memory), a remembered 404 — takes a [`Ticket`] (the clock) when
//! it starts, and its result is made visible only if no purge covering its
//! key came after the ticket ([`Purges::current`]): a stale fill is not
//! joined and its commit leaves no row (checked before the blob is written,
//! and again, under this module's lock, before the entry goes into memory;
//! a row written meanwhile is deleted again); a stale lookup serves its
//! request but is not remembered. A purge takes two generations, one
//! before the rows are deleted (every fill of the key from before it is
//! now stale) and one after (a lookup that read a row before the deletion
//! is not remembered), and forgets the in-memory tiers at both.
//!
//! Across instances, the purge's Redis message makes every other instance
//! take the same two steps at once ([`super::cluster::Cluster::purge`]).
//! What memory forgets is [`MetadataStore::purge_memory`]'s
//! (`super::memory`); the rows and blobs are the façade's
//! (`crate::cache::purge`).
//!
//! [`MetadataStore::purge_memory`]: super::MetadataStore::purge_memory
//!
//! The records are pruned when there are many: every ticket taken before
//! the prune is then stale (a fill in flight at that moment is refetched
//! next time, which is safe).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What a purge covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// One key (`remote/path`, with a variant if it has one).
    Key(String),
    /// Every key of a remote.
    Remote(String),
    /// Everything.
    All,
}

impl Scope {
    /// Whether `key` is in this scope.
    pub fn covers(&self, key: &str) -> bool {
        match self {
            Scope::Key(k) => k == key,
            Scope::Remote(remote) => key
                .strip_prefix(remote.as_str())
                .is_some_and(|rest| rest.starts_with('/')),
            Scope::All => true,
        }
    }
}

/// The purge clock when something began that may make an entry visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(u64);

/// Records kept before they are pruned.
const MAX_RECORDS: usize = 10_000;

#[derive(Default)]
pub struct Purges {
    /// The clock: the generation of the last purge. Read without the lock
    /// on the common path (no purge since the ticket).
    clock: AtomicU64,
    records: Mutex<Records>,
}

#[derive(Default)]
struct Records {
    all: u64,
    /// Tickets below this are stale (records were pruned).
    floor: u64,
    remotes: HashMap<String, u64>,
    keys: HashMap<String, u64>,
    /// Rows deleted outside a purge (eviction, a forgotten or contradicted
    /// row), by key: a read of the row from before is not remembered
    /// ([`Purges::if_read_current`]). Fills are not made stale by them.
    deleted: HashMap<String, u64>,
    /// The last deletion of rows by something other than their keys (a
    /// digest's): every read from before it is stale.
    deleted_all: u64,
    /// Read tickets below this are stale (`deleted` was pruned).
    deleted_floor: u64,
}

impl Purges {
    pub fn ticket(&self) -> Ticket {
        Ticket(self.clock.load(Ordering::Acquire))
    }

    /// Whether no purge covering `key` came after `ticket`.
    pub fn current(&self, key: &str, ticket: Ticket) -> bool {
        if self.clock.load(Ordering::Acquire) <= ticket.0 {
            return true;
        }
        let records = self.records.lock().expect("purges poisoned");
        records.current(key, ticket)
    }

    /// Runs `visible` (which makes something of `key` visible in memory)
    /// only if `ticket` is still current, under the lock a purge takes to
    /// record itself: a purge comes wholly before (and `visible` does not
    /// run) or wholly after (and forgets what it did). Returns whether it ran.
    pub(crate) fn if_current(&self, key: &str, ticket: Ticket, visible: impl FnOnce()) -> bool {
        self.if_records(ticket, |r| r.current(key, ticket), visible)
    }

    /// [`Purges::if_current`] for what a read of the database found: also
    /// not when a row of `key` was deleted after `ticket`
    /// ([`Purges::deleted`]), so an evicted or forgotten row read just
    /// before its deletion is not put back in memory.
    pub(crate) fn if_read_current(
        &self,
        key: &str,
        ticket: Ticket,
        visible: impl FnOnce(),
    ) -> bool {
        self.if_records(
            ticket,
            |r| r.current(key, ticket) && r.read_current(key, ticket),
            visible,
        )
    }

    /// Runs `visible` under the lock a purge takes to record itself, so a
    /// purge comes wholly before or wholly after it.
    pub(crate) fn under_lock(&self, visible: impl FnOnce()) {
        let _records = self.records.lock().expect("purges poisoned");
        visible();
    }

    /// Runs `visible` under the records' lock unless the clock moved past
    /// `ticket` and the records say it is no longer `current`.
    fn if_records(
        &self,
        ticket: Ticket,
        current: impl FnOnce(&Records) -> bool,
        visible: impl FnOnce(),
    ) -> bool {
        let records = self.records.lock().expect("purges poisoned");
        if self.clock.load(Ordering::Acquire) > ticket.0 && !current(&records) {
            return false;
        }
        visible();
        true
    }

    /// Notes rows deleted outside a purge: `key`'s, or (`None`) any rows,
    /// and runs `forget` (which drops their records from memory) under the
    /// same lock: a read of them from before either is remembered wholly
    /// before (and forgotten here) or is not remembered.
    pub fn deleted(&self, key: Option<&str>, forget: impl FnOnce()) {
        self.advance(
            |records, generation| match key {
                Some(key) => {
                    if records.deleted.len() >= MAX_RECORDS {
                        records.deleted.clear();
                        records.deleted_floor = generation;
                    }
                    records.deleted.insert(key.to_string(), generation);
                }
                None => records.deleted_all = generation,
            },
            forget,
        );
    }

    /// Records a purge of `scope` and runs `forget` (which drops what memory
    /// holds of it) under the same lock; returns the new generation.
    pub fn purge(&self, scope: &Scope, forget: impl FnOnce()) -> u64 {
        self.advance(
            |records, generation| {
                if records.keys.len() + records.remotes.len() >= MAX_RECORDS {
                    records.keys.clear();
                    records.remotes.clear();
                    records.floor = generation;
                }
                match scope {
                    Scope::Key(key) => {
                        records.keys.insert(key.clone(), generation);
                    }
                    Scope::Remote(remote) => {
                        records.remotes.insert(remote.clone(), generation);
                    }
                    Scope::All => records.all = generation,
                }
            },
            forget,
        )
    }

    /// One step of the clock, under the records' lock: the next generation
    /// `note`d in the records, `forget` run, then the clock moved to it
    /// (read without the lock, it never runs ahead of the records).
    fn advance(&self, note: impl FnOnce(&mut Records, u64), forget: impl FnOnce()) -> u64 {
        let mut records = self.records.lock().expect("purges poisoned");
        let generation = self.clock.load(Ordering::Acquire) + 1;
        note(&mut records, generation);
        forget();
        self.clock.store(generation, Ordering::Release);
        generation
    }
}

impl Records {
    fn current(&self, key: &str, ticket: Ticket) -> bool {
        let t = ticket.0;
        if t < self.floor || t < self.all {
            return false;
        }
        if self.keys.get(key).is_some_and(|&g| g > t) {
            return false;
        }
        let remote = key.split('/').next().unwrap_or(key);
        self.remotes.get(remote).is_none_or(|&g| g <= t)
    }

    /// Whether no deletion of `key`'s row came after `ticket`.
    fn read_current(&self, key: &str, ticket: Ticket) -> bool {
        let t = ticket.0;
        t >= self.deleted_floor
            && t >= self.deleted_all
            && self.deleted.get(key).is_none_or(|&g| g <= t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_makes_earlier_reads_of_its_rows_stale_and_no_fills() {
        let purges = Purges::default();
        let before = purges.ticket();
        purges.deleted(Some("r/a"), || {});
        assert!(!purges.if_read_current("r/a", before, || {}));
        assert!(purges.if_read_current("r/b", before, || {}));
        assert!(
            purges.if_current("r/a", before, || {}),
            "a fill is not stale"
        );
        let after = purges.ticket();
        assert!(purges.if_read_current("r/a", after, || {}));
        purges.deleted(None, || {});
        assert!(!purges.if_read_current("r/b", after, || {}));
        assert!(purges.if_current("r/b", after, || {}));
    }

    #[test]
    fn a_purge_makes_earlier_tickets_of_its_scope_stale_and_no_others() {
        let purges = Purges::default();
        let before = purges.ticket();
        assert!(purges.current("r/a", before));
        purges.purge(&Scope::Key("r/a".into()), || {});
        assert!(!purges.current("r/a", before));
        assert!(purges.current("r/b", before));
        assert!(purges.current("rr/a", before));
        let after = purges.ticket();
        assert!(purges.current("r/a", after));
        purges.purge(&Scope::Remote("r".into()), || {});
        assert!(!purges.current("r/b", after));
        assert!(!purges.current("r/x?variant", after));
        assert!(purges.current("rr/b", after));
        let later = purges.ticket();
        assert!(!purges.if_current("r/b", after, || panic!("stale")));
        let mut ran = false;
        assert!(purges.if_current("r/b", later, || ran = true));
        assert!(ran);
        purges.purge(&Scope::All, || {});
        assert!(!purges.current("rr/b", later));
        assert!(Scope::Remote("r".into()).covers("r/a/b"));
        assert!(!Scope::Remote("r".into()).covers("rr/a"));
    }

    #[test]
    fn pruning_makes_every_older_ticket_stale() {
        let purges = Purges::default();
        let old = purges.ticket();
        for i in 0..MAX_RECORDS + 1 {
            purges.purge(&Scope::Key(format!("r/{i}")), || {});
        }
        assert!(!purges.current("other/x", old));
        assert!(purges.current("other/x", purges.ticket()));
    }
}
