-- Places keyed by where they lie (pack, start, length: an empty blob starts
-- where the next one does), not by digest: a batch's
-- places then go at the end of the table's key, one or two pages of the
-- write-ahead log a batch, where a key of random digests wrote a page of it
-- a packed blob. A digest is found through `blob_places_digest`, which the
-- embedded database keeps only where the entry index and the store's
-- memory of places are not complete (`Database::index_digests`).
CREATE TABLE blob_places_by_place (
    pack BIGINT NOT NULL,
    start_byte BIGINT NOT NULL,
    length BIGINT NOT NULL,
    digest TEXT NOT NULL,
    PRIMARY KEY (pack, start_byte, length)
);
INSERT INTO blob_places_by_place (pack, start_byte, length, digest)
    SELECT pack, start_byte, length, digest FROM blob_places;
DROP TABLE blob_places;
ALTER TABLE blob_places_by_place RENAME TO blob_places;
CREATE INDEX IF NOT EXISTS blob_places_digest ON blob_places (digest);
