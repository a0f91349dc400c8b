package runcodectest

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestWorkloads: each workload's renewals come in order, each observed no
// earlier than its backend time, at about its interval, with the lease its
// collector reports.
func TestWorkloads(t *testing.T) {
	start := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	for _, w := range Workloads {
		l := w.Lease(rand.New(rand.NewPCG(1, 2)), start)
		prev := Renewal{RenewedAt: start, At: start}
		ttls := map[time.Duration]int{}
		for i := range 1000 {
			r := l.Next()
			gap := r.RenewedAt.Sub(prev.RenewedAt)
			if r.At.Before(r.RenewedAt) || !r.At.After(prev.At) || i > 0 && (gap < w.Every*3/4 || gap > w.Every*5/4) {
				t.Fatalf("%s: renewal %d = %+v after %+v", w.Name, i, r, prev)
			}
			if r.Margin <= 0 || r.Margin >= 1 {
				t.Fatalf("%s: renewal %d has margin %v", w.Name, i, r.Margin)
			}
			ttls[r.TTL]++
			prev = r
		}
		want := 1
		if w.Name == "redis" {
			want = 2 // PTTL+1 ms: the lock's TTL or a millisecond more
		}
		if len(ttls) != want || ttls[w.TTL] == 0 {
			t.Fatalf("%s: leases %v, want %d, %s among them", w.Name, ttls, want, w.TTL)
		}
	}
}
