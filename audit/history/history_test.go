package history_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/history"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

var t0 = time.Date(2025, 3, 14, 9, 0, 0, 500, time.UTC)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

// openStory stores the lock src/orders: worker-1 holds token 1 from 10 s
// until it expires at 20 s, nobody until worker-2 is granted token 2 at
// 30 s, superseded at 40 s by worker-1 again under token 3, still held. The
// collector of src was blind from 50 s to 60 s. worker-1 also held
// other/billing from 15 s to 25 s, with a finding at 18 s.
func openStory(t *testing.T) (*sqlite.Store, audit.Lock, audit.Lock) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "leasewatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	orders, billing := audit.LockKey{Source: "src", Name: "orders"}, audit.LockKey{Source: "other", Name: "billing"}
	tenure := func(k audit.LockKey, seq int64, holder string, token int64, from, to int, end audit.EndReason) audit.Tenure {
		ten := audit.Tenure{Lock: k, Seq: seq, Holder: holder, Token: audit.Int64(token), GrantedAt: at(from), End: end}
		if end != "" {
			ten.EndedAt = at(to)
		}
		return ten
	}
	b := audit.Batch{
		Tenures: []audit.Tenure{
			tenure(orders, 1, "worker-1", 1, 10, 20, audit.EndExpired),
			tenure(orders, 2, "worker-2", 2, 30, 40, audit.EndSuperseded),
			tenure(orders, 3, "worker-1", 3, 40, 0, ""),
			tenure(billing, 1, "worker-1", 7, 15, 25, audit.EndReleased),
		},
		Findings: []audit.Finding{
			{Lock: orders, Kind: audit.FindingBlindWindow, Severity: audit.SeverityWarning, At: at(50), Until: at(60)},
			{Lock: billing, Kind: audit.FindingUnfencedLock, Severity: audit.SeverityWarning, At: at(18)},
			{Lock: billing, Kind: audit.FindingLeaseExpired, Severity: audit.SeverityWarning, At: at(26)},
		},
	}
	if err := st.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	o, err := st.LockByKey(ctx, orders)
	if err != nil {
		t.Fatal(err)
	}
	bl, err := st.LockByKey(ctx, billing)
	if err != nil {
		t.Fatal(err)
	}
	return st, o, bl
}

func TestAt(t *testing.T) {
	st, orders, _ := openStory(t)
	for _, tc := range []struct {
		name         string
		sec          int
		state        history.State
		tenure, prev int64 // seqs; 0 for none
		blind        bool
	}{
		{"BeforeAnyTenure", 5, history.StateFree, 0, 0, false},
		{"AtTheGrant", 10, history.StateHeld, 1, 0, false},
		{"Held", 15, history.StateHeld, 1, 0, false},
		{"AtTheExpiryItIsFree", 20, history.StateFree, 0, 1, false},
		{"FreeSinceTheExpiry", 25, history.StateFree, 0, 1, false},
		{"AtAHandoverTheNewHolderHolds", 40, history.StateHeld, 3, 0, false},
		{"BlindWhileHeld", 55, history.StateBlind, 3, 0, true},
		{"BlindWindowEndsInclusive", 60, history.StateBlind, 3, 0, true},
		{"StillHeldLater", 600, history.StateHeld, 3, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := history.At(context.Background(), st, orders, at(tc.sec))
			if err != nil {
				t.Fatal(err)
			}
			if m.State != tc.state {
				t.Errorf("state at %ds = %s, want %s", tc.sec, m.State, tc.state)
			}
			if got := seqOf(m.Tenure); got != tc.tenure {
				t.Errorf("tenure at %ds = %d, want %d", tc.sec, got, tc.tenure)
			}
			if got := seqOf(m.Previous); got != tc.prev {
				t.Errorf("free since the end of tenure %d, want %d", got, tc.prev)
			}
			if (m.Blind != nil) != tc.blind {
				t.Errorf("blind window = %+v, want one: %v", m.Blind, tc.blind)
			}
			if m.Blind != nil && (!m.Blind.From.Equal(at(50)) || !m.Blind.To.Equal(at(60))) {
				t.Errorf("blind window %s..%s, want 50s..60s", m.Blind.From, m.Blind.To)
			}
		})
	}
}

func seqOf(t *audit.Tenure) int64 {
	if t == nil {
		return 0
	}
	return t.Seq
}

func TestHolder(t *testing.T) {
	st, orders, billing := openStory(t)
	ctx := context.Background()
	now := at(100)
	h, err := history.Holder(ctx, st, audit.HolderFilter{Holder: "worker-1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		lock     int64
		seq      int64
		until    time.Time
		findings int
	}
	var got []row
	for _, ht := range h.Tenures {
		got = append(got, row{ht.LockID, ht.Seq, ht.Until, ht.Findings})
	}
	// Newest first; billing's finding at 18 s falls in its tenure, the one
	// at 26 s after it; a held tenure's findings count up to now.
	want := []row{{orders.ID, 3, now, 1}, {billing.ID, 1, at(25), 1}, {orders.ID, 1, at(20), 0}}
	if len(got) != len(want) {
		t.Fatalf("tenures = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].lock != want[i].lock || got[i].seq != want[i].seq || !got[i].until.Equal(want[i].until) || got[i].findings != want[i].findings {
			t.Errorf("tenure %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if !h.Next.IsZero() {
		t.Errorf("one page holds every tenure, yet Next = %+v", h.Next)
	}

	t.Run("Pages", func(t *testing.T) {
		first, err := history.Holder(ctx, st, audit.HolderFilter{Holder: "worker-1", TimeFilter: audit.TimeFilter{Limit: 2}}, now)
		if err != nil {
			t.Fatal(err)
		}
		if len(first.Tenures) != 2 || first.Next.IsZero() {
			t.Fatalf("first page of 2: %d tenures, next %+v", len(first.Tenures), first.Next)
		}
		rest, err := history.Holder(ctx, st, audit.HolderFilter{Holder: "worker-1", Before: first.Next, TimeFilter: audit.TimeFilter{Limit: 2}}, now)
		if err != nil {
			t.Fatal(err)
		}
		if len(rest.Tenures) != 1 || rest.Tenures[0].LockID != orders.ID || rest.Tenures[0].Seq != 1 || !rest.Next.IsZero() {
			t.Errorf("second page = %+v, want orders' first tenure alone", rest.Tenures)
		}
	})
}
