package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"
)

// The write-ahead log is copied into the database file by checkpoints. The
// writer does none itself (wal_autocheckpoint is 0): SQLite would run one in
// the commit that takes the log past 1,000 pages, and under a steady stream
// of renewals that is nearly every commit. Each copied every page the commit
// touched, so a lock's index page renewed twice a second was written to the
// database file twice a second, and the writer waited for it.
//
// A checkpointer goroutine, on a connection of its own, copies the log at
// most every checkpointEvery instead: a page changed by many commits in
// between is copied once, and the copying runs beside the writer. Then,
// between two of the writer's transactions, it copies what was committed
// meanwhile, so the log is complete in the database and SQLite starts it
// over at the next transaction.
//
// Only up to the oldest snapshot a reader still uses can be copied, and the
// log starts over only once every reader has let go of it. While people
// browse, some read is nearly always open, so the log can grow without end
// (a load of 50 browsers grew it to 218 MiB beside a 28 MiB database), and
// every read gets slower as it grows. Past walLimit the checkpointer
// therefore asks for a TRUNCATE checkpoint, which waits up to truncateWait
// for the reads that still need the log (new reads go to the database file
// meanwhile), copies all of it and empties the file. A try that times out
// costs the writer truncateWait and is repeated at most every truncateEvery.
const (
	checkpointEvery = time.Second
	walLimit        = 64 << 20
	truncateWait    = 100 * time.Millisecond
	truncateEvery   = time.Second
)

// checkpointer copies the write-ahead log into the database file in the
// background (see above).
type checkpointer struct {
	db   *sql.DB       // one connection, used only for checkpoints
	kick chan struct{} // a commit happened; buffered, never blocks the writer
	stop chan struct{}
	done chan struct{}

	// Guarded by Store.mu.
	every     time.Duration // checkpointEvery; tests lower it
	limit     int64         // walLimit; tests lower it
	retry     time.Duration // truncateEvery; tests lower it
	tried     time.Time     // the last TRUNCATE checkpoint attempted
	passes    int64         // checkpoints that ran
	truncated int64         // TRUNCATE checkpoints that emptied the log
	busy      int64         // TRUNCATE checkpoints that timed out waiting for readers
	failed    int64         // checkpoints that returned an error
}

// startCheckpoints opens the checkpointer's connection and starts it.
func (s *Store) startCheckpoints(ctx context.Context) error {
	db, err := sql.Open("sqlite", dsn(s.path))
	if err != nil {
		return err
	}
	keepConns(db, 1)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return err
	}
	s.ckpt = checkpointer{db: db, every: checkpointEvery, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), limit: walLimit, retry: truncateEvery}
	go s.checkpoints()
	return nil
}

// committed tells the checkpointer that the writer committed.
func (c *checkpointer) committed() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// close stops the checkpointer and closes its connection. Closing again
// does nothing.
func (c *checkpointer) close() error {
	if c.db == nil {
		return nil
	}
	close(c.stop)
	<-c.done
	err := c.db.Close()
	c.db = nil
	return err
}

func (s *Store) checkpoints() {
	c := &s.ckpt
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		// Let commits gather, so that a page they all change is copied once.
		s.mu.Lock()
		every := c.every
		s.mu.Unlock()
		select {
		case <-c.stop:
			return
		case <-time.After(every):
		}
		s.checkpoint(context.Background())
	}
}

// checkpoint copies the log into the database: the bulk beside the writer,
// the rest between two of its transactions, or, past the limit, all of it,
// emptying the file. Its errors are counted, not returned: a checkpoint
// that fails leaves the log longer, and the next one tries again.
func (s *Store) checkpoint(ctx context.Context) {
	c := &s.ckpt
	// Copying takes a while, and the writer commits meanwhile: copy again
	// what it committed until that is little, so that the writer waits
	// only for a little below.
	var bulkErr error
	copied := -1
	for range maxBulkRounds {
		var busy, log, done int
		if bulkErr = c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &done); bulkErr != nil {
			break
		}
		fresh := done - copied
		if copied < 0 || done < copied { // the first round, or the log started over
			fresh = done
		}
		copied = done
		if fresh <= restFrames {
			break
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	c.passes++
	if bulkErr != nil {
		c.failed++
	}
	st, err := os.Stat(s.path + "-wal")
	if err == nil && st.Size() >= c.limit && time.Since(c.tried) >= c.retry {
		c.tried = time.Now()
		if err := s.truncateWAL(ctx); err != nil {
			c.busy++
			return
		}
		c.truncated++
		return
	}
	if _, err := c.db.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)"); err != nil {
		c.failed++
	}
}

// A checkpoint copies the log beside the writer in up to maxBulkRounds
// rounds, until a round copies at most restFrames pages (4 KiB each).
const (
	maxBulkRounds = 4
	restFrames    = 256
)

// truncateWAL copies the whole log into the database and empties it, waiting
// at most truncateWait for readers. s.mu must be held, so that the writer has
// no transaction open.
func (s *Store) truncateWAL(ctx context.Context) error {
	conn, err := s.ckpt.db.Conn(ctx)
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

// checkpointStats reports the checkpoints run since Open, the TRUNCATE
// checkpoints that emptied the log and those that gave up waiting for
// readers, and the checkpoints that failed.
func (s *Store) checkpointStats() (passes, truncated, busy, failed int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ckpt.passes, s.ckpt.truncated, s.ckpt.busy, s.ckpt.failed
}
