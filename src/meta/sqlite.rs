//! SQLite specifics of the metadata store: its URL and file, and the
//! group commit's connection of its own.

use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::AnyPool;

/// One connection with `synchronous = FULL`, for the group commit's
/// transactions: durable when they return, with no pragma set per batch
/// (the pool's connections keep `NORMAL`, durable across a process crash).
pub(crate) async fn durable_pool(url: &str) -> Result<AnyPool, sqlx::Error> {
    AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(5))
        .test_before_acquire(false)
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                for pragma in [
                    "PRAGMA busy_timeout = 5000",
                    "PRAGMA journal_mode = WAL",
                    "PRAGMA synchronous = FULL",
                ] {
                    sqlx::query(pragma).execute(&mut *conn).await?;
                }
                Ok(())
            })
        })
        .connect(url)
        .await
}

/// Whether `error` is SQLite's "database is locked" (`SQLITE_BUSY` and its
/// extended codes, such as `SQLITE_BUSY_SNAPSHOT`, which a connection gets
/// at once, without its busy timeout, when another process's commit came
/// between its read and its write), also where a migration met it.
pub(crate) fn is_busy(error: &sqlx::Error) -> bool {
    use sqlx::migrate::MigrateError;
    match error {
        sqlx::Error::Database(db) => {
            db.code()
                .and_then(|code| code.parse::<i32>().ok())
                .is_some_and(|code| code & 0xff == 5)
                || db.message().contains("database is locked")
        }
        sqlx::Error::Migrate(migrate) => match &**migrate {
            MigrateError::Execute(inner) | MigrateError::ExecuteMigration(inner, _) => {
                is_busy(inner)
            }
            _ => false,
        },
        _ => false,
    }
}

/// Runs `attempt` again while it fails with "database is locked", pausing
/// 20 ms and doubling to 1 s between tries, for up to about 10 s of pauses
/// (each try may also wait out its connection's busy timeout): the work
/// of a command beside a running server (`token add`, `token revoke`,
/// opening the database: its migrations, its pragmas), which SQLite may
/// refuse at once rather than wait, whatever its busy timeout.
pub(crate) async fn retrying_busy<T, F, Fut>(mut attempt: F) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
{
    let mut pause = Duration::from_millis(20);
    let mut waited = Duration::ZERO;
    loop {
        match attempt().await {
            Err(error) if is_busy(&error) && waited < Duration::from_secs(10) => {
                tracing::debug!(%error, "the database is locked; trying again");
                tokio::time::sleep(pause).await;
                waited += pause;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            done => return done,
        }
    }
}

/// Executes the statement `make` builds (one statement, not applied when
/// it fails) on a connection of `pool`, again while SQLite says the
/// database is locked ([`retrying_busy`]), also where a new connection's
/// pragmas met the lock. A connection refused so is not used again: one
/// whose earlier read has not ended (a statement sqlx has not reset yet)
/// keeps a snapshot older than the other process's commit, and every
/// write on it fails at once, however long it waits.
pub(crate) async fn execute_retrying<'q>(
    pool: &AnyPool,
    make: impl Fn() -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
) -> Result<sqlx::any::AnyQueryResult, sqlx::Error> {
    retrying_busy(|| async {
        let mut conn = pool.acquire().await?;
        let done = make().execute(&mut *conn).await;
        if done.as_ref().is_err_and(is_busy) {
            drop(conn.detach());
        }
        done
    })
    .await
}

/// `sqlite://data/meta.db?mode=rwc` → `data/meta.db` (`None`: not a SQLite
/// file).
pub(crate) fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let file = rest.split_once('?').map_or(rest, |(file, _)| file);
    (!file.is_empty() && file != ":memory:").then(|| file.into())
}

/// `sqlite://data/meta.db` → the same URL with `mode=rwc`, and its directory created.
pub(crate) fn sqlite_url(url: &str) -> Result<String, sqlx::Error> {
    let rest = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:");
    let (file, query) = rest.split_once('?').unwrap_or((rest, ""));
    if file != ":memory:" && !file.is_empty() {
        if let Some(dir) = std::path::Path::new(file)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(sqlx::Error::Io)?;
        }
    }
    Ok(if query.contains("mode=") {
        url.to_string()
    } else if query.is_empty() {
        format!("sqlite://{file}?mode=rwc")
    } else {
        format!("sqlite://{file}?{query}&mode=rwc")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Connection as _;

    /// A scratch database in WAL mode with a table `t`, and a pool of one
    /// connection on it that waits `busy_ms` for a lock.
    async fn scratch(busy_ms: u32) -> (tempfile::TempDir, String, AnyPool) {
        sqlx::any::install_default_drivers();
        let dir = tempfile::tempdir().unwrap();
        let url = sqlite_url(&format!("sqlite://{}/t.db", dir.path().display())).unwrap();
        let pool = AnyPoolOptions::new()
            .max_connections(1)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    let busy = format!("PRAGMA busy_timeout = {busy_ms}");
                    sqlx::query(&busy).execute(&mut *conn).await.map(drop)
                })
            })
            .connect(&url)
            .await
            .unwrap();
        for sql in ["PRAGMA journal_mode = WAL", "CREATE TABLE t (n INTEGER)"] {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        (dir, url, pool)
    }

    /// A write refused because another connection holds the write lock is
    /// told as busy, and goes through once that lock is let go.
    #[tokio::test]
    async fn a_locked_write_is_tried_again_until_it_goes_through() {
        let (_dir, url, pool) = scratch(0).await;
        let mut holder = sqlx::AnyConnection::connect(&url).await.unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut holder)
            .await
            .unwrap();
        let refused = sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&pool)
            .await
            .unwrap_err();
        assert!(is_busy(&refused), "{refused}");
        assert!(!is_busy(&sqlx::Error::RowNotFound));
        // Met by a migration: told as busy too (opening the database retries it).
        let in_migration = sqlx::migrate::MigrateError::Execute(refused);
        assert!(is_busy(&sqlx::Error::Migrate(Box::new(in_migration))));

        let release = async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
        };
        let tries = std::sync::atomic::AtomicUsize::new(0);
        let write = execute_retrying(&pool, || {
            tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            sqlx::query("INSERT INTO t VALUES (2)")
        });
        let (written, ()) = tokio::join!(write, release);
        assert_eq!(written.unwrap().rows_affected(), 1);
        assert!(tries.load(std::sync::atomic::Ordering::Relaxed) > 1);
    }

    /// A pooled connection whose read never ended fails every write at
    /// once (its snapshot predates another connection's commit); the write
    /// goes through on another connection.
    #[tokio::test]
    async fn a_write_refused_on_a_stale_connection_goes_through_on_another() {
        let (_dir, url, pool) = scratch(5000).await;
        // A read left open on the pool's connection, then a commit by
        // another connection.
        let mut stale = pool.acquire().await.unwrap();
        sqlx::query("BEGIN").execute(&mut *stale).await.unwrap();
        sqlx::query("SELECT COUNT(*) FROM t")
            .fetch_all(&mut *stale)
            .await
            .unwrap();
        let mut other = sqlx::AnyConnection::connect(&url).await.unwrap();
        sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&mut other)
            .await
            .unwrap();
        let refused = sqlx::query("INSERT INTO t VALUES (2)")
            .execute(&mut *stale)
            .await
            .unwrap_err();
        assert!(is_busy(&refused), "{refused}");
        drop(stale);
        let done = execute_retrying(&pool, || sqlx::query("INSERT INTO t VALUES (3)"))
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1);
    }
}
