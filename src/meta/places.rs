//! [`PlaceTable`]: the `blob_places` table, where the store's packed blobs
//! lie ([`PlaceRow`]), kept for the store, which alone reads them. Rows of
//! new packed blobs are written in their batch's transaction
//! (`super::batch_rows`); the rest is here.

use std::io;

use futures_util::future::BoxFuture;
use sqlx::AnyPool;

use super::sql::inserted_rows;
use crate::store::{Digest, PlaceRow, PlaceRows};

/// Rows per `INSERT` (4 parameters a row).
pub(super) const PLACES_PER_INSERT: usize = 64;
/// Rows read at a time at start-up.
const PAGE: i64 = 20_000;

/// The `blob_places` table, on the metadata database's pool.
pub struct PlaceTable {
    pool: AnyPool,
    /// Whether the database keeps an index on the places' digests
    /// (`Database::index_digests`): without one, a place is deleted only
    /// where memory knows it (a digest memory does not place has no row:
    /// a blob of its own file, the most common one removed).
    by_digest: bool,
}

impl PlaceTable {
    pub fn new(pool: AnyPool, by_digest: bool) -> PlaceTable {
        PlaceTable { pool, by_digest }
    }

    /// The rows `filter` (a `WHERE` clause and what follows, its
    /// parameters `numbers` from `$1`) selects.
    async fn select(&self, filter: &str, numbers: Vec<i64>) -> io::Result<Vec<PlaceRow>> {
        let sql = format!("SELECT digest, pack, start_byte, length FROM blob_places{filter}");
        let query =
            (numbers.into_iter()).fold(sqlx::query_as::<_, RawPlace>(&sql), |q, n| q.bind(n));
        let rows = query.fetch_all(&self.pool).await.map_err(io_error)?;
        Ok(rows.into_iter().filter_map(row_of).collect())
    }
}

type RawPlace = (String, i64, i64, i64);

fn row_of((digest, pack, start, length): RawPlace) -> Option<PlaceRow> {
    Some(PlaceRow {
        digest: Digest::from_hex(&digest)?,
        pack,
        start,
        length,
    })
}

fn io_error(e: sqlx::Error) -> io::Error {
    io::Error::other(e.to_string())
}

impl PlaceRows for PlaceTable {
    fn page(&self, after: Option<PlaceRow>) -> BoxFuture<'_, io::Result<Vec<PlaceRow>>> {
        let after = after.map_or([i64::MIN; 3], |row| [row.pack, row.start, row.length]);
        Box::pin(self.select(
            " WHERE (pack, start_byte, length) > ($1, $2, $3) \
             ORDER BY pack, start_byte, length LIMIT $4",
            vec![after[0], after[1], after[2], PAGE],
        ))
    }

    fn lookup(&self, digest: Digest) -> BoxFuture<'_, io::Result<Option<PlaceRow>>> {
        Box::pin(async move {
            let row: Option<RawPlace> = sqlx::query_as(
                "SELECT digest, pack, start_byte, length FROM blob_places WHERE digest = $1 \
                 ORDER BY pack DESC, start_byte DESC LIMIT 1",
            )
            .bind(digest.to_hex())
            .fetch_optional(&self.pool)
            .await
            .map_err(io_error)?;
            Ok(row.and_then(row_of))
        })
    }

    fn in_pack(&self, pack: i64) -> BoxFuture<'_, io::Result<Vec<PlaceRow>>> {
        Box::pin(self.select(" WHERE pack = $1 ORDER BY start_byte, length", vec![pack]))
    }

    fn forget(
        &self,
        digest: Digest,
        known: Option<PlaceRow>,
    ) -> BoxFuture<'_, io::Result<Vec<PlaceRow>>> {
        Box::pin(async move {
            if known.is_none() && !self.by_digest {
                return Ok(Vec::new());
            }
            let returning = " RETURNING digest, pack, start_byte, length";
            let sql = match known {
                Some(_) => format!(
                    "DELETE FROM blob_places WHERE digest = $1 AND pack = $2 \
                     AND start_byte = $3 AND length = $4{returning}"
                ),
                None => format!("DELETE FROM blob_places WHERE digest = $1{returning}"),
            };
            let query = sqlx::query_as::<_, RawPlace>(&sql).bind(digest.to_hex());
            let rows = match known {
                Some(row) => query.bind(row.pack).bind(row.start).bind(row.length),
                None => query,
            }
            .fetch_all(&self.pool)
            .await
            .map_err(io_error)?;
            Ok(rows.into_iter().filter_map(row_of).collect())
        })
    }

    fn moved(&self, moves: Vec<(PlaceRow, PlaceRow)>) -> BoxFuture<'_, io::Result<Vec<bool>>> {
        Box::pin(async move {
            let mut tx = self.pool.begin().await.map_err(io_error)?;
            let mut moved = Vec::with_capacity(moves.len());
            for (from, to) in &moves {
                let done = sqlx::query(
                    "UPDATE blob_places SET pack = $1, start_byte = $2 \
                     WHERE digest = $3 AND pack = $4 AND start_byte = $5",
                )
                .bind(to.pack)
                .bind(to.start)
                .bind(from.digest.to_hex())
                .bind(from.pack)
                .bind(from.start)
                .execute(&mut *tx)
                .await
                .map_err(io_error)?;
                moved.push(done.rows_affected() == 1);
            }
            tx.commit().await.map_err(io_error)?;
            Ok(moved)
        })
    }
}

/// The `INSERT` of `rows` places a batch packed, parameters numbered from
/// `$first` (4 a row; `None`: `?`s, NULL rows dropped, see
/// `inserted_rows`). Each names a range just appended, which no row names
/// yet.
pub(super) fn insert_sql(first: Option<usize>, rows: usize) -> String {
    format!(
        "INSERT INTO blob_places (digest, pack, start_byte, length) {}",
        inserted_rows(first, rows, 4)
    )
}
