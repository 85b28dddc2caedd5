-- Where the store keeps a small blob packed with others: one row per digest
-- (blobs are content-addressed and shared by rows), written in the same
-- transaction as the rows of the batch that packed it and moved by
-- compaction. A digest with no row here is a file of its own (or an S3
-- object), as every blob of a store made before packs is.
CREATE TABLE IF NOT EXISTS blob_places (
    digest TEXT NOT NULL PRIMARY KEY,
    pack BIGINT NOT NULL,
    start_byte BIGINT NOT NULL,
    length BIGINT NOT NULL
);
