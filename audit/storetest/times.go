package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

var epoch = time.Unix(0, 0).UTC()

// 1970-01-01T00:00:00Z is a time like any other: every column that holds a
// time gives it back as the epoch, not as "none", across a reopen of the
// file; and a lock only named by an event still has no times at all.
func testEpochRoundTripsThroughTheDatabase(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	key := audit.LockKey{Source: "k8s", Name: "default/epoch"}
	named := audit.LockKey{Source: "writes", Name: "only-named"}
	st := audit.TrackState{
		Lock: audit.Lock{
			Source: key.Source, Kind: audit.KindKubernetes, Name: key.Name, Class: audit.ClassLock, State: audit.StateHeld,
			Holder: "node-1", AcquiredAt: epoch, RenewedAt: epoch, ExpiresAt: epoch.Add(time.Second),
			LeaseDuration: time.Second, ChangedAt: epoch,
		},
		NextSeq: 2,
	}
	ended := audit.Tenure{Lock: key, Seq: 1, Holder: "node-0", GrantedAt: epoch.Add(-time.Hour), LastRenewedAt: epoch,
		LeaseDuration: time.Second, ExpiresAt: epoch, EndedAt: epoch, End: audit.EndReleased}
	held := audit.Tenure{Lock: key, Seq: 2, Holder: "node-1", GrantedAt: epoch, LastRenewedAt: epoch,
		LeaseDuration: time.Second, ExpiresAt: epoch.Add(time.Second)}
	Apply(t, s, audit.Batch{
		Locks:   []audit.TrackState{st},
		Tenures: []audit.Tenure{ended, held},
		Events: []audit.Event{
			{Lock: key, Kind: audit.EventGrant, At: epoch, Holder: "node-1"},
			{Lock: named, Kind: audit.EventWriteAccepted, At: epoch, Resource: "db", RequestID: "epoch-1"},
		},
		Findings: []audit.Finding{{Lock: named, Kind: audit.FindingUnfencedWrite, Severity: audit.SeverityCritical, At: epoch, Until: epoch, Resource: "db"}},
		Cursors:  []audit.Cursor{{Source: "k8s", Position: "rv-1", At: epoch}},
	})
	check := func(s Store) {
		t.Helper()
		l := LockByKey(t, s, key)
		want := st.Lock
		want.ID = l.ID
		Equal(t, "lock", l, want)
		if n := LockByKey(t, s, named); !n.AcquiredAt.IsZero() || !n.RenewedAt.IsZero() || !n.ExpiresAt.IsZero() || !n.ChangedAt.IsZero() {
			t.Errorf("lock only named by an event = %+v, want no times", n)
		}
		tenures, err := s.Tenures(ctx, l.ID, audit.TimeFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(tenures) != 2 || !tenures[1].GrantedAt.Equal(epoch) || !tenures[1].EndedAt.IsZero() ||
			!tenures[0].EndedAt.Equal(epoch) || !tenures[0].ExpiresAt.Equal(epoch) || tenures[0].End != audit.EndReleased {
			t.Errorf("tenures = %s, want the held one granted at the epoch, the other ended at it", Show(tenures))
		}
		events, err := s.Events(ctx, LockByKey(t, s, named).ID, audit.EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != 1 || !events[0].At.Equal(epoch) || events[0].At.IsZero() {
			t.Errorf("events = %s, want one at the epoch", Show(events))
		}
		findings, err := s.Findings(ctx, audit.FindingFilter{LockID: LockByKey(t, s, named).ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(findings) != 1 || !findings[0].At.Equal(epoch) || !findings[0].Until.Equal(epoch) {
			t.Errorf("findings = %s, want one at the epoch", Show(findings))
		}
		last, err := s.LastEventAt(ctx)
		if err != nil {
			t.Fatal(err)
		}
		Equal(t, "LastEventAt", last, map[string]time.Time{"k8s": epoch, "writes": epoch})
		cursors, err := s.Cursors(ctx)
		if err != nil {
			t.Fatal(err)
		}
		Equal(t, "cursors", cursors, []audit.Cursor{{Source: "k8s", Position: "rv-1", At: epoch}})
	}
	check(s)
	check(h.Reopen(t, s))
}

// A window that reaches past what int64 nanoseconds hold (to=2263, 2300,
// from=0001) is clamped to the range, never wrapped into an empty one: it
// returns what lies inside it.
func testWindowBeyondTheRangeReturnsWhatIsInside(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	key := audit.LockKey{Source: "etcd", Name: "/locks/a"}
	st := heldLock(key.Source, key.Name, "h", 1, 0)
	ten := audit.Tenure{Lock: key, Seq: 1, Holder: "h", Token: audit.Int64(1), GrantedAt: At(0), LastRenewedAt: At(0),
		LeaseDuration: 10 * time.Second, ExpiresAt: At(10)}
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{st}, Tenures: []audit.Tenure{ten},
		Events:   []audit.Event{{Lock: key, Kind: audit.EventGrant, At: At(0), Holder: "h", Token: audit.Int64(1)}},
		Findings: []audit.Finding{{Lock: key, Kind: audit.FindingLateRenewal, Severity: audit.SeverityWarning, At: At(1)}},
	})
	id := LockByKey(t, s, key).ID
	for _, w := range []struct {
		name     string
		from, to time.Time
	}{
		{"To2263", time.Time{}, time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"To2300", At(-60), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"To9999", time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)},
		{"From1600", time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), At(60)},
		{"FromYearZero", time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(w.name, func(t *testing.T) {
			tf := audit.TimeFilter{From: w.from, To: w.to}
			events, err := s.Events(ctx, id, audit.EventFilter{TimeFilter: tf})
			if err != nil || len(events) != 1 {
				t.Errorf("Events: %d, %v; want the one event", len(events), err)
			}
			tenures, err := s.Tenures(ctx, id, tf)
			if err != nil || len(tenures) != 1 {
				t.Errorf("Tenures: %d, %v; want the one tenure", len(tenures), err)
			}
			findings, err := s.Findings(ctx, audit.FindingFilter{TimeFilter: tf, LockID: id})
			if err != nil || len(findings) != 1 {
				t.Errorf("Findings: %d, %v; want the one finding", len(findings), err)
			}
			overlapping, err := s.Findings(ctx, audit.FindingFilter{TimeFilter: tf, Overlapping: true, Class: audit.ClassLock})
			if err != nil || len(overlapping) != 1 {
				t.Errorf("Findings overlapping: %d, %v; want the one finding", len(overlapping), err)
			}
			counts, err := s.FindingCounts(ctx, audit.FindingCountFilter{TimeFilter: tf})
			if err != nil || counts[audit.SeverityWarning] != 1 {
				t.Errorf("FindingCounts: %v, %v; want the one warning", counts, err)
			}
		})
	}
}
