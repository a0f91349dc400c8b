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
	old := time.Unix(-90, 0).UTC()                      // before 1970, minutes either side of the epoch
	orders := heldLock("k8s", "ns/orders", "a", 1, 0)
	node := heldLock("k8s", "kube-node-lease/node-1", "node-1", 0, 0)
	node.Lock.Class = audit.ClassHeartbeat
	// node-2's findings are stored before its row, as a lock's; its row
	// then makes them a heartbeat's.
	node2 := heldLock("k8s", "kube-node-lease/node-2", "node-2", 0, 0)
	node2.Lock.Class = audit.ClassHeartbeat
	findings := randomFindings(rng, start, old, []audit.LockKey{orders.Lock.Key(), node.Lock.Key(), node2.Lock.Key()})
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{orders, node}, Findings: findings})
	windows := minuteWindows(rng, start, old)
	checkFindingCounts(t, s, "as stored", windows)

	heartbeats := len(storedFindings(t, s, audit.ClassHeartbeat))
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{node2}})
	if len(storedFindings(t, s, audit.ClassHeartbeat)) == heartbeats {
		t.Fatal("node-2's row did not make its findings a heartbeat's: the test proves nothing")
	}
	checkFindingCounts(t, s, "after a lock's class changed", windows)

	before := len(storedFindings(t, s, ""))
	for {
		n, err := s.PruneFindings(ctx, start.Add(3*time.Minute+20*time.Second), 150)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if after := len(storedFindings(t, s, "")); after == before || after == 0 {
		t.Fatalf("retention left %d of %d findings: the test proves nothing", after, before)
	}
	checkFindingCounts(t, s, "after retention", windows)
}

// randomFindings are 600 findings of keys' locks, of kinds of every
// severity, over the six minutes from start, and four about the first lock
// either side of old and of the epoch.
func randomFindings(rng *rand.Rand, start, old time.Time, keys []audit.LockKey) []audit.Finding {
	kinds := []audit.FindingKind{audit.FindingOverlap, audit.FindingLateRenewal, audit.FindingExposure, audit.FindingStaleWrite}
	var findings []audit.Finding
	for i := range 600 {
		findings = append(findings, audit.Finding{Lock: keys[rng.IntN(len(keys))], Kind: kinds[rng.IntN(len(kinds))],
			At: start.Add(time.Duration(rng.Int64N(int64(6 * time.Minute)))), Summary: fmt.Sprint(i)})
	}
	for i, at := range []time.Time{old, old.Add(time.Minute), time.Unix(0, 0).UTC(), time.Unix(1, 0).UTC()} {
		findings = append(findings, audit.Finding{Lock: keys[0], Kind: audit.FindingOverlap, At: at, Summary: fmt.Sprint("old ", i)})
	}
	return findings
}

// storedFindings lists s's findings of locks of class ("": every class).
func storedFindings(t *testing.T, s Store, class audit.Class) []audit.Finding {
	t.Helper()
	got, err := s.Findings(context.Background(), audit.FindingFilter{Class: class, TimeFilter: audit.TimeFilter{Limit: audit.MaxListLimit}})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// checkFindingCounts compares s's FindingCounts, for every class and for
// each of windows, with counting its stored findings by severity.
func checkFindingCounts(t *testing.T, s Store, when string, windows []audit.TimeFilter) {
	t.Helper()
	for _, class := range []audit.Class{"", audit.ClassLock, audit.ClassHeartbeat} {
		list := storedFindings(t, s, class)
		for _, w := range windows {
			want := make(map[audit.Severity]int)
			for _, f := range list {
				if (w.From.IsZero() || !f.At.Before(w.From)) && (w.To.IsZero() || !f.At.After(w.To)) {
					want[f.Severity]++
				}
			}
			got, err := s.FindingCounts(context.Background(), audit.FindingCountFilter{Class: class, TimeFilter: w})
			if err != nil {
				t.Fatal(err)
			}
			Equal(t, fmt.Sprintf("%s: FindingCounts(class %q, %s..%s)", when, class, w.From.Format(time.RFC3339Nano), w.To.Format(time.RFC3339Nano)),
				got, want)
		}
	}
}
