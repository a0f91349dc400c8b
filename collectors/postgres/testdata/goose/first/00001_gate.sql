-- +goose Up
-- Waits for the test's gate (key 777) while goose holds its lock.
SELECT pg_advisory_lock(777);
SELECT pg_advisory_unlock(777);

-- +goose Down
SELECT 1;
