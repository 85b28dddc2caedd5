//! The group commit's statements (see `crate::cache::commit`): the batch's
//! two reads, one `IN (…)` list each, and its rows and [`Pin`]s written in
//! one transaction.

use std::collections::{HashMap, HashSet};

use sqlx::any::AnyArguments;

use super::entry::Entry;
use super::index::Found;
use super::metadata::MetadataStore;
use super::sql::{db_error, inserted_rows, padded_rows, placeholders};
use crate::error::ProxyError;
use crate::kind::declared::Declared;
use crate::kind::{CachedAt, Kind};
use crate::path::ArtifactPath;
use crate::store::{Digest, PlaceRow};

/// Keys per `IN (…)` list of the batch's reads: far below either backend's
/// parameter limit.
const ROWS_PER_STATEMENT: usize = 100;
/// Rows per `INSERT` of the batch's writes numbered `$n` (10 parameters a
/// row, 4 a pin): SQLite finds such a parameter by a scan of the
/// statement's names (`value_rows_from`), so its cost grows with their
/// square (100 rows a statement cost 5.7 % of a sustained miss's CPU:
/// BENCHMARKS.md).
const ROWS_PER_INSERT: usize = 16;
/// Rows (places, pins) per `INSERT` of the durable connection's text of
/// `?`s, which has no names to scan: the most a padded statement has
/// (`padded_rows`). The connection keeps a batch's text prepared when
/// each kind is one `INSERT`, all of one shape (`batch_statements`): at
/// most 32 texts (8 sizes, places and pins each there or not), about 2 MB
/// prepared in all (a 64-row upsert of entries takes about 70 KB), within
/// sqlx's cache of 100. SQLite's parse of a text grows with its rows, so
/// a large batch's is kept too.
const ROWS_PER_SCRIPT_INSERT: usize = 128;

/// A digest pinned on first use ([`crate::fill::learn::pin_key`]), written
/// with its entry's row in the batch's transaction: the pin is durable
/// exactly when the entry is, at no statement of its own.
pub struct Pin {
    pub remote: String,
    pub kind: Kind,
    /// The key the digest is declared under.
    pub artifact: String,
    pub declared: Declared,
}

impl MetadataStore {
    /// The digests the rows of `paths` reference now, by key: from the
    /// entry index while it is complete and no other process wrote (no
    /// query), else read.
    pub(crate) async fn stored_digests(
        &self,
        paths: &[&ArtifactPath],
    ) -> Result<HashMap<String, Digest>, ProxyError> {
        if self.memory.index.is_complete() && self.memory.memory_trusted() {
            let mut found = HashMap::new();
            let whole = paths
                .iter()
                .all(|path| match self.memory.index.get(path.key()) {
                    Found::Entry(entry) => {
                        found.insert(path.key().to_string(), entry.digest);
                        true
                    }
                    Found::Absent => true,
                    Found::Unknown => false,
                });
            if whole {
                return Ok(found);
            }
        }
        let mut by_remote: HashMap<&str, Vec<&ArtifactPath>> = HashMap::new();
        for path in paths {
            by_remote.entry(path.remote()).or_default().push(path);
        }
        let mut found = HashMap::new();
        for (remote, paths) in by_remote {
            for chunk in paths.chunks(ROWS_PER_STATEMENT) {
                let sql = format!(
                    "SELECT path, digest FROM entries WHERE remote = $1 AND path IN ({})",
                    placeholders(2, chunk.len())
                );
                let mut query = sqlx::query_as::<_, (String, String)>(&sql).bind(remote);
                for path in chunk {
                    query = query.bind(path.stored_path());
                }
                for (path, digest) in query.fetch_all(&self.db.pool).await.map_err(db_error)? {
                    if let Some(digest) = Digest::from_hex(&digest) {
                        found.insert(format!("{remote}/{path}"), digest);
                    }
                }
            }
        }
        Ok(found)
    }

