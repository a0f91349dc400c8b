package audit

import (
	"testing"
	"time"
	"unsafe"
)

// The tracker keeps a lockState per lock and a tenure per recent grant, a
// hundred thousand of each on a busy source: each must stay within the
// allocator's size class it was made to fit, 112 bytes (they took 144 and
// 128 while a lock kept its kind and class, and a tenure its end, as
// strings).
func TestTrackerStateSizes(t *testing.T) {
	if n := unsafe.Sizeof(lockState{}); n > 112 {
		t.Errorf("lockState takes %d bytes, want at most 112", n)
	}
	if n := unsafe.Sizeof(tenure{}); n > 112 {
		t.Errorf("tenure takes %d bytes, want at most 112", n)
	}
}

// A lock's kind and class, and a tenure's end, are kept as codes: each
// comes back as it was given, the contract's values and any other.
func TestTrackerCodesRoundTrip(t *testing.T) {
	for _, r := range []EndReason{"", EndReleased, EndExpired, EndSuperseded, "revoked"} {
		if got := endOf(r).reason(); got != r {
			t.Errorf("end %q comes back as %q", r, got)
		}
	}
	key := LockKey{Source: "zk", Name: "/locks/orders"}
	st := newLockState(key, "zookeeper", ClassLock)
	if st.kind() != "zookeeper" || st.class() != ClassLock {
		t.Fatalf("new lock: kind %q class %q, want zookeeper lock", st.kind(), st.class())
	}
	st.setClass(ClassHeartbeat)
	st.setKind("consul")
	if st.kind() != "consul" || st.class() != ClassHeartbeat {
		t.Fatalf("changed lock: kind %q class %q, want consul heartbeat", st.kind(), st.class())
	}
	if l := st.lock(); l.Kind != "consul" || l.Class != ClassHeartbeat || l.Key() != key {
		t.Fatalf("lock() = %+v, want consul heartbeat %v", l, key)
	}
}

// A renewal waiting for the next sync takes 40 bytes besides its key (every
// heartbeat of a large cluster has one), and comes back as it was put, with
// whether it is a heartbeat's.
func TestUnsavedRenewalPacked(t *testing.T) {
	if n := unsafe.Sizeof(packedRenewal{}); n > 40 {
		t.Errorf("packedRenewal takes %d bytes, want at most 40", n)
	}
	m := make(unsavedRenewals)
	at := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	for _, heartbeat := range []bool{false, true} {
		for _, seq := range []int64{0, 1, 7, 1 << 40} {
			rn := Renewal{Lock: LockKey{Source: "k8s", Name: "kube-node-lease/node-1"}, Seq: seq, Renewals: 3,
				RenewedAt: at, ExpiresAt: at.Add(40 * time.Second), LeaseDuration: 40 * time.Second}
			m.put(rn, heartbeat)
			got, ok := m.get(rn.Lock)
			if !ok || got != rn || m[rn.Lock].heartbeat() != heartbeat {
				t.Errorf("put %+v (heartbeat %v), got %+v (heartbeat %v)", rn, heartbeat, got, m[rn.Lock].heartbeat())
			}
		}
	}
}
