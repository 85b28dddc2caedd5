//! `mirrorcache ls [REMOTE[/PREFIX]] [--json]`: the cached entries, read from
//! the metadata database (safe beside a running server; hit counts and access
//! times are as the server last flushed them, at most 30 s old).

use std::io::Write;
use std::time::Duration;

use anyhow::Context;

use crate::cache::listing::Listed;
use crate::cache::MetadataStore;
use crate::clock::now_ms;
use crate::config::Config;

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
    let meta = MetadataStore::connect(&config.metadata.url, 1)
        .await
        .context("opening the metadata database")?;
    let (remote, prefix) = parse_filter(filter);
    let rows = meta.list(remote, prefix).await;
    meta.close().await;
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