    /// Which of `digests` some row references now.
    pub(crate) async fn referenced_digests(
        &self,
        digests: &[Digest],
    ) -> Result<HashSet<Digest>, ProxyError> {
        let mut found = HashSet::new();
        if self.memory.digests_in_memory() {
            found.extend(digests.iter().filter(|d| self.memory.index.references(d)));
            return Ok(found);
        }
        for chunk in digests.chunks(ROWS_PER_STATEMENT) {
            self.db
                .digest_reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let sql = format!(
                "SELECT DISTINCT digest FROM entries WHERE digest IN ({})",
                placeholders(1, chunk.len())
            );
            let mut query = sqlx::query_as::<_, (String,)>(&sql);
            for digest in chunk {
                query = query.bind(digest.to_hex());
            }
            for (hex,) in query.fetch_all(&self.db.pool).await.map_err(db_error)? {
                found.extend(Digest::from_hex(&hex));
            }
        }
        Ok(found)
    }

    /// Writes (or replaces) the rows of a batch in one transaction, durable
    /// when it returns. Always tried, even while lookups back off: the rows
    /// are what make the fills worth it.
    pub(crate) async fn record_batch(
        &self,
        rows: &[(&ArtifactPath, &Entry)],
    ) -> Result<(), ProxyError> {
        self.write_batch(rows, &[], &[]).await
    }

    /// [`MetadataStore::record_batch`], with the batch's pins and the
    /// places of the blobs it packed in the same transaction.
    pub(crate) async fn write_batch(
        &self,
        rows: &[(&ArtifactPath, &Entry)],
        pins: &[&Pin],
        places: &[PlaceRow],
    ) -> Result<(), ProxyError> {
        for pin in pins {
            self.memory.declared_keys.add(&pin.remote, &pin.artifact);
        }
        // SQLite's own durable connection, or a pool connection set to
        // `synchronous = FULL` for this transaction (an in-memory SQLite).
        let pool = self.db.durable.as_ref().unwrap_or(&self.db.pool);
        let mut conn = pool.acquire().await.map_err(|e| self.db.failed(e))?;
        let toggle = self.db.durable.is_none() && self.db.sqlite;
        if toggle {
            // The WAL synced at this commit (and with it every earlier
            // commit): the batch is on disk when its fills are answered.
            sqlx::query("PRAGMA synchronous = FULL")
                .execute(&mut *conn)
                .await
                .map_err(|e| self.db.failed(e))?;
        }
        // On SQLite's durable connection the transaction is one text.
        let script = self.db.durable.is_some();
        let (statements, keep) = batch_statements(rows, pins, places, script);
        let written = match script {
            true => run_script(&mut conn, statements, keep).await,
            false => insert_rows(&mut conn, statements).await,
        };
        if written.is_ok() {
            self.memory.others.wrote();
        }
        if toggle {
            let _ = sqlx::query("PRAGMA synchronous = NORMAL")
                .execute(&mut *conn)
                .await;
        }
        written.map_err(|e| self.db.failed(e))
    }
}

/// A value of one of a batch's statements.
enum Value {
    Text(String),
    MaybeText(Option<String>),
    Int(i64),
}

