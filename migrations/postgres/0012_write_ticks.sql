-- A lock's write reports counted per ten seconds and outcome as they are
-- stored (the SQLite set's 0022), so that a lock page's timeline counts an
-- hour of writes from 720 rows instead of walking every write of the
-- window in the index. tick is the first nanosecond of the ten seconds;
-- writes before 1970 are not counted (the reads take them from the
-- events). Statement triggers keep the counts in the transaction that
-- stores or deletes the writes: one grouped upsert per COPY or DELETE, in
-- key order, so that replicas storing writes of the same lock at once wait
-- for each other's rows rather than deadlock.
CREATE TABLE write_ticks (
	lock_id BIGINT NOT NULL,
	kind    TEXT   COLLATE "C" NOT NULL, -- write_accepted, write_rejected
	tick    BIGINT NOT NULL,
	n       BIGINT NOT NULL,
	PRIMARY KEY (lock_id, kind, tick)
);

INSERT INTO write_ticks (lock_id, kind, tick, n)
	SELECT lock_id, kind, at - at % 10000000000, count(*)
	FROM events WHERE kind IN ('write_accepted', 'write_rejected') AND at >= 0
	GROUP BY 1, 2, 3;

CREATE FUNCTION write_ticks_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO write_ticks (lock_id, kind, tick, n)
		SELECT lock_id, kind, at - at % 10000000000, count(*)
		FROM added WHERE kind IN ('write_accepted', 'write_rejected') AND at >= 0
		GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
	ON CONFLICT (lock_id, kind, tick) DO UPDATE SET n = write_ticks.n + excluded.n;
	RETURN NULL;
END $$;

CREATE FUNCTION write_ticks_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	WITH gone AS (
		SELECT lock_id, kind, at - at % 10000000000 AS tick, count(*) AS n
		FROM removed WHERE kind IN ('write_accepted', 'write_rejected') AND at >= 0
		GROUP BY 1, 2, 3
	)
	UPDATE write_ticks t SET n = t.n - g.n
	FROM gone g
	WHERE t.lock_id = g.lock_id AND t.kind = g.kind AND t.tick = g.tick;
	DELETE FROM write_ticks t USING (SELECT DISTINCT lock_id, kind, at - at % 10000000000 AS tick FROM removed
			WHERE kind IN ('write_accepted', 'write_rejected') AND at >= 0) g
		WHERE t.lock_id = g.lock_id AND t.kind = g.kind AND t.tick = g.tick AND t.n <= 0;
	RETURN NULL;
END $$;

CREATE TRIGGER write_ticks_insert AFTER INSERT ON events
	REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION write_ticks_add();
CREATE TRIGGER write_ticks_delete AFTER DELETE ON events
	REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION write_ticks_remove();
