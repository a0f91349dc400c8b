package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// TestWALStaysBoundedUnderConstantReads commits batches while two readers
// take turns so that a read is open at every moment, as on a dashboard that
// many people browse. SQLite's own checkpoints then never let the log start
// over; the writer's TRUNCATE checkpoints must keep it near its limit.
func TestWALStaysBoundedUnderConstantReads(t *testing.T) {
	ctx := context.Background()
	s, path := openStore(t)
	const limit = 256 << 10
	s.mu.Lock()
	s.wal.limit, s.wal.every = limit, 0
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
			b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventWriteAccepted, At: at(batch*500 + i),
				Holder: "worker-1", Token: audit.Int64(7), Resource: "orders-db", RequestID: fmt.Sprintf("r-%d-%d", batch, i)})
		}
		apply(t, s, b)
		if st, err := os.Stat(path + "-wal"); err == nil {
			largest = max(largest, st.Size())
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("reader: %v", err)
	}
	truncated, busy := s.walStats()
	t.Logf("largest WAL %d KiB (limit %d KiB); %d truncating checkpoints, %d gave up on readers", largest>>10, limit>>10, truncated, busy)
	if truncated == 0 {
		t.Errorf("no checkpoint emptied the log (%d gave up on readers)", busy)
	}
	if largest > 8*limit {
		t.Errorf("the log grew to %d KiB, want it kept near %d KiB", largest>>10, limit>>10)
	}
}
