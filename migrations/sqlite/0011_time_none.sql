-- 1970-01-01T00:00:00Z is a time like any other. Until now 0 meant "no time"
-- in every time column, so an event or finding at the epoch read back as
-- none. From here on "no time" is -9223372036854775808 (the first int64,
-- audit.NoNanos, 1677-09-21T00:12:43.145224192Z, which no stored time can
-- take: the service keeps real times a nanosecond or more after it) in the
-- NOT NULL columns that may have none, and stays NULL in the nullable ones.
-- Rows stored before this wrote 0 for none, so those 0s become the new
-- encoding. Columns that always hold a time (events.at, findings.at,
-- source_events, source_blinds, renewal_summaries) keep their 0s, which
-- now read as the epoch they were.

UPDATE locks SET
	acquired_at = CASE acquired_at WHEN 0 THEN -9223372036854775808 ELSE acquired_at END,
	renewed_at  = CASE renewed_at  WHEN 0 THEN -9223372036854775808 ELSE renewed_at  END,
	expires_at  = CASE expires_at  WHEN 0 THEN -9223372036854775808 ELSE expires_at  END,
	changed_at  = CASE changed_at  WHEN 0 THEN -9223372036854775808 ELSE changed_at  END
WHERE acquired_at = 0 OR renewed_at = 0 OR expires_at = 0 OR changed_at = 0;

UPDATE tenures SET
	granted_at      = CASE granted_at      WHEN 0 THEN -9223372036854775808 ELSE granted_at      END,
	last_renewed_at = CASE last_renewed_at WHEN 0 THEN -9223372036854775808 ELSE last_renewed_at END,
	expires_at      = CASE expires_at      WHEN 0 THEN -9223372036854775808 ELSE expires_at      END,
	-- Some early rows wrote 0, not NULL, for a tenure still held.
	ended_at        = CASE ended_at        WHEN 0 THEN NULL                 ELSE ended_at        END
WHERE granted_at = 0 OR last_renewed_at = 0 OR expires_at = 0 OR ended_at = 0;

UPDATE cursors SET at = -9223372036854775808 WHERE at = 0;

UPDATE findings SET until = NULL WHERE until = 0;
