//! The meta room: the rows, what the bytes are.
//!
//! [`MetadataStore`] ([`metadata`]) maps `remote/path` to a blob's digest
//! with the headers and times to serve and revalidate it. It holds two
//! roles: the [`Database`] ([`database`]: SQLite or Postgres, [`sqlite`],
//! [`sql`]) and the [`Memory`] in front of it ([`memory`]: the entry cache
//! and remembered "not found" answers, [`entry`]; the compact entry index
//! of every row, [`index`], whose records name digests by their number in
//! the store's `DigestTable`, which counts them). A lookup ([`lookup`]) asks them in turn, then Redis
//! ([`cluster`], which also keeps instances' memories coherent), then the
//! database. Purge generations ([`purge`]) keep what began before a purge
//! from showing after it; [`Memory`] puts rows in memory and forgets them
//! under those generations. The queries a blob's lifetime rests on are
//! [`lifetime`]'s; a group commit's are [`batch_rows`]'s. Declared digests
//! and pins are the `declared` table ([`declared_rows`]), its keys kept in
//! memory ([`declared_keys`]). Writes by other processes beside a server are
//! noticed by [`other_writers`]; the browse pages read [`browse`]. Where
//! the store packed a small blob is a row it keeps for the store
//! ([`places`]), numbers it never reads.
//!
//! **Invariant:** this room knows rows, not bytes: it holds digests and
//! the store's place rows and digest table (all it takes from
//! [`crate::store`]) and never opens, writes or
//! deletes a blob; whether a blob may go is the façade's
//! ([`crate::cache`]), which asks [`MetadataStore::digest_referenced`]
//! under the digest's lock. It imports neither the façade nor `http`,
//! `fill` or `ops`; from `kind` only what a declared digest is and where an
//! artifact's rows may be.

mod batch_rows;
pub mod browse;
pub mod cluster;
mod database;
pub mod declared_keys;
mod declared_rows;
mod entry;
mod hashing;
pub mod index;
mod lifetime;
mod lookup;
mod memory;
mod metadata;
mod names;
pub mod other_writers;
pub mod places;
mod prepared;
pub mod purge;
pub(crate) mod sql;
pub(crate) mod sqlite;
mod touched;

pub use batch_rows::Pin;
pub use entry::{entry_cache, Entry, EntryCache, PREPARED_BYTES};
pub use index::Index;
pub use memory::Memory;
pub use metadata::MetadataStore;
pub use prepared::Prepared;
pub use purge::{Purges, Scope, Ticket};
