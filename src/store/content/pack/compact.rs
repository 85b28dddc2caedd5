//! Compaction: a pack more than half dead has its live blobs copied into
//! the current pack a step at a time, their rows moved in one transaction
//! a step, and is unlinked.

use std::fs;
use std::io;
use std::sync::Arc;

use super::{Packs, PlaceRow};

/// Live bytes copied per step of a compaction: a commit waits at most for
/// one step's append.
const COMPACT_STEP: u64 = 8 * 1024 * 1024;

impl Packs {
    /// The packs to compact: held here, more than half dead, and with no
    /// place still waiting for its row. The current pack, if it is one, is
    /// rolled over first (the next append starts a new one).
    pub(crate) fn compactable(&self) -> Vec<u64> {
        // The writer first: no append is between its write and its places
        // becoming pending.
        let mut writer = self.writer.lock().expect("writer poisoned");
        let waiting: Vec<u64> = (self.pending.lock().expect("pending poisoned").values())
            .map(|p| p.pack)
            .collect();
        let wanted = {
            let held = self.held.lock().expect("held poisoned");
            let tallies = self.tallies.lock().expect("tallies poisoned");
            (held.keys().copied())
                .filter(|id| !waiting.contains(id))
                .filter(|id| tallies.get(id).is_some_and(|t| t.dead * 2 > t.len))
                .collect::<Vec<u64>>()
        };
        if writer.as_ref().is_some_and(|w| wanted.contains(&w.id)) {
            *writer = None;
        }
        wanted
    }

    /// Copies the blobs of `rows` (all in one pack) to the current pack:
    /// one append; their new places. Blocking.
    fn copy(&self, rows: &[PlaceRow]) -> io::Result<Vec<PlaceRow>> {
        let mut bodies = Vec::with_capacity(rows.len());
        for row in rows {
            let place = row.place();
            let file = self.reader(place.pack)?;
            bodies.push(super::super::read_at(
                &file,
                place.start,
                place.len as usize,
            )?);
        }
        let placed = self.write(bodies, None)?;
        Ok((rows.iter().zip(placed))
            .map(|(row, place)| PlaceRow::of(row.digest, place))
            .collect())
    }

    /// After a step's rows moved: memory follows each moved row; the copy
    /// of one that was not moved is dead. So is the copy of a moved row
    /// whose blob memory let go of between the move and now (a release
    /// that deleted the row at its old place, so found none): those rows
    /// are returned, for the caller to delete.
    fn settle(&self, moves: &[(PlaceRow, PlaceRow)], moved: &[bool]) -> Vec<PlaceRow> {
        let mut orphans = Vec::new();
        for ((from, to), moved) in moves.iter().zip(moved) {
            if *moved && (self.places).move_place(&from.digest, from.place(), to.place()) {
                continue;
            }
            if *moved {
                orphans.push(*to);
            }
            self.count_dead(to.pack as u64, to.length as u64);
        }
        self.budget
            .add_committed(moves.iter().map(|(_, to)| to.length as u64).sum());
        orphans
    }

    /// Unlinks a compacted pack; open readers keep their descriptor.
    /// Returns its length.
    fn retire(&self, pack: u64) -> io::Result<u64> {
        fs::remove_file(self.path(pack))?;
        self.readers
            .write()
            .expect("readers poisoned")
            .remove(&pack);
        self.held.lock().expect("held poisoned").remove(&pack);
        let tally = self.tallies.lock().expect("tallies poisoned").remove(&pack);
        let len = tally.unwrap_or_default().len;
        self.budget.sub_committed(len);
        Ok(len)
    }
}

/// Compacts every pack more than half dead ([`Packs::compactable`]): its
/// live blobs copied into the current pack a step at a time, their rows
/// moved in one transaction a step, then the pack unlinked. Returns the
/// bytes of the packs unlinked and of the blobs copied. Commits append
/// between steps; readers keep reading the old pack's descriptor.
pub(crate) async fn compact(packs: Arc<Packs>) -> io::Result<(u64, u64)> {
    let Some(rows) = packs.rows.get().cloned() else {
        return Ok((0, 0));
    };
    let _one = packs.compacting.lock().await;
    let (mut freed, mut copied) = (0, 0);
    for pack in packs.compactable() {
        let live = rows.in_pack(pack as i64).await?;
        let mut at = 0;
        while at < live.len() {
            let mut end = at;
            let mut bytes = 0;
            while end < live.len() && (end == at || bytes < COMPACT_STEP) {
                bytes += live[end].length as u64;
                end += 1;
            }
            let step: Vec<PlaceRow> = live[at..end].to_vec();
            at = end;
            let p = packs.clone();
            let to = tokio::task::spawn_blocking(move || p.copy(&step).map(|to| (step, to)))
                .await
                .map_err(io::Error::other)??;
            let moves: Vec<(PlaceRow, PlaceRow)> = to.0.into_iter().zip(to.1).collect();
            let moved = rows.moved(moves.clone()).await?;
            for orphan in packs.settle(&moves, &moved) {
                rows.forget(orphan.digest, Some(orphan)).await?;
            }
            copied += bytes;
        }
        let p = packs.clone();
        freed += tokio::task::spawn_blocking(move || p.retire(pack))
            .await
            .map_err(io::Error::other)??;
    }
    if freed > 0 {
        tracing::info!(freed, copied, "compacted packs");
    }
    Ok((freed, copied))
}

#[cfg(test)]
mod tests {
    //! Compaction against a release that falls between a step's rows moving
    //! in the database and memory following them, made to fall there every
    //! time (the random lifetime test in `cache::tests` meets it by chance).

