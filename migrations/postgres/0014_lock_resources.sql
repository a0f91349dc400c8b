-- Each protected resource's state under a lock in a row of its own, out of
-- the JSON of lock_tracks.state (the SQLite set's 0024): a write report
-- changes one resource, and rewrote every resource of its lock. state is
-- the JSON of audit.ResourceState.
CREATE TABLE lock_resources (
	lock_id  BIGINT NOT NULL REFERENCES locks (id),
	resource TEXT   COLLATE "C" NOT NULL,
	state    TEXT   NOT NULL,
	PRIMARY KEY (lock_id, resource)
);

INSERT INTO lock_resources (lock_id, resource, state)
	SELECT k.lock_id, r.key, r.value::text
	FROM lock_tracks k, jsonb_each(k.state::jsonb -> 'resources') r
	WHERE k.state::jsonb -> 'resources' IS NOT NULL;

UPDATE lock_tracks SET state = (state::jsonb - 'resources')::text
	WHERE state::jsonb -> 'resources' IS NOT NULL;
