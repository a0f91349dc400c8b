-- Renewal runs: a lock's renewals of one tenure, one hour window of their
-- observed time, one TTL and one detail, up to 4096, encoded together by
-- audit/internal/runcodec (format version 1) in data. Sealing
-- (audit/postgres's SealRenewals) folds the rows of renewals into runs once
-- their hour has closed and they are synced; a renewal the codec cannot
-- hold stays a row. The reads merge runs with rows.
--
-- Why this shape:
--   - A run is one row for hundreds of renewals (360 an hour at 10 s), so
--     its header, its columns and its index entries cost well under a byte
--     a renewal; what a renewal costs is its share of data.
--   - data is bit-packed and does not compress: STORAGE EXTERNAL keeps a
--     long run's data out of line in TOAST without trying pglz on it first
--     (EXTENDED, the default for bytea, would try, fail, and store it as it
--     is, having spent the CPU). A run shorter than the TOAST threshold
--     (about 2 kB: a node lease's hour) stays in the row.
--   - first_at and last_at are the first and last renewal's observed time
--     as decoded (unix ns, ms-floored), renewals the count and
--     min_margin_permille the least margin (NULL: none known), so that
--     retention summarises a run without decoding it.
--   - One index for the reads, (lock_id, last_at): a lock's runs newest
--     first, each run's last renewal bounding it. The key on id is for a
--     copy's walk in id order; ids stay below 2^40, since a renewal's event
--     id is 1<<52 | run<<12 | index.
-- Nothing here is moved: the rows stored before are folded by sealing.

CREATE TABLE renewal_runs (
	id                  BIGINT  GENERATED ALWAYS AS IDENTITY (MAXVALUE 1099511627775) PRIMARY KEY,
	lock_id             BIGINT  NOT NULL REFERENCES locks (id),
	seq                 BIGINT  NOT NULL,
	first_at            BIGINT  NOT NULL,
	last_at             BIGINT  NOT NULL,
	ttl_ms              BIGINT  NOT NULL,
	min_margin_permille BIGINT,
	renewals            INTEGER NOT NULL,
	detail              TEXT, -- JSON object, NULL: none
	data                BYTEA   NOT NULL
);

ALTER TABLE renewal_runs ALTER COLUMN data SET STORAGE EXTERNAL;

CREATE INDEX renewal_runs_lock_last ON renewal_runs (lock_id, last_at);
