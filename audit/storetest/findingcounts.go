package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// FindingCounts reads the minutes whole inside a window from the counts kept
// per minute and its partial minutes from the findings: whatever the window
// and class, its counts are those of the findings in it, as stored, after a
// lock's class changes and takes its findings along, and after retention
// deletes some; and for findings before 1970, which are not counted per
// minute.
func testFindingCountsAgreeWithTheirFindings(t *testing.T, harness Harness) {
	s := harness.Open(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(13, 17))
	start := T0.Truncate(time.Minute).Add(-time.Second) // findings either side of minute boundaries
	orders := heldLock("k8s", "ns/orders", "a", 1, 0)
	node := heldLock("k8s", "kube-node-lease/node-1", "node-1", 0, 0)
	node.Lock.Class = audit.ClassHeartbeat
	// node-2's findings are stored before its row, as a lock's; its row
	// then makes them a heartbeat's.
	node2 := heldLock("k8s", "kube-node-lease/node-2", "node-2", 0, 0)
	node2.Lock.Class = audit.ClassHeartbeat
	keys := []audit.LockKey{orders.Lock.Key(), node.Lock.Key(), node2.Lock.Key()}
	kinds := []audit.FindingKind{audit.FindingOverlap, audit.FindingLateRenewal, audit.FindingExposure, audit.FindingStaleWrite}
	var findings []audit.Finding
	for i := range 600 {
		findings = append(findings, audit.Finding{Lock: keys[rng.IntN(len(keys))], Kind: kinds[rng.IntN(len(kinds))],
			At: start.Add(time.Duration(rng.Int64N(int64(6 * time.Minute)))), Summary: fmt.Sprint(i)})
	}
	old := time.Unix(-90, 0).UTC() // before 1970, minutes either side of the epoch
	for i, at := range []time.Time{old, old.Add(time.Minute), time.Unix(0, 0).UTC(), time.Unix(1, 0).UTC()} {
		findings = append(findings, audit.Finding{Lock: keys[0], Kind: audit.FindingOverlap, At: at, Summary: fmt.Sprint("old ", i)})
	}
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{orders, node}, Findings: findings})

	windows := []audit.TimeFilter{
		{}, {From: start}, {To: start.Add(3 * time.Minute)},
		{From: start.Add(time.Second), To: start.Add(time.Second + 2*time.Minute - time.Nanosecond)}, // two whole minutes
		{From: start.Add(2 * time.Second), To: start.Add(30 * time.Second)},                          // inside one minute
		{From: old, To: time.Unix(2, 0).UTC()},
		{From: old.Add(time.Second), To: time.Unix(0, 0).UTC()},
	}
	for range 40 {
		from := start.Add(time.Duration(rng.Int64N(int64(6 * time.Minute))))
		windows = append(windows, audit.TimeFilter{From: from, To: from.Add(time.Duration(rng.Int64N(int64(4 * time.Minute))))})
	}
	stored := func(class audit.Class) []audit.Finding {
		t.Helper()
		got, err := s.Findings(ctx, audit.FindingFilter{Class: class, TimeFilter: audit.TimeFilter{Limit: audit.MaxListLimit}})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	check := func(when string) {
		t.Helper()
		for _, class := range []audit.Class{"", audit.ClassLock, audit.ClassHeartbeat} {
			list := stored(class)
			for _, w := range windows {
				want := make(map[audit.Severity]int)
				for _, f := range list {
					if (w.From.IsZero() || !f.At.Before(w.From)) && (w.To.IsZero() || !f.At.After(w.To)) {
						want[f.Severity]++
					}
				}
				got, err := s.FindingCounts(ctx, audit.FindingCountFilter{Class: class, TimeFilter: w})
				if err != nil {
					t.Fatal(err)
				}
				Equal(t, fmt.Sprintf("%s: FindingCounts(class %q, %s..%s)", when, class, w.From.Format(time.RFC3339Nano), w.To.Format(time.RFC3339Nano)),
					got, want)
			}
		}
	}
	check("as stored")

	heartbeats := len(stored(audit.ClassHeartbeat))
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{node2}})
	if len(stored(audit.ClassHeartbeat)) == heartbeats {
		t.Fatal("node-2's row did not make its findings a heartbeat's: the test proves nothing")
	}
	check("after a lock's class changed")

	before := len(stored(""))
	for {
		n, err := s.PruneFindings(ctx, start.Add(3*time.Minute+20*time.Second), 150)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if after := len(stored("")); after == before || after == 0 {
		t.Fatalf("retention left %d of %d findings: the test proves nothing", after, before)
	}
	check("after retention")
}
