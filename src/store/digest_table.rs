//! [`DigestTable`]: every digest this process holds something of, each
//! once: how many of the entry index's records name it (the rows that
//! reference its blob), its size and, for a packed blob, where it lies. The entry
//! index refers to a digest by its number here (4 bytes, where the digest
//! is 32), and the packs keep their places in the same record, so a
//! digest that a row names and a pack holds is kept once, not in the index,
//! the packs' places and a table of counts each.
//!
//! A record is 48 bytes (the digest, its count, its place or its size: a
//! packed blob's size is its place's length; the pack by a 4-byte number
//! of this table's), in chunks of
//! 14 KiB that never move, behind a hash table of the records' numbers, in
//! [`SHARDS`] shards by a byte of the digest. A number stays the digest's
//! while a record of the index names it or a pack holds it; a record
//! neither keeps is freed, and its number may be given to another digest
//! (a freed slot is reused, not given back: a shard's chunks go only when
//! it empties, as a hash map keeps its size).
//! So a number is read back into a digest only by a holder of a count: the
//! entry index reads it under the lock of the shard whose record holds that
//! count (`crate::meta::index`).
//!
//! Counts are changed by the entry index under its own shard's lock, with
//! the record that names the digest: what "does any row reference this
//! blob" (every release of a blob, every batch of commits) reads where the
//! index is complete (`MetadataStore::digest_referenced`), so the embedded
//! database keeps no index on `entries.digest`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::RwLock;

use hashbrown::HashTable;

use super::content::pack::Place;
use super::digest::Digest;

/// Bits of a number that pick the shard.
const SHARD_BITS: u32 = 6;
/// Shards: two threads rarely take one lock.
const SHARDS: usize = 1 << SHARD_BITS;
/// Records a chunk holds: 298 (the entry index's chunk size, for the
/// allocator's sake: `crate::dense::CHUNK_BYTES`).
const PER_CHUNK: usize = crate::dense::CHUNK_BYTES / std::mem::size_of::<Record>();

/// One digest: 48 bytes (its fields aligned to 4 at most).
#[derive(Clone, Copy)]
struct Record {
    digest: [u8; 32],
    /// Records of the entry index that name it.
    named: u32,
    /// The pack holding it, by its number in [`PackNumbers`]; 0: not packed.
    pack: u32,
    /// Packed: where it starts in the pack, and its length (its size). Not
    /// packed: its size, low half first.
    span: [u32; 2],
}

/// A freed slot's record.
const VACANT: Record = Record {
    digest: [0; 32],
    named: 0,
    pack: 0,
    span: [0; 2],
};

impl Record {
    /// The blob's size: its place's length when packed.
    fn size(&self) -> u64 {
        if self.pack == 0 {
            u64::from(self.span[0]) | (u64::from(self.span[1]) << 32)
        } else {
            u64::from(self.span[1])
        }
    }

    fn set_size(&mut self, size: u64) {
        if self.pack == 0 {
            self.span = [size as u32, (size >> 32) as u32];
        }
    }

    /// Sets the place (the pack by its number); `false`, and none set,
    /// where it does not fit: a start or length past 32 bits (a pack rolls
    /// over at `pack::ROLL_AT`, and a write to one past 4 GiB is refused,
    /// so no place this store wrote is one). Without a place, the size is
    /// the last place's length.
    fn set_place(&mut self, place: Option<(u32, Place)>) -> bool {
        let Some((pack, place)) = place else {
            let size = self.size();
            self.pack = 0;
            self.set_size(size);
            return true;
        };
        match (u32::try_from(place.start), u32::try_from(place.len)) {
            (Ok(start), Ok(len)) => {
                (self.pack, self.span) = (pack, [start, len]);
                true
            }
            _ => false,
        }
    }

    fn in_use(&self) -> bool {
        self.named > 0 || self.pack != 0
    }
}

