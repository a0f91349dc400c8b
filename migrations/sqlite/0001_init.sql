-- Locks, their tenures, events and findings, and the collectors' resume cursors.
--
-- Times are INTEGER unix nanoseconds UTC. 0 is the zero (unknown) time; the few
-- nullable time columns use NULL for "not yet" (a tenure still held, a finding
-- that is an instant). Durations are INTEGER milliseconds. Enumerations (kind,
-- class, state, severity) carry no CHECK so new values never need a table rebuild.

CREATE TABLE locks (
	id                INTEGER PRIMARY KEY,
	source            TEXT    NOT NULL,
	kind              TEXT    NOT NULL DEFAULT '',
	name              TEXT    NOT NULL,
	class             TEXT    NOT NULL DEFAULT 'lock',
	state             TEXT    NOT NULL DEFAULT 'free',
	holder            TEXT    NOT NULL DEFAULT '',
	token             INTEGER,
	acquired_at       INTEGER NOT NULL DEFAULT 0,
	renewed_at        INTEGER NOT NULL DEFAULT 0,
	expires_at        INTEGER NOT NULL DEFAULT 0,
	lease_duration_ms INTEGER NOT NULL DEFAULT 0,
	changed_at        INTEGER NOT NULL DEFAULT 0,
	-- JSON of audit.TrackState (without its Lock, which is the columns above);
	-- NULL for a lock only ever referenced by an event or finding.
	track_state       TEXT,
	UNIQUE (source, name)
);

CREATE TABLE tenures (
	lock_id           INTEGER NOT NULL REFERENCES locks (id),
	seq               INTEGER NOT NULL,
	holder            TEXT    NOT NULL DEFAULT '',
	token             INTEGER,
	granted_at        INTEGER NOT NULL DEFAULT 0,
	observed          INTEGER NOT NULL DEFAULT 0,
	position          TEXT    NOT NULL DEFAULT '',
	renewals          INTEGER NOT NULL DEFAULT 0,
	last_renewed_at   INTEGER NOT NULL DEFAULT 0,
	lease_duration_ms INTEGER NOT NULL DEFAULT 0,
	expires_at        INTEGER NOT NULL DEFAULT 0,
	ended_at          INTEGER, -- NULL while held
	end_reason        TEXT,    -- released, expired, superseded; NULL while held
	PRIMARY KEY (lock_id, seq)
) WITHOUT ROWID;

CREATE TABLE events (
	id         INTEGER PRIMARY KEY,
	lock_id    INTEGER NOT NULL REFERENCES locks (id),
	kind       TEXT    NOT NULL,
	at         INTEGER NOT NULL,
	holder     TEXT    NOT NULL DEFAULT '',
	token      INTEGER,
	ttl_ms     INTEGER NOT NULL DEFAULT 0,
	position   TEXT    NOT NULL DEFAULT '',
	inferred   INTEGER NOT NULL DEFAULT 0,
	resource   TEXT    NOT NULL DEFAULT '',
	request_id TEXT,   -- write reports' idempotency key
	detail     TEXT    -- JSON object
);

-- A lock's timeline, newest first; also max(at) per lock for LastEventAt.
CREATE INDEX events_lock_at ON events (lock_id, at);
-- A lock's events of one kind (grants among many renewals).
CREATE INDEX events_lock_kind_at ON events (lock_id, kind, at);
-- A retried write report is stored once.
CREATE UNIQUE INDEX events_request_id ON events (request_id) WHERE request_id IS NOT NULL;

CREATE TABLE findings (
	id       INTEGER PRIMARY KEY,
	lock_id  INTEGER NOT NULL REFERENCES locks (id),
	kind     TEXT    NOT NULL,
	severity TEXT    NOT NULL,
	at       INTEGER NOT NULL,
	until    INTEGER, -- NULL for an instant
	summary  TEXT    NOT NULL DEFAULT '',
	tokens   TEXT    NOT NULL DEFAULT '[]', -- JSON array of integers
	holders  TEXT    NOT NULL DEFAULT '[]', -- JSON array of strings
	resource TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX findings_lock_at ON findings (lock_id, at);
CREATE INDEX findings_at ON findings (at);
CREATE INDEX findings_kind_at ON findings (kind, at);

CREATE TABLE cursors (
	source   TEXT    PRIMARY KEY,
	position TEXT    NOT NULL,
	at       INTEGER NOT NULL DEFAULT 0
);
