package postgres

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// TestPruneSummarizesRenewals stands until the contract suite covers
// retention: old renewals go, their tenure keeps a summary, newer events
// and findings that have not ended stay.
func TestPruneSummarizesRenewals(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	b := grant("etcd", "orders", 7, 0)
	key := b.Locks[0].Lock.Key()
	for i, m := range []float64{0.9, 0.25, 0.5} {
		b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventRenew, At: at(i + 1), Seq: 1,
			Detail: map[string]any{"margin_ratio": m}})
	}
	b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventRenew, At: at(100), Seq: 1})
	b.Synced = true
	if err := s.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	rule := audit.EventRule{Kinds: []audit.EventKind{audit.EventRenew}, Age: time.Hour}
	res, err := s.PruneEvents(ctx, audit.PruneStep{Rule: rule, Before: at(50), Limit: 100})
	if err != nil || res.Deleted != 3 || !res.Done {
		t.Fatalf("PruneEvents = %+v, %v; want the 3 old renewals deleted and done", res, err)
	}
	l, _ := s.LockByKey(ctx, key)
	ts, err := s.Tenures(ctx, l.ID, audit.TimeFilter{})
	if err != nil || len(ts) != 1 || ts[0].Pruned == nil {
		t.Fatalf("Tenures = %+v, %v; want a pruned summary", ts, err)
	}
	p := ts[0].Pruned
	if p.Renewals != 3 || !p.First.Equal(at(1)) || !p.Last.Equal(at(3)) || p.MinMarginRatio == nil || math.Abs(*p.MinMarginRatio-0.25) > 1e-9 {
		t.Errorf("summary = %+v (min margin %v)", p, p.MinMarginRatio)
	}
	evs, err := s.Events(ctx, l.ID, audit.EventFilter{})
	if err != nil || len(evs) != 2 {
		t.Errorf("events left = %d, %v; want the grant and the new renewal", len(evs), err)
	}
}
