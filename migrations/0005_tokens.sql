-- Access tokens (`mirrorcache token add`): only a hash of each secret is kept,
-- so every instance sharing the database accepts a token and none can show it.
-- `id` is the token's public part, shown by `token list` and named by `token revoke`.
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT NOT NULL PRIMARY KEY,
    username TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT
);