/// The packs' ids by number: a record names its pack in 4 bytes where the
/// id takes 8. A number is never given to another pack (a process meets
/// few packs: each holds up to `pack::ROLL_AT` bytes).
#[derive(Default)]
struct PackNumbers {
    ids: Vec<u64>,
    numbers: HashMap<u64, u32>,
}

impl PackNumbers {
    fn id(&self, number: u32) -> u64 {
        self.ids[number as usize - 1]
    }
}

fn hash(digest: &[u8; 32]) -> u64 {
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

fn shard_of(digest: &[u8; 32]) -> usize {
    usize::from(digest[8]) % SHARDS
}

/// A digest's number: its slot in its shard, then the shard.
fn number(shard: usize, slot: u32) -> u32 {
    assert!(
        slot < 1 << (32 - SHARD_BITS),
        "a shard holds fewer than 2^26 digests"
    );
    (slot << SHARD_BITS) | shard as u32
}

fn split(number: u32) -> (usize, u32) {
    ((number as usize) % SHARDS, number >> SHARD_BITS)
}

#[derive(Default)]
struct Shard {
    chunks: Vec<Vec<Record>>,
    /// Slots freed, for the next digest.
    free: Vec<u32>,
    /// The slots in use, by their digest's hash.
    slots: HashTable<u32>,
}

fn at(chunks: &[Vec<Record>], slot: u32) -> &Record {
    &chunks[slot as usize / PER_CHUNK][slot as usize % PER_CHUNK]
}

impl Shard {
    fn at_mut(&mut self, slot: u32) -> &mut Record {
        &mut self.chunks[slot as usize / PER_CHUNK][slot as usize % PER_CHUNK]
    }

    fn find(&self, digest: &[u8; 32]) -> Option<u32> {
        let chunks = &self.chunks;
        (self.slots)
            .find(hash(digest), |&s| at(chunks, s).digest == *digest)
            .copied()
    }

    fn get(&self, digest: &[u8; 32]) -> Option<&Record> {
        self.find(digest).map(|s| at(&self.chunks, s))
    }

    fn find_or_add(&mut self, digest: &[u8; 32]) -> u32 {
        if let Some(slot) = self.find(digest) {
            return slot;
        }
        let record = Record {
            digest: *digest,
            ..VACANT
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                *self.at_mut(slot) = record;
                slot
            }
            None => {
                let slot = match self.chunks.last() {
                    None => 0,
                    Some(last) => ((self.chunks.len() - 1) * PER_CHUNK + last.len()) as u32,
                };
                match self.chunks.last_mut() {
                    Some(last) if last.len() < PER_CHUNK => last.push(record),
                    _ => {
                        let mut chunk = Vec::with_capacity(PER_CHUNK);
                        chunk.push(record);
                        self.chunks.push(chunk);
                    }
                }
                slot
            }
        };
        let chunks = &self.chunks;
        (self.slots).insert_unique(hash(digest), slot, |&s| hash(&at(chunks, s).digest));
        slot
    }

    /// Frees `slot` where neither a count nor a place keeps it.
    fn free_unused(&mut self, slot: u32) {
        let record = *at(&self.chunks, slot);
        if record.in_use() {
            return;
        }
        if let Ok(entry) = self.slots.find_entry(hash(&record.digest), |&s| s == slot) {
            entry.remove();
        }
        if self.slots.is_empty() {
            // Nothing left: the chunks and the free list go too.
            *self = Shard::default();
            return;
        }
        *self.at_mut(slot) = VACANT;
        self.free.push(slot);
    }

    /// Changes the record in `slot` with `change`; a record then unused
    /// is freed. Returns what `change` did.
    fn change<T>(&mut self, slot: u32, change: impl FnOnce(&mut Record) -> T) -> T {
        let done = change(self.at_mut(slot));
        self.free_unused(slot);
        done
    }
}

