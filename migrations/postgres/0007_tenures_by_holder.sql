-- A holder's tenures across every lock, newest first (the holder page and
-- GET /api/v1/holders/{holder}/tenures): one index range read backwards
-- however many tenures the holder or the store has, in the list's whole
-- order (granted_at, lock_id, seq), so it stops at the page's limit.
CREATE INDEX tenures_holder_granted ON tenures (holder, granted_at, lock_id, seq);
