-- Digests that index documents declared for artifacts (`algo:hex`), learned
-- as the documents pass through and checked by every fill of the artifact.
-- `artifact` is the path below the remote (for cargo, `crate/version`).
CREATE TABLE IF NOT EXISTS declared (
    remote TEXT NOT NULL,
    artifact TEXT NOT NULL,
    digest TEXT NOT NULL,
    learned_at BIGINT NOT NULL,
    PRIMARY KEY (remote, artifact)
);
