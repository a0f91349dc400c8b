package kubernetes

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasewatch/leasewatch/audit"
)

// A Lease's renewTime is whatever its writer put there, and the apiserver
// takes any year from 0000 to 9999. The collector keeps a time beyond what
// the audit trail holds as the nearest bound, so the observation, the
// renewal's detail and the stored lock all say the same instant.
func TestRenewTimeBeyondTheRangeIsClamped(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	ns := newNamespace(t)
	s := newSink(t)
	runCollector(t, s, Config{Namespaces: []string{ns}})

	for _, tc := range []struct {
		name  string
		renew time.Time
		want  time.Time
	}{
		{"far-future", time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC), audit.LatestTime},
		{"far-past", time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), audit.EarliestTime},
	} {
		lock := ns + "/" + tc.name
		createLease(t, ns, tc.name, coordinationv1.LeaseSpec{
			HolderIdentity: ptr("writer-" + tc.name), LeaseTransitions: ptr[int32](1), LeaseDurationSeconds: ptr[int32](10),
			AcquireTime: &metav1.MicroTime{Time: tc.renew}, RenewTime: &metav1.MicroTime{Time: tc.renew},
		})
		grants := s.WaitEvents(t, 10*time.Second, lock, 1, audit.EventGrant, audit.EventObserved)
		obs := s.Obs(lock, audit.EventGrant, audit.EventObserved)
		if len(obs) == 0 || !obs[0].RenewedAt.Equal(tc.want) {
			t.Fatalf("%s: observations %+v, want renewed at %v", tc.name, obs, tc.want)
		}
		if got := grants[0].Detail["renewed_at"]; got != nil && got != tc.want.Format(time.RFC3339Nano) {
			t.Errorf("%s: grant detail renewed_at = %v, want %v", tc.name, got, tc.want.Format(time.RFC3339Nano))
		}
		ts := s.Tenures(t, lock)
		if len(ts) != 1 || !ts[0].LastRenewedAt.Equal(tc.want) || ts[0].LastRenewedAt.IsZero() {
			t.Errorf("%s: tenures %+v, want one last renewed at %v", tc.name, ts, tc.want)
		}
	}
	// The far-future lease is held until the latest time kept.
	if l, ok := s.Lock(t, ns+"/far-future"); !ok || l.State != audit.StateHeld || !l.ExpiresAt.Equal(audit.LatestTime) {
		t.Errorf("far-future lock = %+v, want held, expiring at %v", l, audit.LatestTime)
	}
}
