//! [`PlaceTable`]: the `blob_places` table, where the store's packed blobs
//! lie ([`PlaceRow`]), kept for the store, which alone reads them. Rows of
//! new packed blobs are written in their batch's transaction
//! (`super::batch_rows`); the rest is here.

use std::io;

use futures_util::future::BoxFuture;
use sqlx::AnyPool;

use super::sql::value_rows_from;
use crate::store::{Digest, PlaceRow, PlaceRows};

/// Rows per `INSERT` (4 parameters a row).
pub(super) const PLACES_PER_INSERT: usize = 64;
/// Rows read at a time at start-up.
const PAGE: i64 = 20_000;

/// The `blob_places` table, on the metadata database's pool.
pub struct PlaceTable {
    pool: AnyPool,
}

impl PlaceTable {
    pub fn new(pool: AnyPool) -> PlaceTable {
        PlaceTable { pool }
    }

    /// The rows `filter` (a `WHERE` clause, with `text` bound as `$1`,
    /// then `number`) selects.
    async fn select(
        &self,
        filter: &str,
        text: Option<String>,
        number: i64,
    ) -> io::Result<Vec<PlaceRow>> {
        let sql = format!("SELECT digest, pack, start_byte, length FROM blob_places{filter}");
        let mut query = sqlx::query_as::<_, RawPlace>(&sql);
        if let Some(text) = text {
            query = query.bind(text);
        }
        query = query.bind(number);
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
    fn page(&self, after: Option<Digest>) -> BoxFuture<'_, io::Result<Vec<PlaceRow>>> {
        let after = after.map_or_else(String::new, |d| d.to_hex());
        Box::pin(self.select(
            " WHERE digest > $1 ORDER BY digest LIMIT $2",
            Some(after),
            PAGE,
        ))
    }

    fn lookup(&self, digest: Digest) -> BoxFuture<'_, io::Result<Option<PlaceRow>>> {
        Box::pin(async move {
            let row: Option<RawPlace> = sqlx::query_as(
                "SELECT digest, pack, start_byte, length FROM blob_places WHERE digest = $1",
            )
            .bind(digest.to_hex())
            .fetch_optional(&self.pool)
            .await
            .map_err(io_error)?;
            Ok(row.and_then(row_of))
        })
    }

    fn in_pack(&self, pack: i64) -> BoxFuture<'_, io::Result<Vec<PlaceRow>>> {
        Box::pin(self.select(" WHERE pack = $1 ORDER BY start_byte", None, pack))
    }

    fn forget(&self, digest: Digest) -> BoxFuture<'_, io::Result<Option<PlaceRow>>> {
        Box::pin(async move {
            let row: Option<RawPlace> = sqlx::query_as(
                "DELETE FROM blob_places WHERE digest = $1 \
                 RETURNING digest, pack, start_byte, length",
            )
            .bind(digest.to_hex())
            .fetch_optional(&self.pool)
            .await
            .map_err(io_error)?;
            Ok(row.and_then(row_of))
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
/// `$first` (4 a row; `None`: `?`s, see `value_rows_from`): a row already there for the digest (its blob packed
/// again after a row deletion that failed) names the new place, whose
/// bytes were just synced.
pub(super) fn insert_sql(first: Option<usize>, rows: usize) -> String {
    format!(
        "INSERT INTO blob_places (digest, pack, start_byte, length) VALUES {} \
         ON CONFLICT (digest) DO UPDATE SET pack = excluded.pack, \
         start_byte = excluded.start_byte, length = excluded.length",
        value_rows_from(first, rows, 4)
    )
}
