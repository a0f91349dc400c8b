package present

import (
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/query"
)

// TestStripsFitAYoungHistory: the overview's strips span the last hour,
// unless every tenure they show began later: then they begin a tenth of
// that history (two seconds at least) before its first grant, and their
// label says how long they span.
func TestStripsFitAYoungHistory(t *testing.T) {
	now := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	overview := func(granted ...time.Time) query.Overview {
		o := query.Overview{Now: now}
		for i, at := range granted {
			o.Held = append(o.Held, query.HeldLock{Lock: audit.Lock{ID: int64(i + 1), State: audit.StateHeld},
				Tenures: []audit.Tenure{{Seq: 1, Holder: "a", GrantedAt: at}}})
		}
		return o
	}
	for _, c := range []struct {
		name      string
		o         query.Overview
		wantFrom  time.Time
		wantLabel string
	}{
		{"OldHistory", overview(now.Add(-2*time.Hour), now.Add(-time.Minute)), now.Add(-time.Hour), "Last hour"},
		{"YoungHistory", overview(now.Add(-10*time.Minute), now.Add(-time.Minute)), now.Add(-11 * time.Minute), "Last 11m0s"},
		{"SecondsOld", overview(now.Add(-5 * time.Second)), now.Add(-7 * time.Second), "Last 7s"},
		{"NoTenures", query.Overview{Now: now, Held: []query.HeldLock{{Lock: audit.Lock{ID: 1}}}}, now.Add(-2 * time.Second), "Last 2s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := stripFrom(c.o); !got.Equal(c.wantFrom) {
				t.Errorf("strips begin %s, want %s", got, c.wantFrom)
			}
			if _, label := (Pages{}).heldRows(c.o, time.UTC); label != c.wantLabel {
				t.Errorf("label %q, want %q", label, c.wantLabel)
			}
		})
	}
}