pub struct DigestTable {
    shards: Box<[RwLock<Shard>]>,
    /// The packs' ids the records name by number. Taken after a shard's
    /// lock, and written with none held.
    packs: RwLock<PackNumbers>,
    /// The sizes of the digests the index names, each once: what the rows
    /// reference, as the database's `stored_bytes` sums it (where the rows
    /// agree on a digest's size). Added when a digest's count starts, taken
    /// off when it ends, changed with a named digest's size.
    bytes: AtomicU64,
    /// Digests the index names.
    named: AtomicUsize,
}

impl Default for DigestTable {
    fn default() -> DigestTable {
        DigestTable {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            packs: RwLock::default(),
            bytes: AtomicU64::new(0),
            named: AtomicUsize::new(0),
        }
    }
}

impl DigestTable {
    fn shard(&self, n: usize) -> &RwLock<Shard> {
        &self.shards[n]
    }

    fn write(&self, digest: &[u8; 32]) -> std::sync::RwLockWriteGuard<'_, Shard> {
        self.shard(shard_of(digest))
            .write()
            .expect("digest table poisoned")
    }

    fn read(&self, digest: &[u8; 32]) -> std::sync::RwLockReadGuard<'_, Shard> {
        self.shard(shard_of(digest))
            .read()
            .expect("digest table poisoned")
    }

    fn packs(&self) -> std::sync::RwLockReadGuard<'_, PackNumbers> {
        self.packs.read().expect("pack numbers poisoned")
    }

    /// The number of pack `id`, given it if new (no shard's lock held);
    /// `None` for id 0, which no pack has (`Packs::create`).
    fn pack_number(&self, id: u64) -> Option<u32> {
        if id == 0 {
            return None;
        }
        if let Some(&n) = self.packs().numbers.get(&id) {
            return Some(n);
        }
        let mut packs = self.packs.write().expect("pack numbers poisoned");
        if let Some(&n) = packs.numbers.get(&id) {
            return Some(n);
        }
        packs.ids.push(id);
        let n = u32::try_from(packs.ids.len()).expect("fewer than 2^32 packs");
        packs.numbers.insert(id, n);
        Some(n)
    }

    /// The place of `record`, its pack's id read from `packs`.
    fn place_of(packs: &PackNumbers, record: &Record) -> Option<Place> {
        (record.pack != 0).then(|| Place {
            pack: packs.id(record.pack),
            start: u64::from(record.span[0]),
            len: u64::from(record.span[1]),
        })
    }

    /// Sets the place of `record` (its pack numbered), the sum of the
    /// named digests' sizes kept in step with its size.
    fn place_record(&self, record: &mut Record, place: Option<(u32, Place)>) -> bool {
        let before = record.size();
        if !record.set_place(place) {
            return false;
        }
        if record.named > 0 {
            let after = record.size();
            if after != before {
                // The place's length is the bytes' size: a row that said
                // another was wrong (an imported bundle's, say).
                tracing::warn!(
                    digest = %Digest(record.digest).to_hex(),
                    rows = before,
                    place = after,
                    "a packed blob's length is not the size its rows say"
                );
            }
            self.resize(before, after);
        }
        true
    }

    /// A named digest's size, counted in the sum of sizes, goes from
    /// `before` to `after` (0: not counted).
    fn resize(&self, before: u64, after: u64) {
        let _ = (self.bytes).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
            Some(b.saturating_sub(before).saturating_add(after))
        });
    }

    /// Room for `digests` more digests before the shards' tables of
    /// numbers grow (a table that grows while the index loads leaves its
    /// old buckets to the allocator, and is half empty past its growth).
    pub fn reserve(&self, digests: usize) {
        let each = digests.div_ceil(SHARDS);
        for shard in self.shards.iter() {
            let mut shard = shard.write().expect("digest table poisoned");
            let Shard { chunks, slots, .. } = &mut *shard;
            slots.reserve(each, |&s| hash(&at(chunks, s).digest));
        }
    }

    /// One more record of the index names `digest`, of `size` bytes: its
    /// number, and whether `size` is the size the table holds for it (the
    /// first naming's, or its place's length: a digest has one size, so a
    /// record that says another reads its row).
    pub fn name(&self, digest: &[u8; 32], size: u64) -> (u32, bool) {
        let n = shard_of(digest);
        let mut shard = self.write(digest);
        let slot = shard.find_or_add(digest);
        let record = shard.at_mut(slot);
        if !record.in_use() {
            record.set_size(size);
        }
        if record.named == 0 {
            self.resize(0, record.size());
            self.named.fetch_add(1, Ordering::Relaxed);
        }
        record.named = (record.named.checked_add(1)).expect("fewer than 2^32 rows name a digest");
        (number(n, slot), record.size() == size)
    }

    /// One record fewer names the digest of `number`.
    pub fn unname(&self, number: u32) {
        let (n, slot) = split(number);
        let mut shard = self.shard(n).write().expect("digest table poisoned");
        let record = shard.at_mut(slot);
        let Some(left) = record.named.checked_sub(1) else {
            debug_assert!(false, "a digest no record named");
            return;
        };
        record.named = left;
        if left == 0 {
            self.resize(record.size(), 0);
            self.named.fetch_sub(1, Ordering::Relaxed);
            shard.free_unused(slot);
        }
    }

    /// The digest of `number` and its size, which the caller's record
    /// names (so it is still that digest's).
    pub fn digest(&self, number: u32) -> (Digest, u64) {
        let (n, slot) = split(number);
        let shard = self.shard(n).read().expect("digest table poisoned");
        let record = at(&shard.chunks, slot);
        (Digest(record.digest), record.size())
    }

    /// The number of `digest`, if the table holds it.
    pub fn number(&self, digest: &[u8; 32]) -> Option<u32> {
        let slot = self.read(digest).find(digest)?;
        Some(number(shard_of(digest), slot))
    }

    /// Whether a record of the index names `digest`.
    pub fn is_named(&self, digest: &[u8; 32]) -> bool {
        self.read(digest).get(digest).is_some_and(|r| r.named > 0)
    }

    /// The sizes of the digests named, each once.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// How many digests are named.
    pub fn named(&self) -> usize {
        self.named.load(Ordering::Relaxed)
    }

    /// No record of the index names anything (the caller holds every
    /// shard of the index, which dropped every record).
    pub fn unname_all(&self) {
        for shard in self.shards.iter() {
            let mut shard = shard.write().expect("digest table poisoned");
            let slots: Vec<u32> = shard.slots.iter().copied().collect();
            for slot in slots {
                shard.at_mut(slot).named = 0;
                shard.free_unused(slot);
            }
        }
        self.bytes.store(0, Ordering::Relaxed);
        self.named.store(0, Ordering::Relaxed);
    }

    /// Where the packed blob `digest` lies.
    pub(crate) fn place(&self, digest: &Digest) -> Option<Place> {
        let shard = self.read(&digest.0);
        let record = shard.get(&digest.0).filter(|r| r.pack != 0)?;
        DigestTable::place_of(&self.packs(), record)
    }

    /// Sets the place of `digest`; `false`, and none set, where it does not
    /// fit a record (a place no write of this store made: its blob is not
    /// taken to be packed).
    pub(crate) fn set_place(&self, digest: &Digest, place: Place) -> bool {
        let Some(pack) = self.pack_number(place.pack) else {
            return false;
        };
        let mut shard = self.write(&digest.0);
        let slot = shard.find_or_add(&digest.0);
        shard.change(slot, |r| self.place_record(r, Some((pack, place))))
    }

    /// [`DigestTable::set_place`] where `digest` has no place yet; whether
    /// it was set.
    pub(crate) fn set_place_if_none(&self, digest: &Digest, place: Place) -> bool {
        let Some(pack) = self.pack_number(place.pack) else {
            return false;
        };
        let mut shard = self.write(&digest.0);
        let slot = shard.find_or_add(&digest.0);
        shard.change(slot, |r| {
            r.pack == 0 && self.place_record(r, Some((pack, place)))
        })
    }

    /// Takes the place of `digest` away, returning it.
    pub(crate) fn take_place(&self, digest: &Digest) -> Option<Place> {
        let mut shard = self.write(&digest.0);
        let slot = shard.find(&digest.0)?;
        shard.change(slot, |r| {
            let place = DigestTable::place_of(&self.packs(), r);
            self.place_record(r, None);
            place
        })
    }

    /// Moves the place of `digest` from `from` to `to`, only where it is
    /// `from` (and `to` fits); whether it moved.
    pub(crate) fn move_place(&self, digest: &Digest, from: Place, to: Place) -> bool {
        let Some(pack) = self.pack_number(to.pack) else {
            return false;
        };
        let mut shard = self.write(&digest.0);
        let Some(slot) = shard.find(&digest.0) else {
            return false;
        };
        shard.change(slot, |r| {
            DigestTable::place_of(&self.packs(), r) == Some(from)
                && self.place_record(r, Some((pack, to)))
        })
    }

    /// Calls `visit` with every place held (under a shard's lock: `visit`
    /// must not change this table).
    pub(crate) fn for_each_place(&self, mut visit: impl FnMut(&Digest, Place)) {
        for shard in self.shards.iter() {
            let shard = shard.read().expect("digest table poisoned");
            let packs = self.packs();
            for slot in shard.slots.iter() {
                let record = at(&shard.chunks, *slot);
                if let Some(place) = DigestTable::place_of(&packs, record) {
                    visit(&Digest(record.digest), place);
                }
            }
        }
    }

    /// Keeps the places `keep` says to; the others are taken away (`keep`
    /// runs under a shard's lock, and must not change this table).
    pub(crate) fn retain_places(&self, mut keep: impl FnMut(&Place) -> bool) {
        for shard in self.shards.iter() {
            let mut shard = shard.write().expect("digest table poisoned");
            let packs = self.packs();
            let slots: Vec<u32> = shard.slots.iter().copied().collect();
            for slot in slots {
                let record = shard.at_mut(slot);
                if DigestTable::place_of(&packs, record).is_some_and(|p| !keep(&p)) {
                    self.place_record(record, None);
                    shard.free_unused(slot);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn digest(n: u64) -> Digest {
        let mut d = [0u8; 32];
        d[..8].copy_from_slice(&n.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
        d[8..16].copy_from_slice(&n.to_le_bytes());
        Digest(d)
    }

    /// A place of digest `n` (whose size is `n`) at `step`.
    fn place(n: u64, step: u64) -> Place {
        Place {
            pack: 1 + step % 3,
            start: step * 10,
            len: n,
        }
    }

    #[test]
    fn counts_and_places_match_a_model_through_random_changes() {
        let mut rng = crate::test_rng::XorShift(0x5EED);
        let table = DigestTable::default();
        // digest → (count, place); and each number handed out, by digest.
        let mut model: HashMap<u64, (u32, Option<Place>)> = HashMap::new();
        let mut numbers: HashMap<u64, u32> = HashMap::new();
        for step in 0..40_000u64 {
            let n = rng.below(2_000);
            let d = digest(n);
            let (count, placed) = model.get(&n).copied().unwrap_or((0, None));
            match rng.below(6) {
                0 | 1 => {
                    let (number, same) = table.name(&d.0, n);
                    assert!(same, "one size a digest");
                    if let Some(&before) = numbers.get(&n) {
                        assert_eq!(number, before, "a held digest keeps its number");
                    }
                    numbers.insert(n, number);
                    model.insert(n, (count + 1, placed));
                }
                2 if count > 0 => {
                    table.unname(numbers[&n]);
                    model.insert(n, (count - 1, placed));
                }
                3 => {
                    assert!(table.set_place(&d, place(n, step)));
                    model.insert(n, (count, Some(place(n, step))));
                }
                4 => {
                    assert_eq!(table.take_place(&d), placed);
                    model.insert(n, (count, None));
                }
                _ => {
                    let to = place(n, step);
                    let moved = placed.is_some_and(|p| table.move_place(&d, p, to));
                    assert_eq!(moved, placed.is_some());
                    assert!(!table.move_place(&d, place(n, step + 1), to) || placed.is_none());
                    if moved {
                        model.insert(n, (count, Some(to)));
                    }
                }
            }
            // A digest freed may come back under another number.
            if model.get(&n).is_some_and(|(c, p)| *c == 0 && p.is_none()) {
                model.remove(&n);
                numbers.remove(&n);
            }
            if step % 2_000 == 0 {
                let named: Vec<u64> = model
                    .iter()
                    .filter(|(_, v)| v.0 > 0)
                    .map(|(k, _)| *k)
                    .collect();
                assert_eq!(table.named(), named.len());
                assert_eq!(table.bytes(), named.iter().sum::<u64>());
                for n in 0..2_000 {
                    let d = digest(n);
                    let (count, placed) = model.get(&n).copied().unwrap_or((0, None));
                    assert_eq!(table.is_named(&d.0), count > 0);
                    assert_eq!(table.place(&d), placed);
                    if count > 0 {
                        assert_eq!(table.digest(numbers[&n]), (d, n));
                    }
                    assert_eq!(table.number(&d.0).is_some(), count > 0 || placed.is_some());
                }
                let mut places = 0;
                table.for_each_place(|d, p| {
                    places += 1;
                    assert_eq!(table.place(d), Some(p));
                });
                assert_eq!(places, model.values().filter(|v| v.1.is_some()).count());
            }
        }
        // Places of pack 1 go; counts stay.
        table.retain_places(|p| p.pack != 1);
        for (n, (_, placed)) in &model {
            let kept = placed.filter(|p| p.pack != 1);
            assert_eq!(table.place(&digest(*n)), kept);
        }
        table.unname_all();
        assert_eq!((table.named(), table.bytes()), (0, 0));
        table.retain_places(|_| false);
        assert!(table
            .shards
            .iter()
            .all(|s| s.read().unwrap().chunks.is_empty()));
        assert_eq!(std::mem::size_of::<Record>(), 48);
    }

    #[test]
    fn a_place_that_does_not_fit_is_not_taken() {
        let table = DigestTable::default();
        let d = digest(1);
        let far = Place {
            pack: 5,
            start: 1 << 32,
            len: 1,
        };
        assert!(!table.set_place(&d, far));
        assert!(!table.set_place(
            &d,
            Place {
                pack: 0,
                ..place(1, 1)
            }
        ));
        assert_eq!(table.place(&d), None);
        assert_eq!(table.number(&d.0), None);
    }

    #[test]
    fn a_digest_has_one_size_which_its_place_gives_when_packed() {
        let table = DigestTable::default();
        let d = digest(7);
        let (number, same) = table.name(&d.0, 5 << 32);
        assert!(same);
        assert_eq!(table.digest(number), (d, 5 << 32));
        // A second record saying another size is told so; the size stays.
        assert_eq!(table.name(&d.0, 9), (number, false));
        assert_eq!(table.bytes(), 5 << 32);
        // Packed, the place's length is the size, and stays it unpacked.
        assert!(table.set_place(&d, place(7, 1)));
        assert_eq!((table.digest(number).1, table.bytes()), (7, 7));
        assert_eq!(table.take_place(&d), Some(place(7, 1)));
        assert_eq!(table.name(&d.0, 7), (number, true));
        // Packs are named by number: a place in a pack met later reads back
        // its id whole.
        let far = Place {
            pack: u64::MAX - 1,
            ..place(7, 2)
        };
        assert!(table.set_place(&d, far));
        assert_eq!(table.place(&d), Some(far));
        for _ in 0..3 {
            table.unname(number);
        }
        assert_eq!((table.named(), table.bytes()), (0, 0));
        assert_eq!(table.take_place(&d), Some(far));
        assert_eq!(table.number(&d.0), None);
    }
}
