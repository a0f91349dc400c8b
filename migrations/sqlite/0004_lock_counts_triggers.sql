-- 0003's count triggers used INSERT OR IGNORE, but a trigger takes the
-- conflict policy of the statement that fired it: an insert of a lock row
-- (ABORT) then failed on an existing count row. These insert only when the
-- row is missing, so they never conflict.
DROP TRIGGER locks_count_insert;
DROP TRIGGER locks_count_update;

CREATE TRIGGER locks_count_insert AFTER INSERT ON locks BEGIN
	INSERT INTO lock_counts (source, class, state, n)
		SELECT NEW.source, NEW.class, NEW.state, 0
		WHERE NOT EXISTS (SELECT 1 FROM lock_counts WHERE source = NEW.source AND class = NEW.class AND state = NEW.state);
	UPDATE lock_counts SET n = n + 1 WHERE source = NEW.source AND class = NEW.class AND state = NEW.state;
END;

CREATE TRIGGER locks_count_update AFTER UPDATE OF source, class, state ON locks
WHEN OLD.source IS NOT NEW.source OR OLD.class IS NOT NEW.class OR OLD.state IS NOT NEW.state BEGIN
	UPDATE lock_counts SET n = n - 1 WHERE source = OLD.source AND class = OLD.class AND state = OLD.state;
	INSERT INTO lock_counts (source, class, state, n)
		SELECT NEW.source, NEW.class, NEW.state, 0
		WHERE NOT EXISTS (SELECT 1 FROM lock_counts WHERE source = NEW.source AND class = NEW.class AND state = NEW.state);
	UPDATE lock_counts SET n = n + 1 WHERE source = NEW.source AND class = NEW.class AND state = NEW.state;
END;
