-- A lock's critical or warning findings (the overview's strips) are one
-- index range, however many info findings (exposures, rejected stale
-- writes) a lock that resources write to thousands of times an hour has.
CREATE INDEX findings_lock_severity_at ON findings (lock_id, severity, at);
