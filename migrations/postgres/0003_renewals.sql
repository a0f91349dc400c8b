-- Renewals, most rows of every database, in a table of their own whose row
-- is as narrow as PostgreSQL can store it, read with the other events
-- through the view timeline.
--
-- A renewal that names its tenure and carries nothing but its times, TTL,
-- margin, position and detail (audit/postgres's compact renewal) is stored
-- here; any other event, and a renewal with more (a holder, a token, an
-- inferred one, a value out of these columns' range), stays in events.
--
-- Why this shape (8 kB pages; each row also takes a 4-byte line pointer):
--   - Every column is NOT NULL, with a value for "none", so no row needs a
--     null bitmap and its header stays at 24 bytes: 72 bytes a row with no
--     position or detail, against 96 in events (whose 15 columns need a 2-byte bitmap and a 32-byte
--     header).
--   - One B-tree, the timeline's (lock_id, at): two eight-byte keys, 28
--     bytes an entry. Equal times are put in id order by the reads.
--   - No B-tree on id. What reads by id (the journal's unsynced tail,
--     retention's walk, a copy) reads one partition through a BRIN index,
--     a few pages for the whole partition. BRIN works because a
--     partition's rows lie in the order of their ids: they are appended
--     in that order, and the space of deleted ones, in older partitions,
--     takes no new rows. Where retention deletes in the partition still
--     being filled (a retention shorter than the time a partition takes to
--     fill), new rows do reuse that space; the minmax-multi summaries keep
--     several intervals per block range, so such a range matches the ids
--     it holds or once held, not every id between the oldest and newest.
--   - Partitions by ranges of ids, created by the store as ids reach them
--     and dropped whole once retention has walked past them.
-- No foreign key: locks are never deleted, and the writer resolves every
-- lock id in the transaction that stores its renewals.

CREATE TABLE renewals (
	id              BIGINT  NOT NULL,
	lock_id         BIGINT  NOT NULL,
	at              BIGINT  NOT NULL,
	renewed_at      BIGINT  NOT NULL, -- -9223372036854775808: none
	seq             INTEGER NOT NULL,
	ttl_ms          INTEGER NOT NULL,
	margin_permille INTEGER NOT NULL, -- -2147483648: none
	position        TEXT    NOT NULL,
	detail          TEXT    NOT NULL  -- JSON object, '': none
) PARTITION BY RANGE (id);

CREATE INDEX renewals_lock_at ON renewals (lock_id, at);
CREATE INDEX renewals_id ON renewals USING brin (id int8_minmax_multi_ops) WITH (autosummarize = on);

-- Every event, as the events table had them: a renewal here reads as a
-- compact renewal of events. The casts make both sides' types one, so the
-- planner flattens the union and pushes each condition into both: a
-- condition on kind that excludes renewals drops this table from the plan.
CREATE VIEW timeline AS
	SELECT id, lock_id, kind, at, holder, token, ttl_ms, position, inferred, resource, request_id,
		detail, seq, margin_permille, renewed_at
	FROM events
	UNION ALL
	SELECT id, lock_id, CAST('renew' AS TEXT) COLLATE "C", at, CAST('' AS TEXT) COLLATE "C",
		CAST(NULL AS BIGINT), CAST(ttl_ms AS BIGINT), position, false, CAST('' AS TEXT) COLLATE "C",
		CAST(NULL AS TEXT) COLLATE "C", NULLIF(detail, ''), CAST(seq AS BIGINT),
		CAST(NULLIF(margin_permille, -2147483648) AS BIGINT), NULLIF(renewed_at, -9223372036854775808)
	FROM renewals;

-- The compact renewals stored so far move in, into partitions of the
-- store's default span of ids (audit/postgres's Options.RenewalSpan).
CREATE TEMPORARY TABLE compact ON COMMIT DROP AS
	SELECT id FROM events
	WHERE kind = 'renew' AND seq BETWEEN 1 AND 2147483647 AND holder = '' AND token IS NULL
		AND NOT inferred AND resource = '' AND request_id IS NULL AND ttl_ms BETWEEN 0 AND 2147483647
		AND (margin_permille IS NULL OR margin_permille BETWEEN -2147483647 AND 2147483647)
		AND (renewed_at IS NULL OR renewed_at <> -9223372036854775808)
		AND (detail IS NULL OR detail <> '');

DO $$
DECLARE
	span CONSTANT BIGINT := 4194304;
	d BIGINT;
BEGIN
	FOR d IN SELECT DISTINCT id / span FROM compact LOOP
		EXECUTE format('CREATE TABLE renewals_%s (LIKE renewals) WITH (autovacuum_vacuum_insert_scale_factor = 0.02)', d * span);
		EXECUTE format('ALTER TABLE renewals ATTACH PARTITION renewals_%s FOR VALUES FROM (%s) TO (%s)',
			d * span, d * span, (d + 1) * span);
	END LOOP;
END $$;

WITH moved AS (
	DELETE FROM events e USING compact c WHERE e.id = c.id
	RETURNING e.id, e.lock_id, e.at, e.renewed_at, e.seq, e.ttl_ms, e.margin_permille, e.position, e.detail
)
INSERT INTO renewals (id, lock_id, at, renewed_at, seq, ttl_ms, margin_permille, position, detail)
	SELECT id, lock_id, at, coalesce(renewed_at, -9223372036854775808), seq, ttl_ms,
		coalesce(margin_permille, -2147483648), position, coalesce(detail, '')
	FROM moved ORDER BY id;

-- A sync rewrites the renewal columns of every renewed tenure, none of them
-- indexed: room on each page lets PostgreSQL write the new version beside
-- the old one (a HOT update, no index entries) and reclaim the old one on
-- the next visit, where a full page puts it elsewhere with three index
-- entries that stay until a vacuum.
ALTER TABLE tenures SET (fillfactor = 80);