/// The statements of a batch's transaction, in order, each with its
/// values: the places first (a row never names a blob whose place is not
/// written), then the rows, then the pins. `script`: their parameters
/// `?`, numbered by SQLite in order across them, to be sent as one text,
/// each statement's rows padded with NULL rows to [`padded_rows`], and
/// with whether the text is to be kept prepared (each kind one
/// `INSERT`, see [`ROWS_PER_SCRIPT_INSERT`]): then
/// every kind's one statement is padded to the same shape, the largest
/// kind's, so the kept texts are few (8 sizes, each kind there or not);
/// else from `$1` each.
fn batch_statements(
    rows: &[(&ArtifactPath, &Entry)],
    pins: &[&Pin],
    places: &[PlaceRow],
    script: bool,
) -> (Vec<(String, Vec<Value>)>, bool) {
    use Value::{Int, MaybeText, Text};
    let first = (!script).then_some(1);
    // A text of `?`s has no names for SQLite to scan: larger statements.
    let (places_per_insert, per_insert) = match script {
        true => (ROWS_PER_SCRIPT_INSERT, ROWS_PER_SCRIPT_INSERT),
        false => (super::places::PLACES_PER_INSERT, ROWS_PER_INSERT),
    };
    let most = rows.len().max(pins.len()).max(places.len());
    let keep = script && most <= ROWS_PER_SCRIPT_INSERT;
    let floor = if keep { padded_rows(most) } else { 0 };
    // A statement's rows (its values padded with NULLs to as many).
    let shape = |rows: usize| match script {
        true => padded_rows(rows).max(floor),
        false => rows,
    };
    let mut statements = Vec::new();
    for chunk in places.chunks(places_per_insert) {
        let n = shape(chunk.len());
        let values = chunk.iter().flat_map(|place| {
            let digest = Text(place.digest.to_hex());
            [digest, Int(place.pack), Int(place.start), Int(place.length)]
        });
        statements.push((super::places::insert_sql(first, n), padded(values, n * 4)));
    }
    for chunk in rows.chunks(per_insert) {
        let n = shape(chunk.len());
        let sql = format!(
            "INSERT INTO entries (remote, path, digest, size, content_type, upstream_etag, upstream_last_modified, fetched_at, last_access, kept_headers) \
             {} \
             ON CONFLICT (remote, path) DO UPDATE SET digest = excluded.digest, size = excluded.size, \
             content_type = excluded.content_type, upstream_etag = excluded.upstream_etag, \
             upstream_last_modified = excluded.upstream_last_modified, fetched_at = excluded.fetched_at, \
             last_access = excluded.last_access, kept_headers = excluded.kept_headers",
            inserted_rows(first, n, 10)
        );
        let values = chunk.iter().flat_map(|(path, entry)| {
            [
                Text(path.remote().to_string()),
                Text(path.stored_path().to_string()),
                Text(entry.digest.to_hex()),
                Int(entry.size as i64),
                MaybeText(entry.content_type.clone()),
                MaybeText(entry.upstream_etag.clone()),
                MaybeText(entry.upstream_last_modified.clone()),
                Int(entry.fetched_at_ms),
                Int(entry.fetched_at_ms),
                MaybeText(entry.kept_headers.clone()),
            ]
        });
        statements.push((sql, padded(values, n * 10)));
    }
    let now = crate::clock::now_ms();
    for chunk in pins.chunks(per_insert) {
        let n = shape(chunk.len());
        let values = chunk.iter().flat_map(|pin| {
            let (remote, artifact) = (pin.remote.clone(), pin.artifact.clone());
            [
                Text(remote),
                Text(artifact),
                Text(pin.declared.to_string()),
                Int(now),
            ]
        });
        let sql = super::declared_rows::upsert_sql(first, n);
        statements.push((sql, padded(values, n * 4)));
    }
    (statements, keep)
}

/// `values`, then NULLs to `len` values in all: a statement's padding.
fn padded(values: impl Iterator<Item = Value>, len: usize) -> Vec<Value> {
    let mut values: Vec<Value> = values.collect();
    values.resize_with(len, || Value::MaybeText(None));
    values
}

/// `sql` with `values` bound in order.
fn bound(sql: &str, values: Vec<Value>) -> sqlx::query::Query<'_, sqlx::Any, AnyArguments<'_>> {
    values
        .into_iter()
        .fold(sqlx::query(sql), |query, value| match value {
            Value::Text(text) => query.bind(text),
            Value::MaybeText(text) => query.bind(text),
            Value::Int(int) => query.bind(int),
        })
}

