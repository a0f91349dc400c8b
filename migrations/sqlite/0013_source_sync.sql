-- Each source's own sync mark. Replicas that share a store each write the
-- renewal columns of the lock and tenure rows of the sources they own, on
-- their own schedule, so one mark for the whole store (journal.synced_event)
-- cannot say which renew events the rows of a source lack. A source's rows
-- hold every one of its events up to its synced_event; a replica that takes
-- the source over replays its renew events after it. A sync of the whole
-- store raises every source's mark too, and a new fence row starts at the
-- store's mark.
ALTER TABLE source_fences ADD COLUMN synced_event INTEGER NOT NULL DEFAULT 0;
UPDATE source_fences SET synced_event = (SELECT synced_event FROM journal);
