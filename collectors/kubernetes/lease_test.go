package kubernetes

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/leasewatch/leasewatch/audit"
)

func ptr[T any](v T) *T { return &v }

var (
	t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	t1 = t0.Add(7 * time.Second)
)

func lease(ns, name string, spec coordinationv1.LeaseSpec) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "4711", UID: "uid-1"},
		Spec:       spec,
	}
}

func TestDecodeLease(t *testing.T) {
	heartbeat := map[string]bool{"kube-node-lease": true}
	tests := []struct {
		name  string
		lease *coordinationv1.Lease
		held  bool
		want  audit.Observation
	}{{
		name: "LeaderElectionHolder",
		lease: lease("default", "controller", coordinationv1.LeaseSpec{
			HolderIdentity: ptr("node-a_7c1f"), LeaseDurationSeconds: ptr[int32](15),
			AcquireTime: &metav1.MicroTime{Time: t0}, RenewTime: &metav1.MicroTime{Time: t1}, LeaseTransitions: ptr[int32](3),
		}),
		held: true,
		want: audit.Observation{
			Lock: audit.LockKey{Name: "default/controller"}, Kind: audit.EventGrant, Class: audit.ClassLock,
			Holder: "node-a_7c1f", Token: audit.Int64(3), LeaseDuration: 15 * time.Second, RenewedAt: t1, Position: "4711",
			Detail: map[string]any{"uid": "uid-1", "lease_transitions": int64(3), "acquire_time": "2026-03-01T12:00:00.123456Z"},
		},
	}, {
		name: "FirstGrantHasTransitionsZero",
		lease: lease("default", "controller", coordinationv1.LeaseSpec{
			HolderIdentity: ptr("a"), LeaseDurationSeconds: ptr[int32](3),
			AcquireTime: &metav1.MicroTime{Time: t0}, RenewTime: &metav1.MicroTime{Time: t0}, LeaseTransitions: ptr[int32](0),
		}),
		held: true,
		want: audit.Observation{
			Lock: audit.LockKey{Name: "default/controller"}, Kind: audit.EventGrant, Class: audit.ClassLock,
			Holder: "a", Token: audit.Int64(0), LeaseDuration: 3 * time.Second, RenewedAt: t0, Position: "4711",
			Detail: map[string]any{"uid": "uid-1", "lease_transitions": int64(0), "acquire_time": "2026-03-01T12:00:00.123456Z"},
		},
	}, {
		// client-go's ReleaseOnCancel: holder "", duration 1s, transitions kept.
		name: "ReleasedByClientGo",
		lease: lease("default", "controller", coordinationv1.LeaseSpec{
			HolderIdentity: ptr(""), LeaseDurationSeconds: ptr[int32](1),
			AcquireTime: &metav1.MicroTime{Time: t1}, RenewTime: &metav1.MicroTime{Time: t1}, LeaseTransitions: ptr[int32](3),
		}),
		held: false,
		want: audit.Observation{
			Lock: audit.LockKey{Name: "default/controller"}, Kind: audit.EventRelease, Class: audit.ClassLock, Position: "4711", RenewedAt: t1,
			Detail: map[string]any{"uid": "uid-1", "lease_transitions": int64(3), "acquire_time": "2026-03-01T12:00:07.123456Z"},
		},
	}, {
		name:  "NeverHeld",
		lease: lease("default", "empty", coordinationv1.LeaseSpec{}),
		held:  false,
		want: audit.Observation{
			Lock: audit.LockKey{Name: "default/empty"}, Kind: audit.EventRelease, Class: audit.ClassLock, Position: "4711",
			Detail: map[string]any{"uid": "uid-1"},
		},
	}, {
		// A writer that sets only acquireTime: it stands for the renewal.
		name: "AcquireTimeOnly",
		lease: lease("apps", "job", coordinationv1.LeaseSpec{
			HolderIdentity: ptr("w1"), LeaseDurationSeconds: ptr[int32](10), AcquireTime: &metav1.MicroTime{Time: t0},
		}),
		held: true,
		want: audit.Observation{
			Lock: audit.LockKey{Name: "apps/job"}, Kind: audit.EventGrant, Class: audit.ClassLock,
			Holder: "w1", LeaseDuration: 10 * time.Second, RenewedAt: t0, Position: "4711",
			Detail: map[string]any{"uid": "uid-1", "acquire_time": "2026-03-01T12:00:00.123456Z"},
		},
	}, {
		// kubelet's node lease: no acquireTime, no leaseTransitions.
		name: "NodeHeartbeat",
		lease: lease("kube-node-lease", "node-1", coordinationv1.LeaseSpec{
			HolderIdentity: ptr("node-1"), LeaseDurationSeconds: ptr[int32](40), RenewTime: &metav1.MicroTime{Time: t1},
		}),
		held: true,
		want: audit.Observation{
			Lock: audit.LockKey{Name: "kube-node-lease/node-1"}, Kind: audit.EventGrant, Class: audit.ClassHeartbeat,
			Holder: "node-1", LeaseDuration: 40 * time.Second, RenewedAt: t1, Position: "4711",
			Detail: map[string]any{"uid": "uid-1"},
		},
	}, {
		name: "ApiserverIdentityByLabel",
		lease: func() *coordinationv1.Lease {
			l := lease("kube-system", "kube-apiserver-x7", coordinationv1.LeaseSpec{HolderIdentity: ptr("apiserver-x7_1"), LeaseDurationSeconds: ptr[int32](3600), RenewTime: &metav1.MicroTime{Time: t1}})
			l.Labels = map[string]string{"apiserver.kubernetes.io/identity": "kube-apiserver"}
			return l
		}(),
		held: true,
		want: audit.Observation{
			Lock: audit.LockKey{Name: "kube-system/kube-apiserver-x7"}, Kind: audit.EventGrant, Class: audit.ClassHeartbeat,
			Holder: "apiserver-x7_1", LeaseDuration: time.Hour, RenewedAt: t1, Position: "4711",
			Detail: map[string]any{"uid": "uid-1"},
		},
	}, {
		name:  "ApiserverIdentityByName",
		lease: lease("kube-system", "apiserver-qz4", coordinationv1.LeaseSpec{HolderIdentity: ptr("apiserver-qz4_2"), RenewTime: &metav1.MicroTime{Time: t1}}),
		held:  true,
		want: audit.Observation{
			Lock: audit.LockKey{Name: "kube-system/apiserver-qz4"}, Kind: audit.EventGrant, Class: audit.ClassHeartbeat,
			Holder: "apiserver-qz4_2", RenewedAt: t1, Position: "4711", Detail: map[string]any{"uid": "uid-1"},
		},
	}, {
		// kube-system also holds the controller manager's and scheduler's
		// leader election Leases: locks.
		name:  "KubeSystemLeaderElection",
		lease: lease("kube-system", "kube-scheduler", coordinationv1.LeaseSpec{HolderIdentity: ptr("cp-1_9e"), LeaseTransitions: ptr[int32](1)}),
		held:  true,
		want: audit.Observation{
			Lock: audit.LockKey{Name: "kube-system/kube-scheduler"}, Kind: audit.EventGrant, Class: audit.ClassLock,
			Holder: "cp-1_9e", Token: audit.Int64(1), Position: "4711",
			Detail: map[string]any{"uid": "uid-1", "lease_transitions": int64(1)},
		},
	}, {
		// Coordinated leader election: the apiserver writes the holder with
		// no acquireTime and asks it to step down through preferredHolder.
		name: "CoordinatedHandoffRequested",
		lease: lease("kube-system", "kube-controller-manager", coordinationv1.LeaseSpec{
			HolderIdentity: ptr("cp-1"), LeaseDurationSeconds: ptr[int32](15), RenewTime: &metav1.MicroTime{Time: t1},
			LeaseTransitions: ptr[int32](0), Strategy: ptr(coordinationv1.OldestEmulationVersion), PreferredHolder: ptr("cp-2"),
		}),
		held: true,
		want: audit.Observation{
			Lock: audit.LockKey{Name: "kube-system/kube-controller-manager"}, Kind: audit.EventGrant, Class: audit.ClassLock,
			Holder: "cp-1", Token: audit.Int64(0), LeaseDuration: 15 * time.Second, RenewedAt: t1, Position: "4711",
			Detail: map[string]any{"uid": "uid-1", "lease_transitions": int64(0), "strategy": "OldestEmulationVersion", "preferred_holder": "cp-2"},
		},
	}, {
		// Any writer with update rights can put anything in holderIdentity
		// and preferredHolder: they are recorded as audit.Text makes them.
		name: "HostileHolderStrings",
		lease: lease("default", "controller", coordinationv1.LeaseSpec{
			HolderIdentity: ptr("evil\u202e\xff"), LeaseDurationSeconds: ptr[int32](15), RenewTime: &metav1.MicroTime{Time: t1},
			PreferredHolder: ptr(strings.Repeat("p", 100_000)),
		}),
		held: true,
		want: audit.Observation{
			Lock: audit.LockKey{Name: "default/controller"}, Kind: audit.EventGrant, Class: audit.ClassLock,
			Holder: `evil\xe2\x80\xae\xff`, LeaseDuration: 15 * time.Second, RenewedAt: t1, Position: "4711",
			Detail: map[string]any{"uid": "uid-1", "preferred_holder": audit.Text(strings.Repeat("p", 100_000))},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, held := decodeLease(tt.lease, heartbeat)
			if held != tt.held {
				t.Errorf("held = %v, want %v", held, tt.held)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("observation:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestDecodeLeaseHeartbeatNamespacesConfigurable(t *testing.T) {
	l := lease("kube-node-lease", "node-1", coordinationv1.LeaseSpec{HolderIdentity: ptr("node-1")})
	if ob, _ := decodeLease(l, nil); ob.Class != audit.ClassLock {
		t.Errorf("class without heartbeat namespaces = %s, want lock", ob.Class)
	}
	l = lease("liveness", "worker-3", coordinationv1.LeaseSpec{HolderIdentity: ptr("worker-3")})
	if ob, _ := decodeLease(l, map[string]bool{"liveness": true}); ob.Class != audit.ClassHeartbeat {
		t.Errorf("class in a configured heartbeat namespace = %s, want heartbeat", ob.Class)
	}
}

func TestCursor(t *testing.T) {
	all := []string{""}
	if got := encodeCursor(map[string]string{"": "123"}); got != "123" {
		t.Errorf("all-namespaces cursor = %q, want the bare resourceVersion", got)
	}
	rvs, err := decodeCursor("123", all)
	if err != nil || !reflect.DeepEqual(rvs, map[string]string{"": "123"}) {
		t.Errorf("decode bare cursor = %v, %v", rvs, err)
	}

	scoped := []string{"team-b", "team-a"}
	pos := encodeCursor(map[string]string{"team-a": "90", "team-b": "100"})
	if pos != "team-a=90&team-b=100" {
		t.Errorf("per-namespace cursor = %q, want team-a=90&team-b=100", pos)
	}
	rvs, err = decodeCursor(pos, scoped)
	if err != nil || !reflect.DeepEqual(rvs, map[string]string{"team-a": "90", "team-b": "100"}) {
		t.Errorf("decode %q = %v, %v", pos, rvs, err)
	}

	// A cursor that does not fit the configured namespaces cannot be resumed.
	for _, tt := range []struct {
		pos    string
		scopes []string
	}{
		{"team-a=90", all},
		{"123", scoped},
		{"team-a=90", scoped},
		{"team-a=90&team-b=100&team-c=7", scoped},
		{"team-a=&team-b=100", scoped},
	} {
		if rvs, err := decodeCursor(tt.pos, tt.scopes); err == nil {
			t.Errorf("decode %q for %q = %v, want an error", tt.pos, tt.scopes, rvs)
		}
	}
}

// TestRenewalKindDoesNotDependOnDelivery: whether a write of the same holder
// and token renews its tenure or takes the Lease anew is decided by when the
// holder wrote it, not by when the watch delivered it.
func TestRenewalKindDoesNotDependOnDelivery(t *testing.T) {
	spec := func(renewed time.Time) coordinationv1.LeaseSpec {
		return coordinationv1.LeaseSpec{HolderIdentity: ptr("a"), LeaseDurationSeconds: ptr(int32(15)),
			LeaseTransitions: ptr(int32(3)), RenewTime: &metav1.MicroTime{Time: renewed}}
	}
	for _, tt := range []struct {
		name      string
		written   time.Duration // after the previous renewal, on the holder's clock
		delivered time.Duration // after the previous renewal, on the collector's clock
		want      audit.EventKind
	}{
		{"InTimeDeliveredInTime", 2 * time.Second, 2 * time.Second, audit.EventRenew},
		{"InTimeDeliveredLate", 14 * time.Second, 20 * time.Second, audit.EventRenew},
		{"AfterTheLeaseRanOutDeliveredAtOnce", 16 * time.Second, 16 * time.Second, audit.EventGrant},
		{"AfterTheLeaseRanOutDeliveredLate", 16 * time.Second, time.Minute, audit.EventGrant},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &run{c: &Collector{cfg: Config{Name: "k"}}, leases: make(map[string]seen)}
			if ob, _ := r.observe(watch.Modified, lease("ns", "l", spec(t0)), t0); ob.Kind != audit.EventGrant {
				t.Fatalf("first write: kind = %s, want grant", ob.Kind)
			}
			ob, _ := r.observe(watch.Modified, lease("ns", "l", spec(t0.Add(tt.written))), t0.Add(tt.delivered))
			if ob.Kind != tt.want {
				t.Errorf("write at +%s delivered at +%s: kind = %s, want %s", tt.written, tt.delivered, ob.Kind, tt.want)
			}
		})
	}
}

// TestRenewalDecisionAgreesWithTheTracker: the collector calls a write of
// the same holder and token a renewal only if the tracker, judging the same
// write by its own clock rule, keeps the tenure; a write made exactly as the
// lease runs out takes the Lease anew for both.
func TestRenewalDecisionAgreesWithTheTracker(t *testing.T) {
	const duration = 15 * time.Second
	spec := func(renewed time.Time) coordinationv1.LeaseSpec {
		return coordinationv1.LeaseSpec{HolderIdentity: ptr("a"), LeaseDurationSeconds: ptr(int32(duration / time.Second)),
			LeaseTransitions: ptr(int32(3)), RenewTime: &metav1.MicroTime{Time: renewed}}
	}
	for _, tt := range []struct {
		name    string
		written time.Duration // after the previous renewal, on the holder's clock
		want    audit.EventKind
	}{
		{"AMicrosecondBeforeExpiry", duration - time.Microsecond, audit.EventRenew},
		{"ExactlyAtExpiry", duration, audit.EventGrant},
		{"AfterExpiry", duration + time.Second, audit.EventGrant},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &run{c: &Collector{cfg: Config{Name: "k"}}, leases: make(map[string]seen)}
			tr := audit.NewTracker(audit.TrackerConfig{})
			step := func(renewed, now time.Time) (audit.Observation, audit.Batch) {
				ob, _ := r.observe(watch.Modified, lease("ns", "l", spec(renewed)), now)
				return ob, tr.Step(r.input(now, []audit.Observation{ob}, nil))
			}
			step(t0, t0)
			ob, b := step(t0.Add(tt.written), t0.Add(tt.written))
			if ob.Kind != tt.want {
				t.Fatalf("collector: write at renewal+%s is a %s, want %s", tt.written, ob.Kind, tt.want)
			}
			expired := slices.ContainsFunc(b.Events, func(e audit.Event) bool { return e.Kind == audit.EventExpire })
			if renewed := ob.Kind == audit.EventRenew; expired == renewed {
				t.Errorf("tracker: write at renewal+%s the collector calls a %s expired the tenure = %v (events %v)", tt.written, ob.Kind, expired, kinds(b.Events))
			}
		})
	}
}

func kinds(evs []audit.Event) []audit.EventKind {
	out := make([]audit.EventKind, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}

// TestRenewalKeepsNoResourceVersion: a renewal's resourceVersion is the
// apiserver's etcd revision, which nothing reads, so a renew observation
// has no Position; a grant, a release and a deletion keep theirs.
func TestRenewalKeepsNoResourceVersion(t *testing.T) {
	held := func(renewed time.Time, rv string) *coordinationv1.Lease {
		l := lease("ns", "l", coordinationv1.LeaseSpec{HolderIdentity: ptr("a"), LeaseDurationSeconds: ptr(int32(15)),
			LeaseTransitions: ptr(int32(3)), RenewTime: &metav1.MicroTime{Time: renewed}})
		l.ResourceVersion = rv
		return l
	}
	released := lease("ns", "l", coordinationv1.LeaseSpec{LeaseTransitions: ptr(int32(3))})
	released.ResourceVersion = "13"
	r := &run{c: &Collector{cfg: Config{Name: "k"}}, leases: make(map[string]seen)}
	for _, step := range []struct {
		typ  watch.EventType
		l    *coordinationv1.Lease
		kind audit.EventKind
		pos  string
	}{
		{watch.Added, held(t0, "10"), audit.EventGrant, "10"},
		{watch.Modified, held(t0.Add(2*time.Second), "11"), audit.EventRenew, ""},
		{watch.Modified, held(t0.Add(4*time.Second), "12"), audit.EventRenew, ""},
		{watch.Modified, released, audit.EventRelease, "13"},
		{watch.Modified, held(t0.Add(6*time.Second), "14"), audit.EventGrant, "14"},
		{watch.Deleted, held(t0.Add(6*time.Second), "15"), audit.EventRelease, "15"},
	} {
		ob, _ := r.observe(step.typ, step.l, t0.Add(7*time.Second))
		if ob.Kind != step.kind || ob.Position != step.pos {
			t.Errorf("%s at resourceVersion %s: kind %s, position %q; want %s, position %q", step.typ, step.l.ResourceVersion, ob.Kind, ob.Position, step.kind, step.pos)
		}
	}
}

// TestRenewalsShareTheKeptStrings: each decoded watch event brings its own
// copies of the Lease's name and holder; a renewal hands on the ones the
// collector kept from the first observation instead, so that the tracker,
// the recorder and the store share one copy per Lease (130,000 in the
// largest clusters), and the collector's own memory of each Lease stays at
// 56 bytes with the name in it.
func TestRenewalsShareTheKeptStrings(t *testing.T) {
	if n := unsafe.Sizeof(seen{}); n > 56 {
		t.Errorf("seen takes %d bytes, want at most 56", n)
	}
	held := func(renewed time.Time) *coordinationv1.Lease {
		// Strings of their own, as each decoded event's are.
		return lease(strings.Clone("kube-node-lease"), strings.Clone("node-7"), coordinationv1.LeaseSpec{
			HolderIdentity: ptr(strings.Clone("node-7")), LeaseDurationSeconds: ptr(int32(40)), RenewTime: &metav1.MicroTime{Time: renewed}})
	}
	r := &run{c: &Collector{cfg: Config{Name: "k"}}, leases: make(map[string]seen)}
	first, _ := r.observe(watch.Added, held(t0), t0)
	for i := 1; i <= 2; i++ {
		ob, _ := r.observe(watch.Modified, held(t0.Add(time.Duration(i)*10*time.Second)), t0.Add(time.Duration(i)*10*time.Second))
		if ob.Kind != audit.EventRenew || ob.Lock.Name != first.Lock.Name || ob.Holder != first.Holder {
			t.Fatalf("renewal %d = %s of %q by %q, want a renewal of %q by %q", i, ob.Kind, ob.Lock.Name, ob.Holder, first.Lock.Name, first.Holder)
		}
		if unsafe.StringData(ob.Lock.Name) != unsafe.StringData(first.Lock.Name) {
			t.Errorf("renewal %d: the lock name is a copy of its own, not the one the first observation brought", i)
		}
		if unsafe.StringData(ob.Holder) != unsafe.StringData(first.Holder) {
			t.Errorf("renewal %d: the holder is a copy of its own, not the one the first observation brought", i)
		}
	}
	if kept := r.leases["kube-node-lease/node-7"]; unsafe.StringData(kept.name) != unsafe.StringData(first.Lock.Name) {
		t.Errorf("the collector keeps a later copy of the name, not the first observation's")
	}
}