/// The statements in a transaction, one after another.
async fn insert_rows(
    conn: &mut sqlx::pool::PoolConnection<sqlx::Any>,
    statements: Vec<(String, Vec<Value>)>,
) -> Result<(), sqlx::Error> {
    use sqlx::Connection as _;
    let mut tx = conn.begin().await?;
    for (sql, values) in statements {
        bound(&sql, values).execute(&mut *tx).await?;
    }
    tx.commit().await
}

/// The statements as one text, `BEGIN` to `COMMIT`, on SQLite's durable
/// connection: its worker thread is woken once a batch, not once a
/// statement (each a wake-up of that thread and one back, tens of µs on
/// a small VM). A text that fails part-way is rolled back; a connection
/// that cannot be is closed, never handed on inside a transaction.
/// `keep`: the connection keeps the text prepared
/// ([`ROWS_PER_SCRIPT_INSERT`]).
async fn run_script(
    conn: &mut sqlx::pool::PoolConnection<sqlx::Any>,
    statements: Vec<(String, Vec<Value>)>,
    keep: bool,
) -> Result<(), sqlx::Error> {
    let mut sql = String::from("BEGIN;\n");
    let mut all = Vec::new();
    for (text, values) in statements {
        sql.push_str(&text);
        sql.push_str(";\n");
        all.extend(values);
    }
    sql.push_str("COMMIT;");
    let done = bound(&sql, all).persistent(keep).execute(&mut **conn).await;
    if done.is_err() && sqlx::query("ROLLBACK").execute(&mut **conn).await.is_err() {
        conn.close_on_drop();
    }
    done.map(|_| ())
}

