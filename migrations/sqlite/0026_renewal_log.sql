-- The renewal log: renewals written without a row each. A commit's renewals
-- that a run can hold (runcodec.LogFits; a renewal of a tenure, not
-- inferred, of no write) are no longer rows of events: those of one bucket
-- of locks (lock_id % 256) and run window become one row here, its data the
-- renewals' lock groups in audit/internal/runcodec's log format. A logged
-- renewal's event id is runcodec.LogID(row, index). Sealing folds the rows
-- into renewal_runs once their window has closed and every sync mark is
-- past them; retention deletes those left past the renew cutoff.
--
-- A row's renewals share a run window, so a read of a lock's window reads
-- one range of its bucket's rows by last_at, as it reads its runs.
-- AUTOINCREMENT: a row's id is part of its renewals' ids, and the sync
-- marks below compare ids: neither may see an id again.
CREATE TABLE renewal_log (
	id       INTEGER PRIMARY KEY AUTOINCREMENT,
	bucket   INTEGER NOT NULL, -- lock_id % 256 of every renewal it holds
	first_at INTEGER NOT NULL, -- unix ns of the earliest observed time, ms-floored
	last_at  INTEGER NOT NULL, -- and of the latest
	renewals INTEGER NOT NULL,
	data     BLOB    NOT NULL  -- lock groups (runcodec log format)
);

CREATE INDEX renewal_log_bucket_last ON renewal_log (bucket, last_at);

-- The log's sync marks: every renewal of a row at or below its source's
-- mark is in its lock and tenure rows, as journal.synced_event and
-- source_fences.synced_event say of event rows. Source '' is the store's
-- mark; a source's own row, once it has one, rules for that source. Apart
-- from journal and source_fences, whose columns are the stores' one
-- logical schema.
CREATE TABLE renewal_log_marks (
	source     TEXT    PRIMARY KEY,
	synced_log INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO renewal_log_marks (source, synced_log) VALUES ('', 0);
