package sqlite

import (
	"context"
	"fmt"
	"os"
	"time"
)

// The write-ahead log is copied into the database by SQLite's automatic
// checkpoints, but only up to the oldest snapshot a reader still uses, and
// the log starts over only once every reader has let go of it. While people
// browse, some read is nearly always open, so the log can grow without end
// (a load of 50 browsers grew it to 218 MiB beside a 28 MiB database), and
// every read gets slower as it grows. Past walLimit, a commit therefore asks
// for a TRUNCATE checkpoint, which waits up to truncateWait for the reads
// that still need the log (new reads go to the database file meanwhile),
// copies all of it and empties the file. A try that times out costs the
// writer truncateWait and is repeated at most every truncateEvery.
const (
	walLimit      = 64 << 20
	truncateWait  = 100 * time.Millisecond
	truncateEvery = time.Second
)

// walGuard keeps the write-ahead log from growing past its limit. Its fields
// are the writer's, guarded by Store.mu.
type walGuard struct {
	limit int64         // walLimit; tests lower it
	every time.Duration // truncateEvery; tests lower it
	tried time.Time     // the last TRUNCATE checkpoint attempted
	// truncated counts successful TRUNCATE checkpoints, busy those that
	// timed out waiting for readers.
	truncated, busy int64
}

// guardWAL runs a TRUNCATE checkpoint on the writer if the log has grown
// past its limit. s.mu must be held and no transaction open. A checkpoint
// that fails is not the commit's failure: it is counted and tried again
// later.
func (s *Store) guardWAL(ctx context.Context) {
	g := &s.wal
	st, err := os.Stat(s.path + "-wal")
	if err != nil || st.Size() < g.limit || time.Since(g.tried) < g.every {
		return
	}
	g.tried = time.Now()
	if err := s.truncateWAL(ctx); err != nil {
		g.busy++
		return
	}
	g.truncated++
}

// truncateWAL copies the whole log into the database and empties it, waiting
// at most truncateWait for readers.
func (s *Store) truncateWAL(ctx context.Context) error {
	conn, err := s.writer.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", truncateWait.Milliseconds())); err != nil {
		return err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", busyTimeout.Milliseconds()))
	var busy, logFrames, copied int
	if err := conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logFrames, &copied); err != nil {
		return err
	}
	if busy != 0 {
		return fmt.Errorf("wal checkpoint: readers still use %d of %d frames", logFrames-copied, logFrames)
	}
	return nil
}

// walStats reports the TRUNCATE checkpoints tried since Open: those that
// emptied the log, and those that gave up waiting for readers.
func (s *Store) walStats() (truncated, busy int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wal.truncated, s.wal.busy
}
