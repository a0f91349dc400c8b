-- Heartbeats' findings are kept out of the default views and counts. Each
-- finding carries its lock's class, so the overview counts a day of findings
-- of one class per severity in one index range, without looking up every
-- finding's lock. The store sets it when it inserts a finding; the trigger
-- follows a lock whose class changes (heartbeat_namespaces edited, or a lock
-- first stored without its row by an event or finding).
ALTER TABLE findings ADD COLUMN class TEXT NOT NULL DEFAULT 'lock';

UPDATE findings SET class = (SELECT l.class FROM locks l WHERE l.id = findings.lock_id)
WHERE lock_id IN (SELECT id FROM locks WHERE class <> 'lock');

CREATE INDEX findings_class_severity_at ON findings (class, severity, at);

CREATE TRIGGER locks_class_findings AFTER UPDATE OF class ON locks
WHEN OLD.class IS NOT NEW.class BEGIN
	UPDATE findings SET class = NEW.class WHERE lock_id = NEW.id;
END;
