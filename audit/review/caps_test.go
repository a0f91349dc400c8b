package review_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/review"
)

// A zombie holder that writes to many resources after its lease expired:
// the narrative tells the first groups of late writes in full and counts the
// rest exactly, and the handover keeps every write.
func TestNarrativeCountsLateWritesBeyondItsGroups(t *testing.T) {
	l := audit.Lock{ID: 7, Source: source, Name: lock}
	prev := audit.Tenure{Seq: 1, Holder: "worker-1", Token: audit.Int64(41), GrantedAt: at("10s"),
		LastRenewedAt: at("20s"), ExpiresAt: at("30s"), EndedAt: at("30s"), End: audit.EndExpired}
	next := audit.Tenure{Seq: 2, Holder: "worker-2", Token: audit.Int64(42), GrantedAt: at("31s")}
	ld := review.LockData{Lock: l, Tenures: []audit.Tenure{prev, next}}
	// Resources r0..r6 each reject 1 + i late writes with token 41.
	total := 0
	for i := range 7 {
		for k := range 1 + i {
			w := at("31.5s").Add(time.Duration(10*i+k) * time.Millisecond)
			res := fmt.Sprintf("r%d", i)
			ld.Events = append(ld.Events, audit.Event{ID: int64(100 + total), Kind: audit.EventWriteRejected, At: w,
				Holder: "worker-1", Token: audit.Int64(41), Resource: res})
			ld.Findings = append(ld.Findings, audit.Finding{Kind: audit.FindingStaleWrite, Severity: audit.SeverityInfo,
				At: w, Resource: res, Tokens: []int64{41}})
			total++
		}
	}
	r := review.Build(window(), []review.LockData{ld}, review.Options{})
	if r.Handovers() != 1 {
		t.Fatalf("handovers = %d, want 1", r.Handovers())
	}
	h := r.Locks[0].Handovers[0]
	if len(h.Writes) != total {
		t.Errorf("handover has %d writes, want all %d", len(h.Writes), total)
	}
	for i := range 4 {
		if !strings.Contains(h.Narrative, fmt.Sprintf("rejected by the r%d: fencing held", i)) {
			t.Errorf("narrative does not tell r%d's late writes in full:\n%s", i, h.Narrative)
		}
	}
	// r4..r6 rejected 5 + 6 + 7 writes.
	if want := "18 more late writes (3 more groups by token, resource and outcome) are listed with the writes"; !strings.Contains(h.Narrative, want) {
		t.Errorf("narrative lacks %q:\n%s", want, h.Narrative)
	}
	if strings.Contains(h.Narrative, "the r4") {
		t.Errorf("narrative tells more than 4 groups in full:\n%s", h.Narrative)
	}
}

// A report that reads only the newest handovers counts those it leaves out
// exactly, also when the window starts in the middle of the lock's history.
func TestLoadCountsOmittedHandovers(t *testing.T) {
	st := incident(t)
	for _, c := range []struct {
		name      string
		from      time.Time
		max       int
		handovers int
		omitted   int
	}{
		// 41 (the lock's first tenure) → 42 → 43 → 44 → 46.
		{"WholeHistory", t0, 2, 2, 2},
		{"FromTheMiddle", at("2m2s"), 1, 1, 3},
		{"FromAGrant", at("2m4.4s"), 1, 1, 3}, // 41 → 42 is in the window
		{"NothingLeftOut", t0, 4, 4, 0},       // 41 is read, and has no predecessor
	} {
		t.Run(c.name, func(t *testing.T) {
			r := load(t, st, review.Query{Window: review.Window{From: c.from, To: at("5m")}, Locks: []string{"1"},
				Options: review.Options{MaxHandovers: c.max}})
			l := r.Locks[0]
			if len(l.Handovers) != c.handovers || l.Omitted != c.omitted {
				t.Fatalf("handovers = %d, omitted %d; want %d and %d", len(l.Handovers), l.Omitted, c.handovers, c.omitted)
			}
		})
	}
	t.Run("ShareOfATotal", func(t *testing.T) {
		// One lock's share of a total below the floor is the floor.
		r := load(t, st, review.Query{Window: window(), Locks: []string{"1"}, Options: review.Options{MaxHandoversTotal: 1}})
		want := min(4, review.MinHandoversPerLock)
		if l := r.Locks[0]; len(l.Handovers) != want || l.Omitted != 4-want {
			t.Fatalf("handovers = %d, omitted %d; want %d (a lock's share is at least %d) and %d", len(l.Handovers), l.Omitted,
				want, review.MinHandoversPerLock, 4-want)
		}
		// A share above the lock's handovers leaves nothing out.
		r = load(t, st, review.Query{Window: window(), Locks: []string{"1"}, Options: review.Options{MaxHandoversTotal: 50}})
		if l := r.Locks[0]; len(l.Handovers) != 4 || l.Omitted != 0 {
			t.Fatalf("handovers = %d, omitted %d; want all 4", len(l.Handovers), l.Omitted)
		}
	})
}
