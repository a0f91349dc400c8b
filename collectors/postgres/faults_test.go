package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
	"github.com/leasewatch/leasewatch/collectors/faulttest"
)

// Fault-test timings: the poll deadline, a freeze that outlasts it, and
// the runner's and the collector's backoff cap.
const (
	faultDeadline = time.Second
	faultFreeze   = faultDeadline + 500*time.Millisecond
	faultCap      = 2 * time.Second
	// faultSlack is what catching up may take beyond the reconnect backoff:
	// connecting, reading, storing, on a busy 2-core machine under -race.
	faultSlack = 5 * time.Second
)

// TestBackendFaults restarts the server, which ends every session and so
// every lock, and freezes the collector's own backend with SIGSTOP for
// longer than a poll may take while a lock changes hands. After each the
// collector must have recorded a blind window covering the fault, and show
// exactly the holders the server has; across the cycles neither goroutines
// nor the heap may grow. LEASEWATCH_FAULT_CYCLES=50 runs the long version.
func TestBackendFaults(t *testing.T) {
	srv := pgtest.New(t, pgtest.Options{NoFsync: true})
	withWatcher(t, srv)
	db := database(t, srv)
	sk := collectortest.NewSink(t, "pg", Backend.Kind)
	c := newCollectorEvery(t, srv, "pg", []string{db}, MinPollEvery, nil,
		WithPollDeadline(faultDeadline), WithMaxReconnect(faultCap))
	faulttest.Supervise(t, sk, c, collectors.RunnerConfig{
		Logger: collectortest.Logger(t, "pg"), MinBackoff: 100 * time.Millisecond, MaxBackoff: faultCap,
	})
	f, g := db+"/1", db+"/2"
	usage := &faulttest.Usage{MaxGoroutines: 5, MaxHeap: 2 << 20}
	for cycle := 1; cycle <= faulttest.Cycles(t, 2); cycle++ {
		a := connectHolder(t, srv, db, fmt.Sprintf("A%d", cycle))
		a.exec(t, `SELECT pg_advisory_lock(1)`)
		sk.WaitHeld(t, wait, f, a.name())
		down := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		// The collector may see again before Restart has seen the server
		// ready, so the fault ends when the new server started.
		back := postmasterStarted(t, srv, db)
		if b := faultBlind(t, sk, down, back); !strings.Contains(b.Reason, "restarted") {
			t.Fatalf("cycle %d: blind window after the restart = %+v, want the restart named", cycle, b)
		}
		b := connectHolder(t, srv, db, fmt.Sprintf("B%d", cycle))
		b.exec(t, `SELECT pg_advisory_lock(2)`)
		sameHolders(t, sk, srv, db, []string{f, g}, back)

		// Freeze the collector's backend while B hands g to C.
		pid := watcherPid(t, srv)
		faulttest.Freeze(t, pid)
		down = time.Now()
		b.exec(t, `SELECT pg_advisory_unlock(2)`)
		connectHolder(t, srv, db, fmt.Sprintf("C%d", cycle)).exec(t, `SELECT pg_advisory_lock(2)`)
		time.Sleep(faultFreeze) // the freeze itself is what is under test
		back = time.Now()
		faulttest.Thaw(t, pid)
		// The poll on the frozen backend fails after the deadline, and a new
		// connection sees again while the old backend is still frozen.
		if bl := faultBlind(t, sk, down, down.Add(faultDeadline)); !strings.Contains(bl.Reason, "polling pg_locks failed") {
			t.Fatalf("cycle %d: blind window after the freeze = %+v, want the failed poll named", cycle, bl)
		}
		sameHolders(t, sk, srv, db, []string{f, g}, back)
		usage.Measure(t, cycle)
	}
	usage.Report(t)
	if fs := sk.Findings(t, "", audit.FindingOverlap); len(fs) != 0 {
		t.Errorf("overlaps across the faults: %+v", fs[0])
	}
}

// postmasterStarted is when the server's postmaster started.
func postmasterStarted(t *testing.T, srv *pgtest.Server, db string) time.Time {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), srv.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var at time.Time
	if err := conn.QueryRow(context.Background(), `SELECT pg_postmaster_start_time()`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

// watcherPid is the pid of the collector's backend.
func watcherPid(t *testing.T, srv *pgtest.Server) int {
	t.Helper()
	var pid int
	collectortest.Eventually(t, wait, "the collector's session", func() bool {
		conn, err := pgx.Connect(context.Background(), srv.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		err = conn.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity WHERE usename = $1`, watcher).Scan(&pid)
		return err == nil
	})
	return pid
}

// faultBlind waits for the first blind window that ends after back and
// checks that it covers the fault, from down to back, and that the
// collector saw again within its backoff of back.
func faultBlind(t *testing.T, sk *collectortest.Sink, down, back time.Time) *audit.Blind {
	t.Helper()
	var b *audit.Blind
	collectortest.Eventually(t, faultCap+faultSlack+wait, "a blind window ending after the fault", func() bool {
		for _, in := range sk.Inputs() {
			if in.Blind != nil && in.Blind.To.After(back) {
				b = in.Blind
				return true
			}
		}
		return false
	})
	if b.From.After(down) || b.To.Before(back) {
		t.Fatalf("blind window %s .. %s does not contain the fault %s .. %s", b.From.Format(time.StampMicro),
			b.To.Format(time.StampMicro), down.Format(time.StampMicro), back.Format(time.StampMicro))
	}
	faulttest.Reconnected(t, "postgres", back, b.To, faultCap+faultSlack)
	return b
}

// sameHolders waits until the store shows, for every lock, the holder the
// server has, as the collector names it, or none.
func sameHolders(t *testing.T, sk *collectortest.Sink, srv *pgtest.Server, db string, locks []string, back time.Time) {
	t.Helper()
	agreed := faulttest.SameHolders(t, "postgres", locks, faultCap+faultSlack+wait, func(lock string) (string, string) {
		want := ""
		conn, err := pgx.Connect(context.Background(), srv.URL(db))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		rd, err := readLocks(context.Background(), conn, []string{db})
		if err != nil {
			t.Fatal(err)
		}
		if h := newState(rd.at, rd.postmaster, rd.rows, nil).holds[lock]; h != nil {
			want = audit.Text(h.s.holder(h.vxid))
		}
		got := ""
		if l, ok := sk.Lock(t, lock); ok && l.State == audit.StateHeld {
			got = l.Holder
		}
		return got, want
	})
	faulttest.Reconnected(t, "postgres holders", back, agreed, faultCap+faultSlack+time.Second)
}
