//! `mirrorcache token add|list|revoke`: access tokens in the metadata
//! database, so every instance sharing it accepts them. `add` prints the new
//! token once, alone on its last line; only its hash is kept.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;

use crate::access::token;
use crate::access::token_table::{TokenRow, TokenTable};
use crate::clock::now_ms;
use crate::config::Config;
use crate::meta::MetadataStore;

async fn open(config: &Config) -> anyhow::Result<MetadataStore> {
    MetadataStore::connect(&config.metadata.url, 1, config.metadata.cache_memory)
        .await
        .context("opening the metadata database")
}

/// Makes a token for `user` (who must be in the htpasswd file), valid for
/// `expires` (`None`: until revoked). Returns its row and its text.
pub async fn add(
    config: &Config,
    user: &str,
    expires: Option<Duration>,
) -> anyhow::Result<(TokenRow, String)> {
    let auth = config
        .auth
        .as_ref()
        .context("the config has no `[auth] htpasswd`: tokens belong to its users")?;
    anyhow::ensure!(
        auth.users.iter().any(|u| u.name == user),
        "{} has no user {user:?}",
        auth.htpasswd.display()
    );
    let made = token::generate().map_err(|e| anyhow::anyhow!("no random bytes: {e}"))?;
    let now = now_ms();
    let row = TokenRow {
        id: made.id,
        user: user.to_string(),
        secret_hash: made.secret_hash,
        created_at_ms: now,
        expires_at_ms: expires.map(|d| now + d.as_millis() as i64),
    };
    let meta = open(config).await?;
    let inserted = TokenTable::of(&meta).insert(&row).await;
    meta.db.close().await;
    inserted?;
    Ok((row, made.text))
}

pub async fn list(config: &Config, user: Option<&str>) -> anyhow::Result<Vec<TokenRow>> {
    let meta = open(config).await?;
    let rows = TokenTable::of(&meta).list(user).await;
    meta.db.close().await;
    Ok(rows?)
}

/// Whether a token with this id was there to revoke.
pub async fn revoke(config: &Config, id: &str) -> anyhow::Result<bool> {
    let meta = open(config).await?;
    let revoked = TokenTable::of(&meta).revoke(id).await;
    meta.db.close().await;
    Ok(revoked?)
}

fn when(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// What `token add` prints: a line about the token, then the token alone.
pub fn print_added(row: &TokenRow, text: &str, out: &mut dyn Write) -> std::io::Result<()> {
    let expires = row.expires_at_ms.map_or_else(
        || "never expires".to_string(),
        |ms| format!("expires {}", when(ms)),
    );
    writeln!(
        out,
        "token {} for {} ({expires}); it is shown only now:",
        row.id, row.user
    )?;
    writeln!(out, "{text}")
}

/// `token list`: one line per token, never a secret.
pub fn print_list(rows: &[TokenRow], out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<12}  {:<20}  {:<20}  EXPIRES",
        "ID", "USER", "CREATED"
    )?;
    for row in rows {
        let expires = row.expires_at_ms.map_or_else(|| "never".to_string(), when);
        writeln!(
            out,
            "{:<12}  {:<20}  {:<20}  {expires}",
            row.id,
            row.user,
            when(row.created_at_ms)
        )?;
    }
    Ok(())
}
