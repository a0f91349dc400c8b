package review

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// ownerByScan is owner as the rules say it, looking at every handover.
func ownerByScan(hs []Handover, spans []Interval, e audit.Event, opts Options) int {
	if e.Token != nil {
		tok := *e.Token
		for i := len(hs) - 1; i >= 0; i-- {
			p := hs[i].Previous
			if p.Token != nil && *p.Token == tok && !p.EndedAt.IsZero() && !e.At.Before(p.EndedAt) {
				return i
			}
		}
		for i := len(hs) - 1; i >= 0; i-- {
			n := hs[i].Next
			if n.Token != nil && *n.Token == tok && !e.At.Before(n.GrantedAt) && !e.At.After(n.GrantedAt.Add(opts.Trail)) {
				return i
			}
		}
		for i := len(hs) - 1; i >= 0; i-- {
			p := hs[i].Previous
			if p.Token != nil && *p.Token == tok && !p.EndedAt.IsZero() && !e.At.Before(p.EndedAt.Add(-opts.Lead)) {
				return i
			}
		}
	}
	for i := len(hs) - 1; i >= 0; i-- {
		if !e.At.Before(spans[i].From) && (e.At.Before(spans[i].To) || (i == len(hs)-1 && e.At.Equal(spans[i].To))) {
			return i
		}
	}
	return -1
}

// The assigner finds a write's handover by token and by a search of the
// spans; it must agree with a scan of every handover, also for tenures that
// overlap, end late, carry no token or reuse one.
func TestOwnerAgreesWithAScan(t *testing.T) {
	base := time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	opts := Options{}.withDefaults()
	searched := 0 // cases whose spans follow one another
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var tenures []audit.Tenure
		at := 0
		for seq := int64(1); seq <= int64(2+rng.IntN(12)); seq++ {
			at = max(0, at+rng.IntN(9000)-1000) // now and then a grant dated before the last
			ten := audit.Tenure{Seq: seq, GrantedAt: ms(at), Token: audit.Int64(seq + int64(rng.IntN(2)))}
			if rng.IntN(8) == 0 {
				ten.Token = nil
			}
			if n := len(tenures); n > 0 {
				// The previous tenure ended before, at or after this grant.
				tenures[n-1].EndedAt = ms(max(0, at-3000+rng.IntN(6000)))
			}
			tenures = append(tenures, ten)
		}
		var hs []Handover
		for i := 1; i < len(tenures); i++ {
			hs = append(hs, Handover{Previous: tenures[i-1], Next: tenures[i]})
		}
		a := newWriteAssigner(hs, nil, opts)
		if a.ordered {
			searched++
		}
		for range 400 {
			e := audit.Event{Kind: audit.EventWriteAccepted, At: ms(rng.IntN(at + 10000))}
			if rng.IntN(6) > 0 {
				e.Token = audit.Int64(int64(rng.IntN(len(tenures) + 2)))
			}
			if got, want := a.owner(e.At, e.Token), ownerByScan(hs, a.spans, e, opts); got != want {
				t.Fatalf("seed %d: write at %v token %v: owner %d, want %d (ordered spans: %v)", seed, e.At, e.Token, got, want, a.ordered)
			}
		}
	}
	if searched == 0 || searched == 300 {
		t.Fatalf("%d of 300 cases had ordered spans: the test must cover both the search and the scan", searched)
	}
}
