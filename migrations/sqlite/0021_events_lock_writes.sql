-- A lock's write reports carry what their reader wants (holder, token,
-- resource, the highest token the resource had seen) in an index of their
-- own, so that an incident review reads a handover's writes from the index
-- alone. A write report's row lies among the rows of every other lock's
-- reports stored in the same instant, so reading each one cost a page of
-- its own: tens of thousands of pages for a quarter of an hour of a busy
-- lock, and under ingest a read starts from a cold page cache after each
-- commit. events_lock_kind_at stays narrow: counting a lock's writes walks
-- it, and widening its entries so made that count 70% dearer under load.
-- The condition is the rare kinds' (NotRenewal), which the reads repeat;
-- the rare kinds other than writes are few.
CREATE INDEX events_lock_writes ON events (lock_id, kind, at, holder, token, resource,
	CAST(json_extract(detail, '$.highest_token') AS INTEGER)) WHERE kind <> 'renew';
