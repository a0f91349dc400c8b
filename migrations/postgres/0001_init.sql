-- The schema of the SQLite set after its 0011, for PostgreSQL: locks, their
-- tenures, events and findings, the collectors' resume cursors, the tracker's
-- memory, the journal's sync point, what retention pruned of renewals, and
-- the small tables that the overview and sources pages read.
--
-- Times are BIGINT Unix nanoseconds UTC, as audit.Nanos encodes them:
-- -9223372036854775808 (audit.NoNanos) is "no time" in the NOT NULL columns
-- that may have none, NULL in the nullable ones ("not yet": a tenure still
-- held, a finding that is an instant). Durations are BIGINT milliseconds.
-- Enumerations carry no CHECK, so new values never need a migration.
--
-- Text that lists sort or compare (source, name, holder, ...) is COLLATE "C":
-- byte order, as SQLite's, so both stores return lists in the same order and
-- keyset cursors mean the same on both; ILIKE under "C" folds ASCII letters
-- only, as SQLite's LIKE does.
--
-- Every id index ends in id where a query pages by (at, id): SQLite's
-- indexes carry the rowid implicitly, PostgreSQL's do not.

CREATE TABLE locks (
	id                BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	source            TEXT    COLLATE "C" NOT NULL,
	kind              TEXT    COLLATE "C" NOT NULL DEFAULT '',
	name              TEXT    COLLATE "C" NOT NULL,
	class             TEXT    COLLATE "C" NOT NULL DEFAULT 'lock',
	state             TEXT    COLLATE "C" NOT NULL DEFAULT 'free',
	holder            TEXT    COLLATE "C" NOT NULL DEFAULT '',
	token             BIGINT,
	acquired_at       BIGINT  NOT NULL DEFAULT -9223372036854775808,
	renewed_at        BIGINT  NOT NULL DEFAULT -9223372036854775808,
	expires_at        BIGINT  NOT NULL DEFAULT -9223372036854775808,
	lease_duration_ms BIGINT  NOT NULL DEFAULT 0,
	changed_at        BIGINT  NOT NULL DEFAULT -9223372036854775808,
	UNIQUE (source, name)
);

