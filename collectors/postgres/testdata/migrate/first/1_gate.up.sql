-- Waits for the test's gate (key 777) while golang-migrate holds its lock.
SELECT pg_advisory_lock(777);
SELECT pg_advisory_unlock(777);
