-- Findings counted per minute, severity and lock class as they are stored
-- (the SQLite set's 0023), so that the overview's count of the last day's
-- findings of each severity reads a row per minute instead of walking
-- every finding of the day in the index. The minutes whole inside a window
-- come from here and its partial minutes at either end from the index.
-- minute is the minute's first nanosecond; findings before 1970 are not
-- counted (the reads take them from the index). Statement triggers keep
-- the counts in the transaction that stores, deletes or reclassifies the
-- findings: one grouped upsert per statement, in key order, so that
-- replicas storing findings at once wait for each other's rows rather than
-- deadlock.
CREATE TABLE finding_minutes (
	severity TEXT   COLLATE "C" NOT NULL,
	minute   BIGINT NOT NULL,
	class    TEXT   COLLATE "C" NOT NULL,
	n        BIGINT NOT NULL,
	PRIMARY KEY (severity, minute, class)
);

INSERT INTO finding_minutes (severity, minute, class, n)
	SELECT severity, at - at % 60000000000, class, count(*)
	FROM findings WHERE at >= 0
	GROUP BY 1, 2, 3;

CREATE FUNCTION finding_minutes_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO finding_minutes (severity, minute, class, n)
		SELECT severity, at - at % 60000000000, class, count(*) FROM added WHERE at >= 0
		GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
	ON CONFLICT (severity, minute, class) DO UPDATE SET n = finding_minutes.n + excluded.n;
	RETURN NULL;
END $$;

CREATE FUNCTION finding_minutes_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE finding_minutes m SET n = m.n - g.n
	FROM (SELECT severity, at - at % 60000000000 AS minute, class, count(*) AS n FROM removed
			WHERE at >= 0 GROUP BY 1, 2, 3) g
	WHERE m.severity = g.severity AND m.minute = g.minute AND m.class = g.class;
	DELETE FROM finding_minutes m USING (SELECT DISTINCT severity, at - at % 60000000000 AS minute, class FROM removed
			WHERE at >= 0) g
		WHERE m.severity = g.severity AND m.minute = g.minute AND m.class = g.class AND m.n <= 0;
	RETURN NULL;
END $$;

CREATE FUNCTION finding_minutes_move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO finding_minutes (severity, minute, class, n)
		SELECT severity, minute, class, sum(n) FROM (
			SELECT severity, at - at % 60000000000 AS minute, class, -1 AS n FROM gone WHERE at >= 0
			UNION ALL SELECT severity, at - at % 60000000000, class, 1 FROM came WHERE at >= 0
		) d GROUP BY 1, 2, 3 HAVING sum(n) <> 0 ORDER BY 1, 2, 3
	ON CONFLICT (severity, minute, class) DO UPDATE SET n = finding_minutes.n + excluded.n;
	DELETE FROM finding_minutes m USING (SELECT DISTINCT severity, at - at % 60000000000 AS minute, class FROM gone
			WHERE at >= 0) g
		WHERE m.severity = g.severity AND m.minute = g.minute AND m.class = g.class AND m.n <= 0;
	RETURN NULL;
END $$;

CREATE TRIGGER finding_minutes_insert AFTER INSERT ON findings
	REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION finding_minutes_add();
CREATE TRIGGER finding_minutes_delete AFTER DELETE ON findings
	REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION finding_minutes_remove();
CREATE TRIGGER finding_minutes_update AFTER UPDATE ON findings
	REFERENCING OLD TABLE AS gone NEW TABLE AS came FOR EACH STATEMENT EXECUTE FUNCTION finding_minutes_move();
