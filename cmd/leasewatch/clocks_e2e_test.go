package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// shiftedLock is a Lease lock whose elector's clock runs shift from the
// machine's: the times it writes (renewTime, acquireTime) are shift later
// than its clock read, and the times it reads back shift earlier, as an
// elector on a machine whose clock is off by shift sees them. client-go
// v0.37 gives no way to hand an elector a clock (NewLeaderElector sets an
// unexported clock.RealClock), so the shift is made at the lock, through
// which every time the elector writes or reads passes.
type shiftedLock struct {
	resourcelock.Interface
	shift time.Duration
}

// shifted wraps a lock into a shiftedLock (runElector's wrap).
func shifted(shift time.Duration) func(resourcelock.Interface) resourcelock.Interface {
	return func(l resourcelock.Interface) resourcelock.Interface { return shiftedLock{Interface: l, shift: shift} }
}

func (l shiftedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r, raw, err := l.Interface.Get(ctx)
	if r != nil {
		moveTimes(r, -l.shift)
	}
	return r, raw, err
}

func (l shiftedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	moveTimes(&r, l.shift)
	return l.Interface.Create(ctx, r)
}

func (l shiftedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	moveTimes(&r, l.shift)
	return l.Interface.Update(ctx, r)
}

func moveTimes(r *resourcelock.LeaderElectionRecord, d time.Duration) {
	for _, t := range []*metav1.Time{&r.RenewTime, &r.AcquireTime} {
		if !t.IsZero() {
			*t = metav1.NewTime(t.Add(d))
		}
	}
}

// apiClock is an estimate as GET /api/v1/clocks gives it.
type apiClock struct {
	Holder   string `json:"holder"`
	OffsetMS int64  `json:"offset_ms"`
	BoundMS  *int64 `json:"bound_ms"`
	Samples  int    `json:"samples"`
}

// Two real client-go electors on the real apiserver, one whose clock runs
// 300 ms ahead, one 200 ms behind: leasewatch serve estimates each offset
// within 50 ms from their renewals (never more ahead than the clock is, the
// estimate being the least it can be), shows them on /clocks and /metrics,
// and raises clock_skew for the one 300 ms ahead of its 2 s lease (more
// than the default tenth), not for the one behind.
func TestEndToEndClocksOfShiftedElectors(t *testing.T) {
	api, cs, ns := clusterNamespace(t, "e2e-clocks")
	base, _ := startServe(t, fmt.Sprintf(`
listen: 127.0.0.1:0
database: %s
sources:
  - name: cluster-clocks
    kind: kubernetes
    kubeconfig: %s
    namespaces: [%s]
`, filepath.Join(t.TempDir(), "lw.db"), api.Kubeconfig, ns))
	eventually(t, 30*time.Second, "the kubernetes source to be up", func() bool {
		var resp struct{ Sources []struct{ State string } }
		getJSON(t, base, "/api/v1/sources", &resp)
		return len(resp.Sources) == 1 && resp.Sources[0].State == "up"
	})

	shifts := map[string]time.Duration{"ahead_1": 300 * time.Millisecond, "behind_1": -200 * time.Millisecond}
	for holder, shift := range shifts {
		runElector(t, cs, ns, strings.TrimSuffix(holder, "_1"), holder, shifted(shift))
	}
	const within = 50 * time.Millisecond
	var last map[string]apiClock
	eventually(t, 60*time.Second, "both offsets within 50 ms, from 10 renewals or more", func() bool {
		var resp struct{ Clocks []apiClock }
		getJSON(t, base, "/api/v1/clocks?source=cluster-clocks", &resp)
		last = map[string]apiClock{}
		for _, c := range resp.Clocks {
			last[c.Holder] = c
		}
		for holder, shift := range shifts {
			c, ok := last[holder]
			off := time.Duration(c.OffsetMS) * time.Millisecond
			if ok && off > shift+time.Millisecond {
				t.Fatalf("%s: offset %s, more than its clock's %s: the estimate is a least", holder, off, shift)
			}
			if !ok || c.Samples < 10 || off < shift-within {
				t.Logf("%s: %+v so far", holder, c)
				return false
			}
		}
		return true
	})
	t.Logf("estimates: %+v", last)

	code, page := get(t, base, "/clocks")
	if code != http.StatusOK || !strings.Contains(page, "ahead_1") || !strings.Contains(page, "behind_1") {
		t.Fatalf("GET /clocks: %d, want both holders listed:\n%.3000s", code, page)
	}
	offsets := map[string]float64{}
	for _, m := range scrapeFamilies(t, http.DefaultClient, base)["leasewatch_holder_clock_offset_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "holder" {
				offsets[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	for holder, shift := range shifts {
		if got, ok := offsets[holder]; !ok || got < (shift-within).Seconds() || got > (shift+time.Millisecond).Seconds() {
			t.Errorf("leasewatch_holder_clock_offset_seconds{holder=%q} = %v (%v), want within 50 ms under %s", holder, got, ok, shift)
		}
	}

	var skews map[string]int
	eventually(t, 20*time.Second, "clock_skew of ahead_1", func() bool {
		var resp struct {
			Findings []struct{ Holders []string }
		}
		getJSON(t, base, "/api/v1/findings?kind=clock_skew", &resp)
		skews = map[string]int{}
		for _, f := range resp.Findings {
			for _, h := range f.Holders {
				skews[h]++
			}
		}
		return skews["ahead_1"] > 0
	})
	if skews["behind_1"] != 0 {
		t.Errorf("clock_skew findings by holder = %v, want none of behind_1", skews)
	}
}
