-- The dashboard at scale (50,000 locks, 10 million events): indexes for the
-- locks list's filters, orders and keyset pages, the timeline's window reads,
-- and two small tables that the store keeps up to date on every batch so the
-- overview and sources pages never scan events or findings.

-- Locks by name within a class (the default list hides heartbeats). Holder and
-- kind ride along so a substring search or kind filter reads only the index.
CREATE INDEX locks_class_source_name ON locks (class, source, name, holder, kind);
-- Most recently changed first.
CREATE INDEX locks_class_changed ON locks (class, changed_at);
-- Least lease left first, near-expiry scans, and counts per source, class and
-- state, all without reading the lock rows.
CREATE INDEX locks_class_state_expires ON locks (class, state, expires_at, lease_duration_ms, source);
-- Exact holder filter.
CREATE INDEX locks_holder ON locks (holder);

-- Tenures overlapping a window: those ending in it, and those granted before
-- its end.
CREATE INDEX tenures_lock_ended ON tenures (lock_id, ended_at);
CREATE INDEX tenures_lock_granted ON tenures (lock_id, granted_at);

-- Findings per severity over a time range (overview counts, severity filter).
CREATE INDEX findings_severity_at ON findings (severity, at);

-- Blind windows per source, one row per interval rather than one per lock.
CREATE TABLE source_blinds (
	source  TEXT    NOT NULL,
	from_at INTEGER NOT NULL,
	to_at   INTEGER NOT NULL,
	reason  TEXT    NOT NULL DEFAULT '',
	locks   INTEGER NOT NULL DEFAULT 0, -- locks of the source it covered
	PRIMARY KEY (source, from_at, to_at)
) WITHOUT ROWID;
CREATE INDEX source_blinds_to ON source_blinds (to_at);

INSERT INTO source_blinds (source, from_at, to_at, locks)
SELECT l.source, f.at, coalesce(f.until, f.at), count(*)
FROM findings f JOIN locks l ON l.id = f.lock_id
WHERE f.kind = 'blind_window'
GROUP BY l.source, f.at, coalesce(f.until, f.at);

-- The newest event per source.
CREATE TABLE source_events (
	source        TEXT    PRIMARY KEY,
	last_event_at INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO source_events (source, last_event_at)
SELECT l.source, max((SELECT max(e.at) FROM events e WHERE e.lock_id = l.id))
FROM locks l GROUP BY l.source
HAVING max((SELECT max(e.at) FROM events e WHERE e.lock_id = l.id)) IS NOT NULL;