    use std::sync::{Arc, Mutex, OnceLock};

    use bytes::Bytes;
    use futures_util::future::BoxFuture;

    use super::compact;
    use crate::store::budget::Budget;
    use crate::store::content::pack::{Packs, PlaceRow, PlaceRows};
    use crate::store::digest::Digest;

    /// The database's place rows, in memory. Once `moved` moved the rows,
    /// it releases the digest in `race`, if any, as `LocalBlobs::remove`
    /// does: after the database's move, before memory follows.
    #[derive(Default)]
    struct Rows {
        rows: Mutex<Vec<PlaceRow>>,
        packs: OnceLock<Arc<Packs>>,
        race: Mutex<Option<Digest>>,
    }

    impl Rows {
        fn all(&self) -> Vec<PlaceRow> {
            self.rows.lock().unwrap().clone()
        }

        /// What a release of `digest` does to the store: its row deleted
        /// at the place memory holds, then memory let go.
        async fn release(&self, digest: Digest) {
            let packs = self.packs.get().unwrap();
            let deleted = self.forget(digest, packs.row_of(&digest)).await.unwrap();
            assert!(packs.forget(&digest, &deleted));
        }
    }

    impl PlaceRows for Rows {
        fn page(&self, _after: Option<PlaceRow>) -> BoxFuture<'_, std::io::Result<Vec<PlaceRow>>> {
            Box::pin(async { Ok(Vec::new()) })
        }

        fn lookup(&self, digest: Digest) -> BoxFuture<'_, std::io::Result<Option<PlaceRow>>> {
            let found = self.all().into_iter().find(|r| r.digest == digest);
            Box::pin(async move { Ok(found) })
        }

        fn in_pack(&self, pack: i64) -> BoxFuture<'_, std::io::Result<Vec<PlaceRow>>> {
            let rows = self.all().into_iter().filter(|r| r.pack == pack).collect();
            Box::pin(async move { Ok(rows) })
        }

        fn forget(
            &self,
            digest: Digest,
            known: Option<PlaceRow>,
        ) -> BoxFuture<'_, std::io::Result<Vec<PlaceRow>>> {
            let mut rows = self.rows.lock().unwrap();
            let (gone, kept) = rows
                .drain(..)
                .partition(|r| r.digest == digest && known.is_none_or(|k| k == *r));
            *rows = kept;
            Box::pin(async move { Ok(gone) })
        }

        fn moved(
            &self,
            moves: Vec<(PlaceRow, PlaceRow)>,
        ) -> BoxFuture<'_, std::io::Result<Vec<bool>>> {
            Box::pin(async move {
                let moved = {
                    let mut rows = self.rows.lock().unwrap();
                    (moves.iter())
                        .map(|(from, to)| match rows.iter_mut().find(|r| **r == *from) {
                            Some(row) => {
                                *row = *to;
                                true
                            }
                            None => false,
                        })
                        .collect()
                };
                let racing = self.race.lock().unwrap().take();
                if let Some(digest) = racing {
                    self.release(digest).await;
                }
                Ok(moved)
            })
        }
    }

    /// Four 1 KiB blobs packed in one batch, their rows written, three of
    /// them released: the pack is three quarters dead.
    async fn three_quarters_dead(dir: &std::path::Path) -> (Arc<Packs>, Arc<Rows>, Digest) {
        let packs = Arc::new(Packs::open(dir, Arc::new(Budget::new(u64::MAX))).unwrap());
        packs.set_below(64 * 1024);
        let rows = Arc::new(Rows::default());
        let _ = rows.packs.set(packs.clone());
        let _ = packs.rows.set(rows.clone());
        let items: Vec<(Bytes, Digest)> = (0..4u8)
            .map(|n| {
                let body = Bytes::from(vec![n; 1024]);
                let digest = Digest::of(&body);
                (body, digest)
            })
            .collect();
        let digests: Vec<Digest> = items.iter().map(|(_, d)| *d).collect();
        assert_eq!(packs.append(&items).unwrap(), [true; 4]);
        let written = packs.pending_rows(&digests);
        rows.rows.lock().unwrap().extend(&written);
        packs.written(&written);
        for digest in &digests[1..] {
            rows.release(*digest).await;
        }
        assert_eq!(packs.dead_bytes(), 3 * 1024);
        (packs, rows, digests[0])
    }

    #[tokio::test]
    async fn a_live_blob_moves_with_its_row() {
        let dir = tempfile::tempdir().unwrap();
        let (packs, rows, live) = three_quarters_dead(dir.path()).await;
        let old = rows.all();
        assert_eq!(compact(packs.clone()).await.unwrap(), (4 * 1024, 1024));
        let now = rows.all();
        assert_eq!(now.len(), 1);
        assert!(now[0].digest == live && now[0].pack != old[0].pack);
        assert_eq!(packs.row_of(&live), Some(now[0]));
        assert_eq!(packs.dead_bytes(), 0);
    }

    #[tokio::test]
    async fn a_release_between_the_move_and_memory_leaves_no_row_and_counts_the_copy_dead() {
        let dir = tempfile::tempdir().unwrap();
        let (packs, rows, live) = three_quarters_dead(dir.path()).await;
        *rows.race.lock().unwrap() = Some(live);
        assert_eq!(compact(packs.clone()).await.unwrap(), (4 * 1024, 1024));
        // The release deleted nothing (the row had moved); compaction
        // deleted the moved row, and its copy is dead bytes of the new pack.
        assert!(rows.all().is_empty());
        assert!(!packs.holds(&live));
        assert_eq!(packs.dead_bytes(), 1024);
    }
}
