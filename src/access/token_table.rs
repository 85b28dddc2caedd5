//! Access tokens in the metadata database (migration 0005): rows of a token's
//! public id, its user, a SHA-256 of its secret, and its lifetime. The secret
//! itself is never stored; `access` compares hashes in constant time.

use sqlx::AnyPool;

use crate::error::ProxyError;
use crate::meta::sql::db_error;
use crate::meta::sqlite::execute_retrying;
use crate::meta::MetadataStore;

/// One token as the database keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TokenRow {
    pub id: String,
    pub user: String,
    /// Hex SHA-256 of the secret.
    #[serde(skip)]
    pub secret_hash: String,
    pub created_at_ms: i64,
    /// `None`: does not expire.
    pub expires_at_ms: Option<i64>,
}

type Tuple = (String, String, String, i64, Option<i64>);

fn row((id, user, secret_hash, created_at_ms, expires_at_ms): Tuple) -> TokenRow {
    TokenRow {
        id,
        user,
        secret_hash,
        created_at_ms,
        expires_at_ms,
    }
}

/// The `tokens` table of a metadata database.
pub struct TokenTable<'m> {
    pool: &'m AnyPool,
}

impl<'m> TokenTable<'m> {
    /// The table in `meta`'s database.
    pub fn of(meta: &'m MetadataStore) -> TokenTable<'m> {
        TokenTable {
            pool: meta.db.pool(),
        }
    }

    pub async fn insert(&self, token: &TokenRow) -> Result<(), ProxyError> {
        execute_retrying(self.pool, || {
            sqlx::query(
                "INSERT INTO tokens (id, username, secret_hash, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&token.id)
            .bind(&token.user)
            .bind(&token.secret_hash)
            .bind(token.created_at_ms)
            .bind(token.expires_at_ms)
        })
        .await
        .map_err(db_error)?;
        Ok(())
    }

    /// The token with this public id, if there is one.
    pub async fn find(&self, id: &str) -> Result<Option<TokenRow>, ProxyError> {
        let found: Option<Tuple> = sqlx::query_as(
            "SELECT id, username, secret_hash, created_at, expires_at FROM tokens WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(self.pool)
        .await
        .map_err(db_error)?;
        Ok(found.map(row))
    }

    /// Every token (of `user`, when given), oldest first.
    pub async fn list(&self, user: Option<&str>) -> Result<Vec<TokenRow>, ProxyError> {
        let rows: Vec<Tuple> = sqlx::query_as(
            "SELECT id, username, secret_hash, created_at, expires_at FROM tokens \
             WHERE ($1 = '' OR username = $1) ORDER BY created_at, id",
        )
        .bind(user.unwrap_or(""))
        .fetch_all(self.pool)
        .await
        .map_err(db_error)?;
        Ok(rows.into_iter().map(row).collect())
    }

    /// Deletes the token with this id; whether there was one.
    pub async fn revoke(&self, id: &str) -> Result<bool, ProxyError> {
        let done = execute_retrying(self.pool, || {
            sqlx::query("DELETE FROM tokens WHERE id = $1").bind(id)
        })
        .await
        .map_err(db_error)?;
        Ok(done.rows_affected() > 0)
    }
}
