-- One row per cached remote/path. Portable SQL: the same text runs on SQLite and Postgres.
CREATE TABLE IF NOT EXISTS entries (
    remote TEXT NOT NULL,
    path TEXT NOT NULL,
    digest TEXT NOT NULL,
    size BIGINT NOT NULL,
    content_type TEXT,
    upstream_etag TEXT,
    upstream_last_modified TEXT,
    fetched_at BIGINT NOT NULL,
    last_access BIGINT NOT NULL,
    PRIMARY KEY (remote, path)
);
CREATE INDEX IF NOT EXISTS entries_digest ON entries (digest);
CREATE INDEX IF NOT EXISTS entries_last_access ON entries (last_access);
