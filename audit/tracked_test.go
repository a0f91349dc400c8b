package audit

import (
	"math"
	"testing"
	"time"
)

// Tenure times are kept as Unix nanoseconds: every time a backend can give
// comes back as the same instant, the zero time stays "none", and a time
// beyond int64 nanoseconds (a Lease's renewTime is whatever its client
// wrote) is kept as the nearest representable one instead of wrapping.
func TestTenureTimesRoundTrip(t *testing.T) {
	local := time.FixedZone("UTC+5", 5*3600)
	for _, tt := range []struct {
		name string
		in   time.Time
		want time.Time // zero: the same instant as in
	}{
		{"Now", time.Now(), time.Time{}},
		{"OtherZone", time.Date(2026, 12, 1, 14, 0, 0, 123456789, local), time.Time{}},
		{"BeforeTheEpoch", time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC), time.Time{}},
		{"TheEpochItself", time.Unix(0, 0), time.Unix(0, 1)},
		{"FarFuture", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(0, math.MaxInt64)},
		{"FarPast", time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC), time.Unix(0, math.MinInt64)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want.IsZero() {
				want = tt.in
			}
			n := nanos(tt.in)
			if n == 0 {
				t.Fatalf("nanos(%v) = 0, which means no time", tt.in)
			}
			if got := timeOf(n); !got.Equal(want) || got.Location() != time.UTC {
				t.Errorf("timeOf(nanos(%v)) = %v, want %v in UTC", tt.in, got, want.UTC())
			}
		})
	}
	if n := nanos(time.Time{}); n != 0 || !timeOf(0).IsZero() {
		t.Errorf("the zero time: nanos %d, back %v; want 0 and the zero time", n, timeOf(0))
	}
}

// A far-future lease from a hostile or broken holder is kept, as the latest
// representable time, and the lock stays held rather than expiring at once.
func TestTrackerKeepsFarFutureLease(t *testing.T) {
	tr := NewTracker(TrackerConfig{})
	key := LockKey{Source: "k8s", Name: "default/far"}
	now := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	far := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	tr.Observe(Input{Source: "k8s", Kind: KindKubernetes, ExpireByClock: true, Live: true, At: now, Observations: []Observation{
		{Lock: key, Kind: EventGrant, At: now, RenewedAt: far, Holder: "node-1", LeaseDuration: time.Hour},
	}})
	if b := tr.Tick(now.Add(24 * time.Hour)); len(b.Events) != 0 {
		t.Fatalf("Tick a day later: %+v, want the lease still held", b.Events)
	}
	l, _ := tr.Lock(key)
	if l.State != StateHeld || !l.ExpiresAt.Equal(latestNanos) {
		t.Fatalf("lock = %+v, want held, expiring at the latest representable time %v", l, latestNanos.UTC())
	}
}
