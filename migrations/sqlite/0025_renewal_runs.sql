-- Renewal runs. A renewal still arrives as a compact row of events (a staged
-- renewal: seq set, holder '' and token NULL), durable at once and replayed
-- from there after a crash. Once its hour window has closed, retention's
-- sealing folds a lock's staged renewals of one tenure, hour window of
-- observed time, TTL and detail into one run: a row here whose data holds
-- up to 4096 renewals in audit/internal/runcodec's format, and deletes the
-- rows. A node lease's hour of renewals is then a few bytes each instead of
-- a row and an index entry each. Readers merge runs with the rows left.
--
-- This creates the table only: the renewal rows stored before it are
-- folded in place by the first sealing passes, like any staged renewals.
-- AUTOINCREMENT: a run's id is part of the ids of its renewals
-- (runcodec.ID), which must never name another renewal once the run is
-- pruned.
CREATE TABLE renewal_runs (
	id                  INTEGER PRIMARY KEY AUTOINCREMENT,
	lock_id             INTEGER NOT NULL REFERENCES locks (id),
	seq                 INTEGER NOT NULL, -- the tenure
	first_at            INTEGER NOT NULL, -- unix ns of the first renewal's observed time, ms-floored
	last_at             INTEGER NOT NULL, -- and of the last
	renewals            INTEGER NOT NULL,
	ttl_ms              INTEGER NOT NULL,
	min_margin_permille INTEGER,          -- NULL: no renewal knew its margin
	detail              TEXT,             -- JSON of the detail every renewal shares beyond margin and renewal time
	data                BLOB    NOT NULL  -- the renewals (runcodec format)
);

-- A lock's runs newest first, for reads (a run spans less than an hour, so
-- a window's runs are one range of it) and for retention (last_at).
CREATE INDEX renewal_runs_lock_last ON renewal_runs (lock_id, last_at);
