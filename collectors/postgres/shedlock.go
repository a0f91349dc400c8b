package postgres

// ShedLock's PostgreSQL table and the statements its JdbcTemplateLockProvider
// runs on it (ShedLock's README, "Postgres"; PostgresSqlStatementsSource),
// with the holder's clock in UTC: what the shedlock preset watches.
// ShedLock is a Java library, not packaged where leasewatch is built, so the
// demo and the tests drive its table from Go with these.
const (
	ShedLockTable = `CREATE TABLE shedlock(name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL,
		locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))`
	// ShedLockAcquire takes the lock if free or run out: $1 name, $2
	// lock_until, $3 now, $4 the holder.
	ShedLockAcquire = `INSERT INTO shedlock(name, lock_until, locked_at, locked_by) VALUES($1, $2, $3, $4)
		ON CONFLICT (name) DO UPDATE SET lock_until = $2, locked_at = $3, locked_by = $4 WHERE shedlock.lock_until <= $3`
	// ShedLockExtend moves a held lock's lock_until: $1 name, $2 the
	// holder, $3 lock_until, $4 now.
	ShedLockExtend = `UPDATE shedlock SET lock_until = $3 WHERE name = $1 AND locked_by = $2 AND lock_until > $4`
	// ShedLockUnlock ends the lease at $2 (now, or lockAtLeastFor's end):
	// $1 name.
	ShedLockUnlock = `UPDATE shedlock SET lock_until = $2 WHERE name = $1`
)
