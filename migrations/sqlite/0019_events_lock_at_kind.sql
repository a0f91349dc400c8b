-- A lock's timeline index carries each event's kind, so that the events of
-- one kind among many of others (the renewals a lock page's health panel
-- and timeline read, among the thousands of write reports an hour that a
-- protected resource sends) are told apart by the index entry alone, where
-- each entry used to cost a read of its row: a seventh of the time on a
-- lock that resources write to forty times for each renewal. About six
-- bytes more an event. The rowid still follows, so a lock's events in
-- (at, id) order are the index's order within each instant's kinds, which
-- SQLite sorts as it goes (a few events at most).
DROP INDEX events_lock_at;
CREATE INDEX events_lock_at ON events (lock_id, at, kind);
