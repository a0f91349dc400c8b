-- Renewals at scale. Most of what a busy backend does is renew, and a renewal
-- changes only a few columns of a lock and its held tenure, which the renew
-- event records too. So the tracker's memory moves out of the lock row (a
-- renewal no longer rewrites it), and the journal records up to which event
-- the lock and tenure rows are complete: renew events after that are replayed
-- onto them after a crash.

-- The tracker's memory of a lock beyond its columns and tenures: JSON of
-- audit.TrackState without Lock and Recent. Recent is the lock's tenures from
-- seq recent_from on.
CREATE TABLE lock_tracks (
	lock_id     INTEGER PRIMARY KEY REFERENCES locks (id),
	recent_from INTEGER NOT NULL,
	state       TEXT    NOT NULL
);

INSERT INTO lock_tracks (lock_id, recent_from, state)
SELECT id,
	coalesce(json_extract(track_state, '$.next_seq'), 0) - coalesce(json_array_length(track_state, '$.recent'), 0) + 1,
	json_remove(track_state, '$.recent')
FROM locks WHERE track_state IS NOT NULL;

ALTER TABLE locks DROP COLUMN track_state;

-- Every lock and tenure row holds every event up to synced_event; renew
-- events after it may be newer than their rows (audit.Journal.Unsynced).
CREATE TABLE journal (
	id           INTEGER PRIMARY KEY CHECK (id = 1),
	synced_event INTEGER NOT NULL
);

INSERT INTO journal (id, synced_event) SELECT 1, coalesce(max(id), 0) FROM events;
