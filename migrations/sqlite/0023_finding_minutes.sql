-- Findings counted per minute, severity and lock class as they are stored,
-- so that the overview's count of the last day's findings of each severity
-- reads a row per minute instead of walking every finding of the day in
-- the index: a lock whose resources stop a stale write a hundred times a
-- second has that many findings a second, and the walk grew with the day.
-- The minutes whole inside a window come from here and its partial minutes
-- at either end from the index, as write_bins (0018) does for writes.
-- minute is the minute's first nanosecond; findings before 1970 are not
-- counted (the reads take them from the index). Triggers keep the counts
-- in the transaction that stores, deletes or reclassifies the findings,
-- whichever path does it.
CREATE TABLE finding_minutes (
	severity TEXT    NOT NULL,
	minute   INTEGER NOT NULL,
	class    TEXT    NOT NULL,
	n        INTEGER NOT NULL,
	PRIMARY KEY (severity, minute, class)
) WITHOUT ROWID;

INSERT INTO finding_minutes (severity, minute, class, n)
	SELECT severity, at - at % 60000000000, class, count(*)
	FROM findings WHERE at >= 0
	GROUP BY 1, 2, 3;

CREATE TRIGGER finding_minutes_insert AFTER INSERT ON findings
WHEN NEW.at >= 0 BEGIN
	INSERT INTO finding_minutes (severity, minute, class, n)
		VALUES (NEW.severity, NEW.at - NEW.at % 60000000000, NEW.class, 1)
		ON CONFLICT (severity, minute, class) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER finding_minutes_delete AFTER DELETE ON findings
WHEN OLD.at >= 0 BEGIN
	UPDATE finding_minutes SET n = n - 1
		WHERE severity = OLD.severity AND minute = OLD.at - OLD.at % 60000000000 AND class = OLD.class;
	DELETE FROM finding_minutes
		WHERE severity = OLD.severity AND minute = OLD.at - OLD.at % 60000000000 AND class = OLD.class AND n <= 0;
END;

CREATE TRIGGER finding_minutes_update AFTER UPDATE OF severity, at, class ON findings
WHEN OLD.severity IS NOT NEW.severity OR OLD.at IS NOT NEW.at OR OLD.class IS NOT NEW.class BEGIN
	UPDATE finding_minutes SET n = n - 1
		WHERE OLD.at >= 0 AND severity = OLD.severity AND minute = OLD.at - OLD.at % 60000000000 AND class = OLD.class;
	DELETE FROM finding_minutes
		WHERE OLD.at >= 0 AND severity = OLD.severity AND minute = OLD.at - OLD.at % 60000000000 AND class = OLD.class AND n <= 0;
	INSERT INTO finding_minutes (severity, minute, class, n)
		SELECT NEW.severity, NEW.at - NEW.at % 60000000000, NEW.class, 1 WHERE NEW.at >= 0
		ON CONFLICT (severity, minute, class) DO UPDATE SET n = n + 1;
END;
