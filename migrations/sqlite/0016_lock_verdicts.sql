-- Each lock's safety verdict over the last 24 hours, as the query layer's
-- keeper last judged it (audit/verdict Keeper): the locks list's column and
-- filter, the overview's counts and the locks-per-verdict metric read it,
-- not a scan of every lock's history. Absent: not judged yet.
CREATE TABLE lock_verdicts (
	lock_id   INTEGER PRIMARY KEY REFERENCES locks (id),
	verdict   TEXT NOT NULL,
	judged_at INTEGER NOT NULL
);
CREATE INDEX lock_verdicts_verdict ON lock_verdicts (verdict, lock_id);
