package audit

import (
	"testing"
	"time"
)

// A far-future lease from a hostile or broken holder is kept, as the latest
// representable time, and the lock stays held rather than expiring at once.
func TestTrackerKeepsFarFutureLease(t *testing.T) {
	tr := NewTracker(TrackerConfig{})
	key := LockKey{Source: "k8s", Name: "default/far"}
	now := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	far := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	tr.Step(Input{Source: "k8s", Kind: KindKubernetes, ExpireByClock: true, Live: true, At: now, Observations: []Observation{
		{Lock: key, Kind: EventGrant, At: now, RenewedAt: far, Holder: "node-1", LeaseDuration: time.Hour},
	}})
	if b := tr.Tick(now.Add(24 * time.Hour)); len(b.Events) != 0 {
		t.Fatalf("Tick a day later: %+v, want the lease still held", b.Events)
	}
	l, _ := tr.Lock(key)
	if l.State != StateHeld || !l.ExpiresAt.Equal(LatestTime) {
		t.Fatalf("lock = %+v, want held, expiring at the latest representable time %v", l, LatestTime.UTC())
	}
}
