package audit

import (
	"math"
	"testing"
	"time"
)

// Every time a backend or a client can give comes back from the codec as
// the same instant, 1970-01-01T00:00:00Z included; the zero time stays
// "none"; and a time beyond int64 nanoseconds (a Lease's renewTime is
// whatever its client wrote) is kept as the nearest representable one
// instead of wrapping, and never as "none".
func TestTimeCodecRoundTrip(t *testing.T) {
	local := time.FixedZone("UTC+5", 5*3600)
	for _, tt := range []struct {
		name string
		in   time.Time
		want time.Time // zero: the same instant as in
	}{
		{"Now", time.Now(), time.Time{}},
		{"OtherZone", time.Date(2026, 12, 1, 14, 0, 0, 123456789, local), time.Time{}},
		{"BeforeTheEpoch", time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC), time.Time{}},
		{"TheEpochItself", time.Unix(0, 0), time.Time{}},
		{"ANanosecondBeforeTheEpoch", time.Unix(0, -1), time.Time{}},
		{"Earliest", EarliestTime, time.Time{}},
		{"Latest", LatestTime, time.Time{}},
		{"FarFuture", time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), LatestTime},
		{"FarPast", time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC), EarliestTime},
		{"YearZero", time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), EarliestTime},
		{"MinInt64", time.Unix(0, math.MinInt64), EarliestTime},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want.IsZero() {
				want = tt.in
			}
			n := Nanos(tt.in)
			if n == NoNanos {
				t.Fatalf("Nanos(%v) = NoNanos, which means no time", tt.in)
			}
			if got := TimeOf(n); !got.Equal(want) || got.Location() != time.UTC {
				t.Errorf("TimeOf(Nanos(%v)) = %v, want %v in UTC", tt.in, got, want.UTC())
			}
			if got := ClampTime(tt.in); !got.Equal(want) {
				t.Errorf("ClampTime(%v) = %v, want %v", tt.in, got, want.UTC())
			}
			if got := BoundTime(tt.in); !got.Equal(want) || got.Location() != time.UTC {
				t.Errorf("BoundTime(%v) = %v, want %v in UTC", tt.in, got, want.UTC())
			}
		})
	}
	if n := Nanos(time.Time{}); n != NoNanos || !TimeOf(NoNanos).IsZero() || !ClampTime(time.Time{}).IsZero() {
		t.Errorf("the zero time: Nanos %d, back %v; want NoNanos and the zero time", n, TimeOf(NoNanos))
	}
	// A bound given as 0001-01-01T00:00:00Z is a bound, not "none".
	if b := BoundTime(time.Time{}); !b.Equal(EarliestTime) {
		t.Errorf("BoundTime(0001-01-01) = %v, want %v", b, EarliestTime)
	}
}

// The tracker keeps a tenure granted at the epoch as granted at the epoch,
// not as "none" and not a nanosecond later.
func TestTrackerKeepsTheEpoch(t *testing.T) {
	tr := NewTracker(TrackerConfig{})
	key := LockKey{Source: "k8s", Name: "default/epoch"}
	epoch := time.Unix(0, 0).UTC()
	tr.Step(Input{Source: "k8s", Kind: KindKubernetes, ExpireByClock: true, Live: true, At: epoch, Observations: []Observation{
		{Lock: key, Kind: EventGrant, At: epoch, RenewedAt: epoch, Holder: "node-1", LeaseDuration: time.Minute},
	}})
	l, _ := tr.Lock(key)
	if l.State != StateHeld || !l.AcquiredAt.Equal(epoch) || l.AcquiredAt.IsZero() || !l.RenewedAt.Equal(epoch) ||
		!l.ExpiresAt.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("lock = %+v, want held, acquired and renewed at %v, expiring a minute later", l, epoch)
	}
	// A held tenure without a lease has no expiry, and does not expire.
	tr.Step(Input{Source: "k8s", Kind: KindKubernetes, ExpireByClock: true, Live: true, At: epoch.Add(time.Hour), Observations: []Observation{
		{Lock: LockKey{Source: "k8s", Name: "default/nolease"}, Kind: EventGrant, At: epoch.Add(time.Hour), Holder: "node-2"},
	}})
	if b := tr.Tick(epoch.Add(time.Hour)); len(b.Events) != 1 {
		t.Fatalf("Tick an hour later: %+v, want only the leased lock to expire", b.Events)
	}
	if l, _ := tr.Lock(LockKey{Source: "k8s", Name: "default/nolease"}); l.State != StateHeld || !l.ExpiresAt.IsZero() {
		t.Fatalf("lock without lease = %+v, want held with no expiry", l)
	}
}
