//! What memory holds of the rows: entries put in the index and the entry
//! cache only while no purge or deletion came after what read or wrote them,
//! and forgotten for a purge's scope under its generation's lock (see
//! [`super::purge`]).

use std::sync::Arc;

use super::entry::Entry;
use super::metadata::MetadataStore;
use super::purge::{Scope, Ticket};
use crate::path::ArtifactPath;

impl MetadataStore {
    /// Takes a purge generation for `scope` and forgets what memory holds
    /// of it (entries, remembered 404s), under the generation's lock.
    pub fn purge_memory(&self, scope: &Scope) -> u64 {
        self.purges.purge(scope, || match scope {
            Scope::Key(key) => {
                self.index.remove(key);
                self.cache.invalidate(key);
                self.negative.invalidate(key);
            }
            Scope::All => {
                self.index.clear();
                self.cache.invalidate_all();
                self.negative.invalidate_all();
            }
            Scope::Remote(remote) => {
                self.index.remove_remote(remote);
                for (key, _) in self.cache.iter() {
                    if scope.covers(&key) {
                        self.cache.invalidate(key.as_str());
                    }
                }
                for (key, _) in self.negative.iter() {
                    if scope.covers(&key) {
                        self.negative.invalidate(key.as_str());
                    }
                }
            }
        })
    }

    /// Puts `entry`, the row just written (a commit's, under its locks),
    /// in memory for `path` unless a purge covering it came after
    /// `ticket`; returns whether it did.
    pub(crate) fn remember(&self, path: &ArtifactPath, entry: &Arc<Entry>, ticket: Ticket) -> bool {
        self.purges.if_current(path.key(), ticket, || {
            self.index.insert(path.key(), entry);
            self.cache.insert(path.key().to_string(), entry.clone());
        })
    }

    /// [`MetadataStore::remember`] for a row read (or revalidated) a while
    /// ago: its record goes in only where the index names the same bytes
    /// for the key, or none, so a commit that replaced the row since is
    /// not undone (the index's digest counts must name the rows': a record
    /// put back for old bytes would take the new bytes' count down).
    pub(crate) fn remember_read(
        &self,
        path: &ArtifactPath,
        entry: &Arc<Entry>,
        ticket: Ticket,
    ) -> bool {
        self.purges.if_read_current(path.key(), ticket, || {
            if self.index.insert_unless_other(path.key(), entry) {
                self.cache.insert(path.key().to_string(), entry.clone());
            }
        })
    }
}
