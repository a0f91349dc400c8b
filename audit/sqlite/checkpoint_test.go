package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// TestWALStaysBoundedUnderConstantReads commits batches while two readers
// take turns so that a read is open at every moment, as on a dashboard that
// many people browse. Copying the log then never lets it start over; the
// checkpointer's TRUNCATE checkpoints must keep it near its limit.
func TestWALStaysBoundedUnderConstantReads(t *testing.T) {
	ctx := context.Background()
	s, path := openStore(t)
	const limit = 256 << 10
	s.mu.Lock()
	s.ckpt.limit, s.ckpt.retry, s.ckpt.every = limit, 0, time.Millisecond
	s.mu.Unlock()

	rdb, err := sql.Open("sqlite", dsn(path, "_pragma=query_only(1)"))
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	conns := make([]*sql.Conn, 2)
	for i := range conns {
		if conns[i], err = rdb.Conn(ctx); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close()
	}
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		// Open a read on one connection, then end the other's: one is
		// always open. The pauses pace the turns.
		var txs [2]*sql.Tx
		defer func() {
			for _, tx := range txs {
				if tx != nil {
					tx.Rollback()
				}
			}
		}()
		for turn := 0; ; turn++ {
			i := turn % 2
			tx, err := conns[i].BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
			if err != nil {
				done <- err
				return
			}
			var n int
			if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM events").Scan(&n); err != nil {
				done <- err
				return
			}
			txs[i] = tx
			if other := txs[1-i]; other != nil {
				other.Rollback()
				txs[1-i] = nil
			}
			select {
			case <-stop:
				done <- nil
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()

	key := audit.LockKey{Source: "db", Name: "orders"}
	var largest int64
	for batch := range 120 {
		b := audit.Batch{}
		for i := range 500 {
			b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventWriteAccepted, At: storetest.At(batch*500 + i),
				Holder: "worker-1", Token: audit.Int64(7), Resource: "orders-db", RequestID: fmt.Sprintf("r-%d-%d", batch, i)})
		}
		storetest.Apply(t, s, b)
		if st, err := os.Stat(path + "-wal"); err == nil {
			largest = max(largest, st.Size())
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("reader: %v", err)
	}
	_, truncated, busy, _ := s.checkpointStats()
	t.Logf("largest WAL %d KiB (limit %d KiB); %d truncating checkpoints, %d gave up on readers", largest>>10, limit>>10, truncated, busy)
	if truncated == 0 {
		t.Errorf("no checkpoint emptied the log (%d gave up on readers)", busy)
	}
	if largest > 8*limit {
		t.Errorf("the log grew to %d KiB, want it kept near %d KiB", largest>>10, limit>>10)
	}
}

// TestLogStartsOverWhileCommitting commits batches back to back, each
// touching pages all over an index, with no reader open. The writer runs no
// checkpoint of its own, so the log stays short only if the checkpointer
// copies it and SQLite starts it over; a pass every second is too rare for a
// test, so it runs every few milliseconds here. With the checkpointer held
// off, the same batches grow the log to their whole size.
func TestLogStartsOverWhileCommitting(t *testing.T) {
	for _, tc := range []struct {
		name  string
		every time.Duration
	}{{"checkpointing", 5 * time.Millisecond}, {"held off", time.Hour}} {
		t.Run(tc.name, func(t *testing.T) {
			s, path := openStore(t)
			s.mu.Lock()
			s.ckpt.every = tc.every
			s.mu.Unlock()
			const batches, locks = 60, 400
			var largest, last int64
			for batch := range batches {
				b := audit.Batch{}
				for i := range locks {
					key := audit.LockKey{Source: "redis", Name: fmt.Sprintf("job-%04d", i)}
					b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventWriteAccepted, At: storetest.At(batch*locks + i),
						Holder: "worker-1", Token: audit.Int64(int64(batch)), Resource: "orders-db"})
				}
				storetest.Apply(t, s, b)
				st, err := os.Stat(path + "-wal")
				if err != nil {
					t.Fatal(err)
				}
				largest, last = max(largest, st.Size()), st.Size()
				if tc.every < time.Second {
					// Give the checkpointer its turns between commits, as a
					// recorder's commits leave them; wait for one pass.
					passes, _, _, _ := s.checkpointStats()
					for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
						if p, _, _, _ := s.checkpointStats(); p > passes {
							break
						}
					}
				}
			}
			passes, _, _, failed := s.checkpointStats()
			t.Logf("largest WAL %d KiB, last %d KiB; %d checkpoints, %d failed", largest>>10, last>>10, passes, failed)
			if failed != 0 {
				t.Errorf("%d checkpoints failed", failed)
			}
			if tc.every < time.Second {
				// One batch's commit is about 4.5 MiB of log: 400
				// writes of as many locks, whose index entries fall on
				// pages of their own. The log starts over after each.
				if largest > 6<<20 {
					t.Errorf("the log grew to %d KiB while checkpointed", largest>>10)
				}
				return
			}
			if passes != 0 || largest < 8<<20 {
				t.Errorf("held off: %d checkpoints ran and the log reached %d KiB; want none and the log to keep every commit", passes, largest>>10)
			}
		})
	}
}
