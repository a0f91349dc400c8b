-- A holder's tenures across every lock, newest first (the holder page and
-- GET /api/v1/holders/{holder}/tenures): one index range however many
-- tenures the holder or the store has. tenures is WITHOUT ROWID, so the
-- index ends in its key (lock_id, seq), the rest of the list's order.
CREATE INDEX tenures_holder_granted ON tenures (holder, granted_at);
