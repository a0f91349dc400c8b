-- A lock's findings of one kind carry their resource and tokens in the
-- index, so that a verdict counts a day of stale writes per resource, and an
-- incident review names the writes that stale and unfenced writes are
-- about, from the index alone: a lock that resources write to thousands of
-- times an hour has a finding for each write its fencing stopped, and
-- reading each of those rows was most of the dashboard's time under load.
DROP INDEX findings_lock_kind_at;
CREATE INDEX findings_lock_kind_at ON findings (lock_id, kind, at, resource, tokens);
