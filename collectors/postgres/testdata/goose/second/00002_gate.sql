-- +goose Up
-- The later deployment's migration: waits for the test's second gate (key 778).
SELECT pg_advisory_lock(778);
SELECT pg_advisory_unlock(778);

-- +goose Down
SELECT 1;
