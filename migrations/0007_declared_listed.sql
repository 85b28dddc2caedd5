-- When a prune round first saw a cached index document list the row's
-- artifact; NULL for rows no document was seen listing (pins on first use,
-- Maven sidecars), which pruning keeps. See src/cache/prune.rs.
ALTER TABLE declared ADD COLUMN listed_at BIGINT;