impl Pin {
    /// Whether a cached row other than the one it is committed with may be
    /// of its artifact (and then must match it): only where the ecosystem
    /// finds an artifact's rows elsewhere than at its key, or the key is
    /// not the row's own path. Otherwise the only row is the batch's.
    pub(crate) fn may_contradict(&self, path: &ArtifactPath) -> bool {
        self.kind.digests().is_some_and(|digests| {
            !matches!(digests.cached_at(&self.artifact), CachedAt::Path)
                || self.artifact != path.stored_path()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::declared::Algo;

    /// Batches of every shape write exactly their rows, places and pins,
    /// each value in its place, through the durable connection's padded
    /// text (no NULL row gets in, none is lost past a statement's 128), a
    /// key written again is replaced (batch 4 through batch 3's kept
    /// text), and batches of sizes in the same power of two send the same
    /// text, its places padded to its rows' shape.
    #[tokio::test]
    async fn padded_batches_write_exactly_their_rows_in_few_texts() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/meta.db", dir.path().display());
        let meta = MetadataStore::connect(&url, 1000, 1 << 20).await.unwrap();
        assert!(
            meta.db.durable.is_some(),
            "a file's database has its durable connection"
        );
        let kind = Kind::named("pypi").unwrap();
        let count = |table: &str| {
            let sql = format!("SELECT COUNT(*) FROM {table}");
            let pool = meta.db.pool.clone();
            async move {
                let (n,): (i64,) = sqlx::query_as(&sql).fetch_one(&pool).await.unwrap();
                n as usize
            }
        };
        let mut written = 0;
        // The last batch writes the keys of the one before it again.
        for (n, again) in [
            (1, 0),
            (3, 0),
            (4, 0),
            (128, 0),
            (140, 0),
            (260, 0),
            (260, 1),
        ] {
            let paths: Vec<ArtifactPath> = (0..n)
                .map(|i| ArtifactPath::parse(&format!("/r/b{n}/{i}.whl")).unwrap())
                .collect();
            let digest = |i: usize| Digest::of(format!("{n}/{i}/{again}").as_bytes());
            let entries: Vec<Entry> = (0..n)
                .map(|i| Entry::new(digest(i), 7, None, None, None, 1))
                .collect();
            let rows: Vec<(&ArtifactPath, &Entry)> = paths.iter().zip(&entries).collect();
            let places: Vec<PlaceRow> = (0..n)
                .map(|i| PlaceRow {
                    digest: digest(i),
                    pack: (n * 10 + again) as i64,
                    start: 7 * i as i64,
                    length: 7,
                })
                .collect();
            let pins: Vec<Pin> = paths
                .iter()
                .enumerate()
                .map(|(i, p)| Pin {
                    remote: "r".into(),
                    kind,
                    artifact: p.stored_path().to_string(),
                    declared: Declared::new(Algo::Sha256, digest(i).0.to_vec()).unwrap(),
                })
                .collect();
            let pin_refs: Vec<&Pin> = pins.iter().collect();
            meta.write_batch(&rows, &pin_refs, &places).await.unwrap();
            written += n * (1 - again);
            assert_eq!(count("entries").await, written, "rows after {n}");
            assert_eq!(count("declared").await, written, "pins after {n}");
            assert_eq!(count("blob_places").await, written + n * again);
            // The last row of the batch, in its padded statement.
            let last = n - 1;
            let text = |sql: &'static str, key: String| {
                let pool = meta.db.pool.clone();
                async move {
                    let (text,): (String,) = sqlx::query_as(sql)
                        .bind(key)
                        .fetch_one(&pool)
                        .await
                        .unwrap();
                    text
                }
            };
            let key = paths[last].stored_path().to_string();
            let row_digest = text("SELECT digest FROM entries WHERE path = $1", key.clone());
            assert_eq!(row_digest.await, digest(last).to_hex());
            let (pack, start): (i64, i64) =
                sqlx::query_as("SELECT pack, start_byte FROM blob_places WHERE digest = $1")
                    .bind(digest(last).to_hex())
                    .fetch_one(&meta.db.pool)
                    .await
                    .unwrap();
            assert_eq!((pack, start), ((n * 10 + again) as i64, 7 * last as i64));
            let declared = text("SELECT digest FROM declared WHERE artifact = $1", key).await;
            assert_eq!(declared, pins[last].declared.to_string());
        }
        // The texts of a batch of `n` rows and `p` places (as the batch's
        // first `p` rows'), with their values' counts, and whether kept.
        let texts = |n: usize, p: usize| {
            let paths: Vec<ArtifactPath> = (0..n)
                .map(|i| ArtifactPath::parse(&format!("/r/{i}")).unwrap())
                .collect();
            let entry = Entry::new(Digest::of(b"x"), 1, None, None, None, 1);
            let rows: Vec<(&ArtifactPath, &Entry)> = paths.iter().map(|p| (p, &entry)).collect();
            let place = PlaceRow {
                digest: entry.digest,
                pack: 1,
                start: 0,
                length: 1,
            };
            let places = vec![place; p];
            let (statements, keep) = batch_statements(&rows, &[], &places, true);
            let shapes: Vec<(String, usize)> = statements
                .into_iter()
                .map(|(sql, values)| (sql, values.len()))
                .collect();
            (shapes, keep)
        };
        assert_eq!(texts(3, 0), texts(4, 0), "3 rows padded to 4");
        assert_eq!(texts(3, 0).0[0].1, 40);
        assert_ne!(texts(4, 0), texts(5, 0));
        assert_eq!(texts(65, 0), texts(128, 0));
        assert!(texts(128, 128).1, "one statement a kind: kept");
        let (split, kept) = texts(129, 0);
        assert_eq!(
            (split.len(), kept),
            (2, false),
            "129 rows: 128 and 1, not kept"
        );
        // Places as few as 1 take the rows' shape: one text for all.
        let (one_place, kept) = texts(5, 1);
        assert!(kept);
        assert_eq!(one_place, texts(8, 8).0);
        assert_eq!(one_place[0].1, 8 * 4);
    }
}
