-- The key registry tokens (`/v2/token`) are signed with: one row, written by
-- the first instance that needs it, so every instance sharing the database
-- signs and accepts the same tokens.
CREATE TABLE IF NOT EXISTS registry_keys (
    id TEXT NOT NULL PRIMARY KEY,
    secret TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
