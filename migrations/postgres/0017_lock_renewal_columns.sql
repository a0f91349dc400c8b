-- A held tenure's renewals are written to its lock's row alone: a sync
-- round (audit.Recorder) updated the lock row and the tenure row of every
-- renewed lock, and the tenure's update was a third of the round's cost.
-- renewed_seq is the tenure whose renewals the lock row's renewed_at,
-- expires_at and lease_duration_ms describe, renewals their count; where
-- renewed_seq is a tenure's seq and renewals exceeds the tenure row's,
-- readers take those four columns from the lock row (sqlread.TenureColumns).
-- A tenure's row is written in full when it is granted and when it ends.
ALTER TABLE locks ADD COLUMN renewed_seq bigint, ADD COLUMN renewals bigint NOT NULL DEFAULT 0;
