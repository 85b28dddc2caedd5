//! SQLite specifics of the metadata store: its URL and file, and the
//! group commit's connection of its own.

use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::AnyPool;

/// One connection with `synchronous = FULL`, for the group commit's
/// transactions: durable when they return, with no pragma set per batch
/// (the pool's connections keep `NORMAL`, durable across a process crash).
pub(super) async fn durable_pool(url: &str) -> Result<AnyPool, sqlx::Error> {
    AnyPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(5))
        .test_before_acquire(false)
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                for pragma in [
                    "PRAGMA journal_mode = WAL",
                    "PRAGMA synchronous = FULL",
                    "PRAGMA busy_timeout = 5000",
                ] {
                    sqlx::query(pragma).execute(&mut *conn).await?;
                }
                Ok(())
            })
        })
        .connect(url)
        .await
}

/// `sqlite://data/meta.db?mode=rwc` → `data/meta.db` (`None`: not a SQLite
/// file).
pub(super) fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let file = rest.split_once('?').map_or(rest, |(file, _)| file);
    (!file.is_empty() && file != ":memory:").then(|| file.into())
}

/// `sqlite://data/meta.db` → the same URL with `mode=rwc`, and its directory created.
pub(super) fn sqlite_url(url: &str) -> Result<String, sqlx::Error> {
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
