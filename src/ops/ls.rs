//! `mirrorcache ls [REMOTE[/PREFIX]] [--json]`: the cached entries, read from
//! the metadata database (safe beside a running server; hit counts and access
//! times are as the server last flushed them, at most 30 s old).

use std::io::Write;
use std::time::Duration;

use anyhow::Context;

use crate::clock::now_ms;
use crate::config::Config;
use crate::error::ProxyError;
use crate::meta::MetadataStore;

/// One row as `mirrorcache ls` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Listed {
    pub remote: String,
    pub path: String,
    pub size: u64,
    /// When the body was fetched or last revalidated (unix ms).
    pub fetched_at_ms: i64,
    /// Last hit (unix ms), as last flushed.
    pub last_access_ms: i64,
    /// Hits, as last flushed (every 30 s, and at shutdown).
    pub hits: u64,
}

/// The rows of `remote` (every remote when `None`) whose path starts with
/// `prefix`, sorted by remote and path. Prefix matching with `substr`
/// rather than `LIKE`: no wildcard to escape, and both backends have it.
pub async fn entries(
    meta: &MetadataStore,
    remote: Option<&str>,
    prefix: &str,
) -> Result<Vec<Listed>, ProxyError> {
    let rows: Vec<(String, String, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT remote, path, size, fetched_at, last_access, hits FROM entries \
             WHERE ($1 = '' OR remote = $1) AND substr(path, 1, CAST($2 AS INTEGER)) = $3 \
             ORDER BY remote, path",
    )
    .bind(remote.unwrap_or(""))
    .bind(prefix.chars().count() as i64)
    .bind(prefix)
    .fetch_all(meta.db.pool())
    .await
    .map_err(|e| ProxyError::Metadata(e.to_string()))?;
    Ok(rows
        .into_iter()
        .map(
            |(remote, path, size, fetched_at_ms, last_access_ms, hits)| Listed {
                remote,
                path,
                size: size as u64,
                fetched_at_ms,
                last_access_ms,
                hits: hits as u64,
            },
        )
        .collect())
}

/// `REMOTE[/PREFIX]` split in two; an empty filter lists everything.
pub fn parse_filter(filter: Option<&str>) -> (Option<&str>, &str) {
    match filter.filter(|f| !f.is_empty()) {
        None => (None, ""),
        Some(f) => match f.split_once('/') {
            Some((remote, prefix)) => (Some(remote), prefix),
            None => (Some(f), ""),
        },
    }
}

/// Reads the entries `filter` selects.
pub async fn list(config: &Config, filter: Option<&str>) -> anyhow::Result<Vec<Listed>> {
    let meta = MetadataStore::connect(&config.metadata.url, 1, config.metadata.cache_memory)
        .await
        .context("opening the metadata database")?;
    let (remote, prefix) = parse_filter(filter);
    let rows = entries(&meta, remote, prefix).await;
    meta.db.close().await;
    Ok(rows?)
}

/// Writes `rows` as a table with a total line, or as a JSON array.
pub fn print(rows: &[Listed], json: bool, out: &mut dyn Write) -> std::io::Result<()> {
    if json {
        serde_json::to_writer_pretty(&mut *out, rows)?;
        return writeln!(out);
    }
    let now = now_ms();
    writeln!(
        out,
        "{:>10}  {:>10}  {:>12}  {:>6}  ENTRY",
        "SIZE", "AGE", "LAST ACCESS", "HITS"
    )?;
    for row in rows {
        writeln!(
            out,
            "{:>10}  {:>10}  {:>12}  {:>6}  {}/{}",
            bytesize::ByteSize(row.size)
                .display()
                .iec_short()
                .to_string(),
            since(now, row.fetched_at_ms),
            format!("{} ago", since(now, row.last_access_ms)),
            row.hits,
            row.remote,
            row.path
        )?;
    }
    let total: u64 = rows.iter().map(|r| r.size).sum();
    writeln!(
        out,
        "{} entries, {}",
        rows.len(),
        bytesize::ByteSize(total).display().iec()
    )
}

/// A short duration from `then` to `now`: the largest unit only ("3h", "12d").
fn since(now_ms: i64, then_ms: i64) -> String {
    let secs = Duration::from_millis((now_ms - then_ms).max(0) as u64).as_secs();
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_split_into_remote_and_prefix() {
        assert_eq!(parse_filter(None), (None, ""));
        assert_eq!(parse_filter(Some("npm")), (Some("npm"), ""));
        assert_eq!(parse_filter(Some("npm/@scope/")), (Some("npm"), "@scope/"));
    }

    #[test]
    fn ages_use_their_largest_unit() {
        assert_eq!(since(90_000, 0), "1m");
        assert_eq!(since(0, 5_000), "0s");
        assert_eq!(since(3 * 86_400_000, 0), "3d");
    }
}
