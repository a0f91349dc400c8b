-- A lock's write reports counted per ten seconds and outcome as they are
-- stored, so that a lock page's timeline counts an hour of writes from 720
-- rows instead of walking every write of the window in the index: a lock
-- that resources write to fifty times a second has 180,000 writes an hour,
-- and walking them was a third of the dashboard's work under load.
-- write_bins (0018) counts per minute and resource, too coarse for a
-- timeline's stretches and as many rows as resources. tick is the first
-- nanosecond of the ten seconds; writes before 1970 are not counted (the
-- reads take them from the events). Triggers keep the counts in the
-- transaction that stores or deletes the writes, whichever path does it.
CREATE TABLE write_ticks (
	lock_id INTEGER NOT NULL,
	kind    TEXT    NOT NULL, -- write_accepted, write_rejected
	tick    INTEGER NOT NULL,
	n       INTEGER NOT NULL,
	PRIMARY KEY (lock_id, kind, tick)
) WITHOUT ROWID;

INSERT INTO write_ticks (lock_id, kind, tick, n)
	SELECT lock_id, kind, at - at % 10000000000, count(*)
	FROM events WHERE kind IN ('write_accepted', 'write_rejected') AND at >= 0
	GROUP BY 1, 2, 3;

CREATE TRIGGER write_ticks_insert AFTER INSERT ON events
WHEN NEW.kind IN ('write_accepted', 'write_rejected') AND NEW.at >= 0 BEGIN
	INSERT INTO write_ticks (lock_id, kind, tick, n)
		VALUES (NEW.lock_id, NEW.kind, NEW.at - NEW.at % 10000000000, 1)
		ON CONFLICT (lock_id, kind, tick) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER write_ticks_delete AFTER DELETE ON events
WHEN OLD.kind IN ('write_accepted', 'write_rejected') AND OLD.at >= 0 BEGIN
	UPDATE write_ticks SET n = n - 1
		WHERE lock_id = OLD.lock_id AND kind = OLD.kind AND tick = OLD.at - OLD.at % 10000000000;
	DELETE FROM write_ticks
		WHERE lock_id = OLD.lock_id AND kind = OLD.kind AND tick = OLD.at - OLD.at % 10000000000 AND n <= 0;
END;
