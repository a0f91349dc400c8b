package prom

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leasewatch/leasewatch/audit"
)

// leasewatch_holder_clock_offset_seconds has series for the holders whose
// offset is largest either way, up to the cap, their bounds once known, and
// counts the rest.
func TestClockMetrics(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	clocks := audit.NewHolderClocks(0)
	renew := func(holder string, offset, made, delay time.Duration) {
		m := t0.Add(made)
		clocks.Observe(audit.HolderKey{Source: "k8s", Holder: holder}, audit.ClassLock, m.Add(delay), m.Add(offset))
	}
	renew("leader", 300*time.Millisecond, 0, 4*time.Millisecond)
	renew("leader", 300*time.Millisecond, time.Minute, 3*time.Millisecond)
	renew("standby", -200*time.Millisecond, 0, 2*time.Millisecond)
	renew("node-1", 10*time.Millisecond, 0, time.Millisecond)
	c := NewClockCollector(clocks, 2, nil).(*clockCollector)
	c.now = func() time.Time { return t0.Add(90 * time.Second) }
	want := `
# HELP leasewatch_holder_clock_offset_bound_seconds How far each minute's estimate of leasewatch_holder_clock_offset_seconds spread over the window; absent until the holder renewed in two minutes.
# TYPE leasewatch_holder_clock_offset_bound_seconds gauge
leasewatch_holder_clock_offset_bound_seconds{holder="leader",source="k8s"} 0.001
# HELP leasewatch_holder_clock_offset_seconds The holder's clock less leasewatch's, at least (positive: ahead), from its renewals of the last 10 minutes that carry its own time (a Kubernetes renewTime); for the holders whose offset is largest either way.
# TYPE leasewatch_holder_clock_offset_seconds gauge
leasewatch_holder_clock_offset_seconds{holder="leader",source="k8s"} 0.297
leasewatch_holder_clock_offset_seconds{holder="standby",source="k8s"} -0.202
# HELP leasewatch_holder_clock_series_limit_exceeded Holders with a clock estimate left out of leasewatch_holder_clock_offset_seconds by its cap.
# TYPE leasewatch_holder_clock_series_limit_exceeded gauge
leasewatch_holder_clock_series_limit_exceeded 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
