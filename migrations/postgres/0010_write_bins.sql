-- A lock's write reports counted per minute, resource and outcome as they
-- are stored (the SQLite set's 0018), so that a verdict's or a review's
-- totals over a long window read one row per minute and resource instead
-- of every write. The minutes whole inside a window come from here and its
-- partial minutes at either end from the events. bin is the minute's first
-- nanosecond; writes before 1970 are not binned (the reads take them from
-- the events). Statement triggers keep the counts in the transaction that
-- stores or deletes the writes: one grouped upsert per COPY or DELETE, in
-- key order, so that replicas storing writes of the same lock at once wait
-- for each other's rows rather than deadlock. last_at is the bin's newest
-- write: a delete of it reads the next newest.
CREATE TABLE write_bins (
	lock_id   BIGINT NOT NULL,
	bin       BIGINT NOT NULL,
	resource  TEXT   COLLATE "C" NOT NULL,
	kind      TEXT   COLLATE "C" NOT NULL, -- write_accepted, write_rejected
	n         BIGINT NOT NULL,
	untokened BIGINT NOT NULL,             -- of n, those without a token
	last_at   BIGINT NOT NULL,
	PRIMARY KEY (lock_id, bin, resource, kind)
);

INSERT INTO write_bins (lock_id, bin, resource, kind, n, untokened, last_at)
	SELECT lock_id, at - at % 60000000000, resource, kind, count(*), count(*) FILTER (WHERE token IS NULL), max(at)
	FROM events WHERE kind IN ('write_accepted', 'write_rejected') AND at >= 0
	GROUP BY 1, 2, 3, 4;

CREATE FUNCTION write_bins_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO write_bins (lock_id, bin, resource, kind, n, untokened, last_at)
		SELECT lock_id, at - at % 60000000000, resource, kind, count(*), count(*) FILTER (WHERE token IS NULL), max(at)
		FROM added WHERE kind IN ('write_accepted', 'write_rejected') AND at >= 0
		GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
	ON CONFLICT (lock_id, bin, resource, kind) DO UPDATE SET
		n = write_bins.n + excluded.n,
		untokened = write_bins.untokened + excluded.untokened,
		last_at = greatest(write_bins.last_at, excluded.last_at);
	RETURN NULL;
END $$;

CREATE FUNCTION write_bins_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	WITH gone AS (
		SELECT lock_id, at - at % 60000000000 AS bin, resource, kind, count(*) AS n,
			count(*) FILTER (WHERE token IS NULL) AS untokened, max(at) AS last_at
		FROM removed WHERE kind IN ('write_accepted', 'write_rejected') AND at >= 0
		GROUP BY 1, 2, 3, 4
	)
	UPDATE write_bins b SET n = b.n - g.n, untokened = b.untokened - g.untokened,
		last_at = CASE WHEN g.last_at < b.last_at THEN b.last_at ELSE coalesce((SELECT max(e.at) FROM events e
			WHERE e.lock_id = b.lock_id AND e.kind = b.kind AND e.kind <> 'renew' AND e.resource = b.resource
				AND e.at >= b.bin AND e.at < b.bin + 60000000000), b.last_at) END
	FROM gone g
	WHERE b.lock_id = g.lock_id AND b.bin = g.bin AND b.resource = g.resource AND b.kind = g.kind;
	DELETE FROM write_bins b USING (SELECT DISTINCT lock_id, at - at % 60000000000 AS bin, resource, kind FROM removed
			WHERE kind IN ('write_accepted', 'write_rejected') AND at >= 0) g
		WHERE b.lock_id = g.lock_id AND b.bin = g.bin AND b.resource = g.resource AND b.kind = g.kind AND b.n <= 0;
	RETURN NULL;
END $$;

CREATE TRIGGER write_bins_insert AFTER INSERT ON events
	REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION write_bins_add();
CREATE TRIGGER write_bins_delete AFTER DELETE ON events
	REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION write_bins_remove();