-- The locks list's filters, orders and keyset pages from indexes alone
-- (SQLite's 0002 and 0003): by name within a class, by name across classes,
-- most recently changed, least lease left.
CREATE INDEX locks_class_source_name_state ON locks (class, source, name) INCLUDE (holder, kind, state, id);
CREATE INDEX locks_source_name_cover ON locks (source, name) INCLUDE (holder, kind, class, state, id);
CREATE INDEX locks_class_changed ON locks (class, changed_at, id);
CREATE INDEX locks_class_state_changed ON locks (class, state, changed_at, id);
CREATE INDEX locks_class_state_expires ON locks (class, state, expires_at, id) INCLUDE (lease_duration_ms, source);
CREATE INDEX locks_holder ON locks (holder);

-- The tracker's memory of a lock beyond its columns and tenures: JSON of
-- audit.TrackState without Lock and Recent. Recent is the lock's tenures
-- from seq recent_from on.
CREATE TABLE lock_tracks (
	lock_id     BIGINT PRIMARY KEY REFERENCES locks (id),
	recent_from BIGINT NOT NULL,
	state       TEXT   NOT NULL
);

CREATE TABLE tenures (
	lock_id           BIGINT  NOT NULL REFERENCES locks (id),
	seq               BIGINT  NOT NULL,
	holder            TEXT    COLLATE "C" NOT NULL DEFAULT '',
	token             BIGINT,
	granted_at        BIGINT  NOT NULL DEFAULT -9223372036854775808,
	observed          BOOLEAN NOT NULL DEFAULT false,
	position          TEXT    NOT NULL DEFAULT '',
	renewals          BIGINT  NOT NULL DEFAULT 0,
	last_renewed_at   BIGINT  NOT NULL DEFAULT -9223372036854775808,
	lease_duration_ms BIGINT  NOT NULL DEFAULT 0,
	expires_at        BIGINT  NOT NULL DEFAULT -9223372036854775808,
	ended_at          BIGINT, -- NULL while held
	end_reason        TEXT,   -- released, expired, superseded; NULL while held
	PRIMARY KEY (lock_id, seq)
);

-- Tenures overlapping a window: those ending in it, and those granted
-- before its end.
CREATE INDEX tenures_lock_ended ON tenures (lock_id, ended_at);
CREATE INDEX tenures_lock_granted ON tenures (lock_id, granted_at);

-- A renew row names its tenure (seq) and leaves holder and token empty; its
-- margin and the backend's renewal time are columns, not detail JSON (the
-- SQLite set's 0008). Readers join the tenure back in.
CREATE TABLE events (
	id              BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	lock_id         BIGINT  NOT NULL REFERENCES locks (id),
	kind            TEXT    COLLATE "C" NOT NULL,
	at              BIGINT  NOT NULL,
	holder          TEXT    COLLATE "C" NOT NULL DEFAULT '',
	token           BIGINT,
	ttl_ms          BIGINT  NOT NULL DEFAULT 0,
	position        TEXT    NOT NULL DEFAULT '',
	inferred        BOOLEAN NOT NULL DEFAULT false,
	resource        TEXT    COLLATE "C" NOT NULL DEFAULT '',
	request_id      TEXT    COLLATE "C", -- write reports' idempotency key
	detail          TEXT,                -- JSON object, as encoding/json wrote it
	seq             BIGINT,              -- renew: the tenure's seq
	margin_permille BIGINT,              -- renew: detail margin_ratio × 1000
	renewed_at      BIGINT               -- renew: detail renewed_at, unix ns
);

-- A lock's timeline, newest first; a lock's events of a rare kind, with
-- renewals (most events) left out so they write one index entry.
CREATE INDEX events_lock_at ON events (lock_id, at, id);
CREATE INDEX events_lock_kind_at ON events (lock_id, kind, at, id) WHERE kind <> 'renew';
-- A write report's request_id is unique per lock and resource.
CREATE UNIQUE INDEX events_request_id_scope ON events (request_id, lock_id, resource) WHERE request_id IS NOT NULL;

-- class is the finding's lock's, kept by locks_class_findings below.
CREATE TABLE findings (
	id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	lock_id  BIGINT NOT NULL REFERENCES locks (id),
	class    TEXT   COLLATE "C" NOT NULL DEFAULT 'lock',
	kind     TEXT   COLLATE "C" NOT NULL,
	severity TEXT   COLLATE "C" NOT NULL,
	at       BIGINT NOT NULL,
	until    BIGINT, -- NULL for an instant
	summary  TEXT   NOT NULL DEFAULT '',
	tokens   TEXT   NOT NULL DEFAULT '[]', -- JSON array of integers
	holders  TEXT   NOT NULL DEFAULT '[]', -- JSON array of strings
	resource TEXT   COLLATE "C" NOT NULL DEFAULT ''
);

CREATE INDEX findings_lock_at ON findings (lock_id, at, id);
CREATE INDEX findings_at ON findings (at, id);
CREATE INDEX findings_kind_at ON findings (kind, at, id);
CREATE INDEX findings_severity_at ON findings (severity, at);
CREATE INDEX findings_class_severity_at ON findings (class, severity, at);
CREATE INDEX findings_lock_kind_at ON findings (lock_id, kind, at, id);
CREATE INDEX findings_lock_until_at ON findings (lock_id, until, at) INCLUDE (id);

CREATE TABLE cursors (
	source   TEXT   COLLATE "C" PRIMARY KEY,
	position TEXT   NOT NULL,
	at       BIGINT NOT NULL DEFAULT -9223372036854775808
);

-- Blind windows per source, one row per interval rather than one per lock.
CREATE TABLE source_blinds (
	source  TEXT   COLLATE "C" NOT NULL,
	from_at BIGINT NOT NULL,
	to_at   BIGINT NOT NULL,
	reason  TEXT   NOT NULL DEFAULT '',
	locks   BIGINT NOT NULL DEFAULT 0, -- locks of the source it covered
	PRIMARY KEY (source, from_at, to_at)
);
CREATE INDEX source_blinds_to ON source_blinds (to_at);

-- The newest event per source.
CREATE TABLE source_events (
	source        TEXT   COLLATE "C" PRIMARY KEY,
	last_event_at BIGINT NOT NULL
);

-- Every lock and tenure row holds every event up to synced_event; renew
-- events after it may be newer than their rows (audit.Journal.Unsynced).
CREATE TABLE journal (
	id           INTEGER PRIMARY KEY CHECK (id = 1),
	synced_event BIGINT  NOT NULL
);
INSERT INTO journal (id, synced_event) VALUES (1, 0);

-- What retention pruned of each tenure's renewals: how many, the first and
-- last, and the least margin (permille; NULL when none was known).
CREATE TABLE renewal_summaries (
	lock_id             BIGINT NOT NULL REFERENCES locks (id),
	seq                 BIGINT NOT NULL,
	renewals            BIGINT NOT NULL,
	first_at            BIGINT NOT NULL,
	last_at             BIGINT NOT NULL,
	min_margin_permille BIGINT,
	PRIMARY KEY (lock_id, seq)
);

-- Locks per source, class and state, so the overview never groups every
-- lock row. A row trigger keeps it, as SQLite's do; ON CONFLICT makes each
-- change one statement. The store has one writer, so the count rows are
-- never contended.
CREATE TABLE lock_counts (
	source TEXT   COLLATE "C" NOT NULL,
	class  TEXT   COLLATE "C" NOT NULL,
	state  TEXT   COLLATE "C" NOT NULL,
	n      BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (source, class, state)
);

CREATE FUNCTION lock_counts_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP IN ('UPDATE', 'DELETE') THEN
		UPDATE lock_counts SET n = n - 1
		WHERE source = OLD.source AND class = OLD.class AND state = OLD.state;
	END IF;
	IF TG_OP IN ('INSERT', 'UPDATE') THEN
		INSERT INTO lock_counts (source, class, state, n) VALUES (NEW.source, NEW.class, NEW.state, 1)
		ON CONFLICT (source, class, state) DO UPDATE SET n = lock_counts.n + 1;
	END IF;
	RETURN NULL;
END $$;

CREATE TRIGGER locks_count_insert AFTER INSERT OR DELETE ON locks
	FOR EACH ROW EXECUTE FUNCTION lock_counts_follow();
CREATE TRIGGER locks_count_update AFTER UPDATE OF source, class, state ON locks
	FOR EACH ROW WHEN (OLD.source IS DISTINCT FROM NEW.source OR OLD.class IS DISTINCT FROM NEW.class
		OR OLD.state IS DISTINCT FROM NEW.state)
	EXECUTE FUNCTION lock_counts_follow();

-- A finding carries its lock's class (the SQLite set's 0007); this follows a
-- lock whose class changes.
CREATE FUNCTION locks_class_findings() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE findings SET class = NEW.class WHERE lock_id = NEW.id;
	RETURN NULL;
END $$;

CREATE TRIGGER locks_class_findings AFTER UPDATE OF class ON locks
	FOR EACH ROW WHEN (OLD.class IS DISTINCT FROM NEW.class)
	EXECUTE FUNCTION locks_class_findings();
