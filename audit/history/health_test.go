package history_test

import (
	"slices"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/history"
)

// A lock's afternoon: first seen held by a (start unknown), released at
// 10 s; b granted 2 s later, held 40 s and superseded by c directly; c
// expires after 20 min; d takes it 1 min later and still holds it.
func TestHealthOf(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tenures := []audit.Tenure{
		{Seq: 1, Holder: "a", Observed: true, GrantedAt: at(0), EndedAt: at(10 * time.Second), End: audit.EndReleased},
		{Seq: 2, Holder: "b", GrantedAt: at(12 * time.Second), EndedAt: at(52 * time.Second), End: audit.EndSuperseded},
		{Seq: 3, Holder: "c", GrantedAt: at(52 * time.Second), EndedAt: at(52*time.Second + 20*time.Minute), End: audit.EndExpired},
		{Seq: 4, Holder: "d", GrantedAt: at(52*time.Second + 21*time.Minute)},
	}
	h := history.HealthOf(tenures, []float64{0.9, 0.85, 0.2, 0.05})
	for _, tt := range []struct {
		name   string
		d      history.Distribution
		counts []int
		median float64
	}{
		// Buckets: <15s, 15s-1m, 1-5m, 5-15m, 15m-1h, 1-6h, >=6h.
		{"tenure", h.Tenure, []int{0, 1, 0, 0, 1, 0, 0}, 1200},
		// Buckets: direct, <100ms, 100ms-1s, 1-5s, 5-30s, 30s-5m, >=5m.
		{"takeover", h.Takeover, []int{1, 0, 0, 1, 0, 1, 0}, 2},
		// Buckets: <10%, 10-25%, 25-50%, 50-75%, >=75%.
		{"margin", h.Margin, []int{1, 1, 0, 0, 2}, 0.85},
	} {
		var counts []int
		for _, b := range tt.d.Buckets {
			counts = append(counts, b.Count)
		}
		if !slices.Equal(counts, tt.counts) || tt.d.Median != tt.median || !tt.d.Buckets[len(tt.d.Buckets)-1].Open {
			t.Errorf("%s: counts %v, median %v; want %v, median %v, the last bucket open", tt.name, counts, tt.d.Median, tt.counts, tt.median)
		}
	}
	if empty := history.HealthOf(nil, nil); empty.Tenure.Count != 0 || empty.Margin.Median != 0 {
		t.Errorf("no tenures: %+v, want empty distributions", empty)
	}
}
