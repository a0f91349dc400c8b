-- A lock's findings of one kind carry their resource and tokens in the
-- index (the SQLite set's 0020), so that a verdict counts a day of stale
-- writes per resource, and an incident review names the writes that stale
-- and unfenced writes are about, with index-only scans: a lock that
-- resources write to thousands of times an hour has a finding for each
-- write its fencing stopped.
DROP INDEX findings_lock_kind_at;
CREATE INDEX findings_lock_kind_at ON findings (lock_id, kind, at, id) INCLUDE (resource, tokens);
