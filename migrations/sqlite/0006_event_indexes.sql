-- Renewals are most events, and every index entry is written per event. The
-- per-kind index now leaves renewals out: a renewal writes one index entry
-- instead of two, and the rare kinds (grants, ends, write reports) are still
-- one index range among millions of renewals. A lock's renewal times are its
-- event times (events_lock_at) less those of the rare kinds.
DROP INDEX events_lock_kind_at;
CREATE INDEX events_lock_kind_at ON events (lock_id, kind, at) WHERE kind <> 'renew';
