-- Hits per entry, for `mirrorcache ls`: counted in memory on the hit path and
-- added here in the same batches as the access times.
ALTER TABLE entries ADD COLUMN hits BIGINT NOT NULL DEFAULT 0;
