package postgres

import (
	"fmt"
	"os"
	"testing"
	"time"

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

// TestShortHoldsSeen: at the shortest poll_every, every hold of three poll
// intervals is seen, on a loaded machine too.
func TestShortHoldsSeen(t *testing.T) {
	const n = 10
	if seen := holdMany(t, MinPollEvery, 3*MinPollEvery, n); seen != n {
		t.Errorf("%d of %d holds of %s seen polling every %s, want all", seen, n, 3*MinPollEvery, MinPollEvery)
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
