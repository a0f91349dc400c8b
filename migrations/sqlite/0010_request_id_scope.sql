-- A write report's request_id is unique per lock (source and name) and
-- resource, no longer across every write: two resources that each number
-- their requests from 1 each keep their writes. request_id leads, so the
-- recorder's look-up by id reads one range of the index.
DROP INDEX events_request_id;
CREATE UNIQUE INDEX events_request_id_scope ON events (request_id, lock_id, resource) WHERE request_id IS NOT NULL;
