-- Lock lists that read only indexes: the name order carries the state too
-- (state filters and counts per state), a name order without a class for
-- lists of every class, and recency within one state.
DROP INDEX locks_class_source_name;
CREATE INDEX locks_class_source_name_state ON locks (class, source, name, holder, kind, state);
CREATE INDEX locks_source_name_cover ON locks (source, name, holder, kind, class, state);
CREATE INDEX locks_class_state_changed ON locks (class, state, changed_at);

-- Locks per source, class and state, kept by triggers so the overview never
-- groups 50,000 rows.
CREATE TABLE lock_counts (
	source TEXT    NOT NULL,
	class  TEXT    NOT NULL,
	state  TEXT    NOT NULL,
	n      INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (source, class, state)
) WITHOUT ROWID;

INSERT INTO lock_counts (source, class, state, n)
SELECT source, class, state, count(*) FROM locks GROUP BY source, class, state;

CREATE TRIGGER locks_count_insert AFTER INSERT ON locks BEGIN
	INSERT OR IGNORE INTO lock_counts (source, class, state) VALUES (NEW.source, NEW.class, NEW.state);
	UPDATE lock_counts SET n = n + 1 WHERE source = NEW.source AND class = NEW.class AND state = NEW.state;
END;

CREATE TRIGGER locks_count_update AFTER UPDATE OF source, class, state ON locks
WHEN OLD.source IS NOT NEW.source OR OLD.class IS NOT NEW.class OR OLD.state IS NOT NEW.state BEGIN
	UPDATE lock_counts SET n = n - 1 WHERE source = OLD.source AND class = OLD.class AND state = OLD.state;
	INSERT OR IGNORE INTO lock_counts (source, class, state) VALUES (NEW.source, NEW.class, NEW.state);
	UPDATE lock_counts SET n = n + 1 WHERE source = NEW.source AND class = NEW.class AND state = NEW.state;
END;

CREATE TRIGGER locks_count_delete AFTER DELETE ON locks BEGIN
	UPDATE lock_counts SET n = n - 1 WHERE source = OLD.source AND class = OLD.class AND state = OLD.state;
END;

-- A lock's findings that started before a window and last into it.
CREATE INDEX findings_lock_until ON findings (lock_id, until);
