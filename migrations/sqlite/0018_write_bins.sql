-- A lock's write reports counted per minute, resource and outcome as they
-- are stored, so that a verdict's or a review's totals over a long window
-- read one row per minute and resource instead of every write: a lock that
-- hundreds of resources write to each second has millions of writes a day.
-- The minutes whole inside a window come from here and its partial minutes
-- at either end from the events. bin is the minute's first nanosecond;
-- writes before 1970 are not binned (the reads take them from the events).
-- Triggers keep the counts in the transaction that stores or deletes the
-- writes, whichever path does it (the writer, retention, a copy). last_at
-- is the bin's newest write: a delete of it reads the next newest.
CREATE TABLE write_bins (
	lock_id   INTEGER NOT NULL,
	bin       INTEGER NOT NULL,
	resource  TEXT    NOT NULL,
	kind      TEXT    NOT NULL, -- write_accepted, write_rejected
	n         INTEGER NOT NULL,
	untokened INTEGER NOT NULL, -- of n, those without a token
	last_at   INTEGER NOT NULL,
	PRIMARY KEY (lock_id, bin, resource, kind)
) WITHOUT ROWID;

INSERT INTO write_bins (lock_id, bin, resource, kind, n, untokened, last_at)
	SELECT lock_id, at - at % 60000000000, resource, kind, count(*), sum(token IS NULL), max(at)
	FROM events WHERE kind IN ('write_accepted', 'write_rejected') AND at >= 0
	GROUP BY 1, 2, 3, 4;

CREATE TRIGGER write_bins_insert AFTER INSERT ON events
WHEN NEW.kind IN ('write_accepted', 'write_rejected') AND NEW.at >= 0 BEGIN
	INSERT INTO write_bins (lock_id, bin, resource, kind, n, untokened, last_at)
		VALUES (NEW.lock_id, NEW.at - NEW.at % 60000000000, NEW.resource, NEW.kind, 1, NEW.token IS NULL, NEW.at)
		ON CONFLICT (lock_id, bin, resource, kind) DO UPDATE SET
			n = n + 1, untokened = untokened + excluded.untokened, last_at = max(last_at, excluded.last_at);
END;

CREATE TRIGGER write_bins_delete AFTER DELETE ON events
WHEN OLD.kind IN ('write_accepted', 'write_rejected') AND OLD.at >= 0 BEGIN
	UPDATE write_bins SET n = n - 1, untokened = untokened - (OLD.token IS NULL)
		WHERE lock_id = OLD.lock_id AND bin = OLD.at - OLD.at % 60000000000 AND resource = OLD.resource AND kind = OLD.kind;
	DELETE FROM write_bins
		WHERE lock_id = OLD.lock_id AND bin = OLD.at - OLD.at % 60000000000 AND resource = OLD.resource AND kind = OLD.kind AND n <= 0;
	UPDATE write_bins SET last_at = (SELECT max(at) FROM events INDEXED BY events_lock_kind_at
			WHERE lock_id = OLD.lock_id AND kind = OLD.kind AND kind <> 'renew' AND resource = OLD.resource
				AND at >= write_bins.bin AND at < write_bins.bin + 60000000000)
		WHERE lock_id = OLD.lock_id AND bin = OLD.at - OLD.at % 60000000000 AND resource = OLD.resource AND kind = OLD.kind
			AND last_at = OLD.at;
END;
