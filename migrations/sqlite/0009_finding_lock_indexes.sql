-- A lock's findings of one kind (the lock page's unfenced writes, the
-- findings page filtered by lock and kind) are one index range, however many
-- findings of other kinds the lock has: a lock that resources write to
-- thousands of times an hour has thousands of exposure findings.
CREATE INDEX findings_lock_kind_at ON findings (lock_id, kind, at);

-- The findings that started before a window and last into it are read from
-- (lock_id, until); with at in the index they are told apart from those that
-- start inside the window without reading each row.
DROP INDEX findings_lock_until;
CREATE INDEX findings_lock_until_at ON findings (lock_id, until, at);
