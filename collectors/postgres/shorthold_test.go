package postgres

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// holdMany takes n holds of length d one after another, each of a key of
// its own, and returns how many of them the collector polling every every
// recorded a grant of.
func holdMany(t testing.TB, every, d time.Duration, n int) int {
	t.Helper()
	srv := shared(t)
	db := database(t, srv)
	sk := collectortest.NewSink(t, "pg", Backend.Kind)
	polls := make(chan time.Time, 1)
	collectortest.Run(t, newCollectorEvery(t, srv, "pg", []string{db}, every, func(st *state) {
		select {
		case polls <- st.at:
		default:
		}
	}), sk)
	h := connectHolder(t, srv, db, "short")
	for i := range n {
		h.exec(t, `SELECT pg_advisory_lock($1)`, i)
		time.Sleep(d) // the hold's length is what is measured, not a wait for a condition
		h.exec(t, `SELECT pg_advisory_unlock($1)`, i)
	}
	// Two polls after the last release have seen everything there was.
	<-polls
	<-polls
	<-polls
	seen := 0
	for i := range n {
		if len(sk.Obs(fmt.Sprintf("%s/%d", db, i), audit.EventGrant)) > 0 {
			seen++
		}
	}
	return seen
}

// TestShortHoldsSeen: at the shortest poll_every, every hold of a few poll
// intervals is seen. Five intervals leave room for a poll delayed by a
// loaded machine (the race detector on 2 cores); BenchmarkShortestHold
// measures the odds of shorter holds.
func TestShortHoldsSeen(t *testing.T) {
	const n, hold = 10, 5 * MinPollEvery
	if seen := holdMany(t, MinPollEvery, hold, n); seen != n {
		t.Errorf("%d of %d holds of %s seen polling every %s, want all", seen, n, hold, MinPollEvery)
	}
}

// BenchmarkShortestHold reports the share of holds seen by their length
// relative to poll_every (1s, the default, or LEASEWATCH_PG_POLL_EVERY).
// Run it with -benchtime=Nx: each iteration is one hold.
func BenchmarkShortestHold(b *testing.B) {
	every := DefaultPollEvery
	if v := os.Getenv("LEASEWATCH_PG_POLL_EVERY"); v != "" {
		var err error
		if every, err = time.ParseDuration(v); err != nil {
			b.Fatal(err)
		}
	}
	for _, pct := range []int{25, 50, 90, 100, 105, 110} {
		d := every * time.Duration(pct) / 100
		b.Run(fmt.Sprintf("hold=%s", d), func(b *testing.B) {
			seen := holdMany(b, every, d, b.N)
			b.ReportMetric(float64(seen)/float64(b.N), "seen/hold")
		})
	}
}

// BenchmarkPoll1000 times one poll (pg_locks and pg_stat_database read,
// folded into a state) with 1,000 advisory locks held by 50 sessions, and
// reports the CPU per poll of the server's backend and of the test process
// (the collector's side, the Go runtime's included).
func BenchmarkPoll1000(b *testing.B) {
	srv := shared(b)
	db := database(b, srv)
	for s := range 50 {
		h := connectHolder(b, srv, db, fmt.Sprintf("holder-%d", s))
		h.exec(b, `SELECT pg_advisory_lock(k) FROM generate_series($1::int8, $1::int8 + 19) k`, int64(s*20))
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.URL(db))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var pid int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	cpu0, own0 := procCPU(b, pid), procCPU(b, os.Getpid())
	var prev *state
	b.ResetTimer()
	for b.Loop() {
		rd, err := readLocks(ctx, conn, []string{db})
		if err != nil {
			b.Fatal(err)
		}
		cur := newState(rd.at, rd.postmaster, rd.rows, prev)
		if len(cur.holds) != 1000 {
			b.Fatalf("%d locks held, want 1000", len(cur.holds))
		}
		handovers(prev, cur)
		prev = cur
	}
	b.ReportMetric(float64(procCPU(b, pid)-cpu0)/float64(b.N)/1e3, "server-µs/poll")
	b.ReportMetric(float64(procCPU(b, os.Getpid())-own0)/float64(b.N)/1e3, "collector-µs/poll")
}

// procCPU is the user and system CPU process pid has used, in nanoseconds
// (from /proc, in clock ticks of 10 ms).
func procCPU(b *testing.B, pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return (utime + stime) * 10e6
}
