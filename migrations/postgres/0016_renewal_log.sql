-- The renewal log: renewals written without a row each, as SQLite's
-- migration 0026 writes them. A commit's renewals that a run can hold
-- (runcodec.LogFits; a renewal of a tenure, not inferred, of no write) are
-- no longer rows of renewals: those of one bucket of locks (lock_id % 256)
-- and run window become one row here, its data the renewals' lock groups in
-- audit/internal/runcodec's log format. A logged renewal's event id is
-- runcodec.LogID(row, index). Sealing folds the rows into renewal_runs once
-- their window has closed and every sync mark is past them; retention
-- deletes those left past the renew cutoff. Renewals the log cannot keep
-- stay rows of renewals (or events), as before.
--
-- Why this shape:
--   - A row's renewals share a run window, so a read of a lock's window
--     reads one range of its bucket's rows by last_at, as it reads its runs
--     (renewal_log_bucket_last).
--   - The id is part of its renewals' ids (below 2^39: runcodec.MaxLogRowID)
--     and the sync marks below compare ids: the writer gives a commit's rows
--     ids from a block of 4096 that one nextval of the identity's sequence
--     reserves (INCREMENT BY), so an id is never seen again and a commit
--     seldom waits for its ids. The key on id serves the replay after the
--     marks and sealing's deletes.
--   - data is bit-packed and does not compress: STORAGE EXTERNAL, as in
--     renewal_runs (0015).
--   - The columns go widest first, so that none is padded.
CREATE TABLE renewal_log (
	id       BIGINT  GENERATED ALWAYS AS IDENTITY (INCREMENT BY 4096 MAXVALUE 549755809792) PRIMARY KEY,
	first_at BIGINT  NOT NULL, -- unix ns of the earliest observed time, ms-floored
	last_at  BIGINT  NOT NULL, -- and of the latest
	bucket   INTEGER NOT NULL, -- lock_id % 256 of every renewal it holds
	renewals INTEGER NOT NULL,
	data     BYTEA   NOT NULL  -- lock groups (runcodec log format)
);

ALTER TABLE renewal_log ALTER COLUMN data SET STORAGE EXTERNAL;

CREATE INDEX renewal_log_bucket_last ON renewal_log (bucket, last_at);

-- The log's sync marks: every renewal of a row at or below its source's
-- mark is in its lock and tenure rows, as journal.synced_event and
-- source_fences.synced_event say of event rows. Source '' is the store's
-- mark; a source's own row, once it has one, rules for that source. Apart
-- from journal and source_fences, whose columns are the stores' one
-- logical schema.
CREATE TABLE renewal_log_marks (
	source     TEXT   PRIMARY KEY,
	synced_log BIGINT NOT NULL
);

INSERT INTO renewal_log_marks (source, synced_log) VALUES ('', 0);
