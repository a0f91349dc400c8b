package kubernetes

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// fencingFindings are the findings that say a lock's tokens cannot be
// trusted.
var fencingFindings = []audit.FindingKind{audit.FindingTokenRegression, audit.FindingTokenReuse, audit.FindingTokenSkip, audit.FindingOverlap}

// TestAcquireRenewRelease follows one client-go elector from acquisition
// through its renewals to its release, and checks every write to the Lease
// became exactly one observation.
func TestAcquireRenewRelease(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	ns := newNamespace(t)
	lock := ns + "/leader"
	s := newSink(t)
	// Watches that the apiserver ends every 2-3s: the collector must reopen
	// them from the last recorded resourceVersion without a gap.
	runCollector(t, s, Config{Namespaces: []string{ns}}, WithWatchTimeout(2*time.Second))

	first := s.Inputs()[0]
	if !first.Snapshot || first.Cursor == "" || !first.ExpireByClock || !first.SequentialTokens || first.Kind != audit.KindKubernetes || len(first.Observations) != 0 {
		t.Fatalf("first input = %+v, want an empty snapshot of kind kubernetes with a cursor, clock expiry and sequential tokens", first)
	}

	// The test's own watch sees every write to the Lease, to check the
	// collector recorded each one.
	writes := watchLease(t, ns, "leader", first.Cursor[strings.Index(first.Cursor, "=")+1:])

	var log electionLog
	a := startElector(t, ns, "leader", "node-a_7c1f", electorConfig{Release: true, Log: &log})
	a.waitLeading(t, 10*time.Second)
	g := s.WaitEvents(t, 10*time.Second, lock, 1, audit.EventGrant)[0]
	acq := log.all()[0]
	if g.Holder != "node-a_7c1f" || tokenOf(g.Token) != acq.token || acq.token != 0 || g.TTL != leaseDuration || g.Inferred || g.Position == "" {
		t.Fatalf("grant = %+v, want node-a_7c1f with token %d (the elector read 0), a 2s lease and a position", g, acq.token)
	}
	if l, _ := s.Lock(t, lock); l.Class != audit.ClassLock || l.Kind != audit.KindKubernetes || l.State != audit.StateHeld {
		t.Fatalf("lock = %+v, want a held lock of kind kubernetes", l)
	}

	// client-go renews every RetryPeriod: each renewal is a write, and
	// renewTime moves by at least RetryPeriod. 20 of them span several
	// watch requests.
	renews := s.WaitEvents(t, 20*time.Second, lock, 20, audit.EventRenew)
	var prev time.Time
	var gaps []time.Duration
	for i, r := range renews {
		if r.Holder != g.Holder || tokenOf(r.Token) != 0 || r.Inferred || r.TTL != leaseDuration {
			t.Fatalf("renew %d = %+v, want %s token 0 with a 2s lease", i, r, g.Holder)
		}
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(r.Detail["renewed_at"]))
		if err != nil {
			t.Fatalf("renew %d: renewed_at %v: %v", i, r.Detail["renewed_at"], err)
		}
		if i > 0 {
			gaps = append(gaps, at.Sub(prev))
		}
		prev = at
	}
	slices.Sort(gaps)
	if gaps[0] < retryPeriod*9/10 || gaps[len(gaps)/2] > 2*retryPeriod || gaps[len(gaps)-1] >= renewDeadline {
		t.Errorf("renewal intervals %v, want each about the elector's RetryPeriod %s", gaps, retryPeriod)
	}
	t.Logf("renewal intervals (sorted): %v", gaps)

	a.stop() // ReleaseOnCancel: holderIdentity "", leaseTransitions kept
	rel := s.WaitEvents(t, 10*time.Second, lock, 1, audit.EventRelease)[0]
	if rel.Holder != g.Holder || tokenOf(rel.Token) != 0 || rel.Inferred {
		t.Fatalf("release = %+v, want %s's token 0, seen rather than inferred", rel, g.Holder)
	}
	if l, _ := s.Lock(t, lock); l.State != audit.StateFree {
		t.Fatalf("lock state after release = %s, want free", l.State)
	}
	ts := s.Tenures(t, lock)
	if len(ts) != 1 || ts[0].End != audit.EndReleased || ts[0].Renewals != int64(len(s.Events(t, lock, audit.EventRenew))) {
		t.Fatalf("tenures = %+v, want one, released, counting every renewal event", ts)
	}
	s.NoFindings(t, lock, audit.FindingLeaseExpired, audit.FindingLateRenewal, audit.FindingUnfencedLock)

	// Every write to the Lease became exactly one observation, in order; a
	// renewal keeps no resourceVersion, every other observation its write's.
	rvs := writes.until(t, func(l *coordinationv1.Lease) bool { return deref(l.Spec.HolderIdentity) == "" })
	obs := s.Obs(lock)
	var got, want []string
	for i, ob := range obs {
		got = append(got, ob.Position)
		if i < len(rvs) && ob.Kind != audit.EventRenew {
			want = append(want, rvs[i])
		} else {
			want = append(want, "")
		}
	}
	if len(obs) != len(rvs) || !slices.Equal(got, want) {
		t.Fatalf("observation positions %q, want the Lease's write resourceVersions %v, renewals' left empty", got, rvs)
	}
}

// leaseWrites follows one Lease with a plain watch and keeps the
// resourceVersion of every write.
type leaseWrites struct {
	mu   sync.Mutex
	rvs  []string
	last *coordinationv1.Lease
}

func watchLease(t *testing.T, ns, name, fromRV string) *leaseWrites {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := admin(t).CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: fromRV, FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	lw := &leaseWrites{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type != watch.Bookmark && ev.Type != watch.Error {
				lw.mu.Lock()
				lw.rvs = append(lw.rvs, l.ResourceVersion)
				lw.last = l
				lw.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		w.Stop()
		<-done
	})
	return lw
}

// until waits for a write satisfying done and returns the resourceVersions
// of every write up to it.
func (lw *leaseWrites) until(t *testing.T, done func(*coordinationv1.Lease) bool) []string {
	t.Helper()
	var out []string
	collectortest.Eventually(t, 10*time.Second, "the test's watch to see the Lease's last write", func() bool {
		lw.mu.Lock()
		defer lw.mu.Unlock()
		out = slices.Clone(lw.rvs)
		return lw.last != nil && done(lw.last)
	})
	return out
}

func TestStoppedWithoutReleaseExpires(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	ns := newNamespace(t)
	lock := ns + "/leader"
	s := newSink(t)
	runCollector(t, s, Config{Namespaces: []string{ns}})

	a := startElector(t, ns, "leader", "node-a", electorConfig{})
	a.waitLeading(t, 10*time.Second)
	s.WaitEvents(t, 10*time.Second, lock, 2, audit.EventRenew)
	a.stop() // no ReleaseOnCancel: it just stops renewing; nobody writes the expiry

	exp := s.WaitEvents(t, 10*time.Second, lock, 1, audit.EventExpire)[0]
	l := getLease(t, ns, "leader")
	if deref(l.Spec.HolderIdentity) != "node-a" {
		t.Fatalf("Lease holder = %q, want node-a still: the expiry is only inferred", deref(l.Spec.HolderIdentity))
	}
	wantAt := l.Spec.RenewTime.Add(leaseDuration)
	if !exp.Inferred || exp.Holder != "node-a" || tokenOf(exp.Token) != 0 || !exp.At.Equal(wantAt) {
		t.Fatalf("expire = %+v, want inferred, node-a token 0, at the last renewTime + 2s = %s", exp, wantAt)
	}
	f := s.Findings(t, lock, audit.FindingLeaseExpired)
	if len(f) != 1 || !slices.Equal(f[0].Holders, []string{"node-a"}) {
		t.Fatalf("lease_expired findings = %+v, want one for node-a", f)
	}
	if lk, _ := s.Lock(t, lock); lk.State != audit.StateExpired {
		t.Fatalf("lock state = %s, want expired", lk.State)
	}
	if n := len(s.Obs(lock, audit.EventRelease, audit.EventExpire)); n != 0 {
		t.Fatalf("%d end observations, want none: the collector saw no end, the tracker inferred it", n)
	}
}

// TestFailoverTokensIncrease hands the Lease from elector to elector, once by
// release and once by expiry, and checks the grants follow the electors' own
// view, with leaseTransitions rising by one each time.
func TestFailoverTokensIncrease(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	ns := newNamespace(t)
	lock := ns + "/leader"
	s := newSink(t)
	runCollector(t, s, Config{Namespaces: []string{ns}})

	var log electionLog
	a := startElector(t, ns, "leader", "a", electorConfig{Release: true, Log: &log})
	a.waitLeading(t, 10*time.Second)
	b := startElector(t, ns, "leader", "b", electorConfig{Release: true, Log: &log})
	c := startElector(t, ns, "leader", "c", electorConfig{Log: &log})

	a.stop() // released: b or c takes over at its next retry
	collectortest.Eventually(t, 10*time.Second, "a second leader", func() bool { return len(log.all()) == 2 })
	second, third := b, c
	if log.all()[1].identity == "c" {
		second, third = c, b
	}
	second.stop() // c stops without release (b takes over after expiry), b releases (c at once)
	third.waitLeading(t, 10*time.Second)

	grants := s.WaitEvents(t, 10*time.Second, lock, 3, audit.EventGrant)
	acqs := log.all()
	if len(grants) != 3 || len(acqs) != 3 {
		t.Fatalf("%d grants, %d acquisitions, want 3 of each", len(grants), len(acqs))
	}
	for i, g := range grants {
		if g.Holder != acqs[i].identity || acqs[i].holder != acqs[i].identity || tokenOf(g.Token) != acqs[i].token || acqs[i].token != int64(i) {
			t.Errorf("grant %d = %s token %d, want %s with the token it read, %d (= %d)", i, g.Holder, tokenOf(g.Token), acqs[i].identity, acqs[i].token, i)
		}
		if g.Inferred {
			t.Errorf("grant %d inferred, want seen", i)
		}
	}
	ts := s.Tenures(t, lock)
	if len(ts) != 3 || ts[0].End != audit.EndReleased || ts[1].Held() || !ts[2].Held() {
		t.Fatalf("tenures = %+v, want a released, %s ended, %s holding", ts, second.identity, third.identity)
	}
	s.NoFindings(t, lock, fencingFindings...)
}

// TestSharedIdentityTokenReuse: two processes with one identity. The second
// takes the Lease over as its own, and client-go keeps leaseTransitions, so
// two tenures share a token.
func TestSharedIdentityTokenReuse(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	ns := newNamespace(t)
	lock := ns + "/leader"
	s := newSink(t)
	runCollector(t, s, Config{Namespaces: []string{ns}})

	first := startElector(t, ns, "leader", "app-0", electorConfig{})
	first.waitLeading(t, 10*time.Second)
	s.WaitEvents(t, 10*time.Second, lock, 1, audit.EventGrant)
	first.stop()
	s.WaitEvents(t, 10*time.Second, lock, 1, audit.EventExpire)

	second := startElector(t, ns, "leader", "app-0", electorConfig{})
	second.waitLeading(t, 10*time.Second)
	grants := s.WaitEvents(t, 10*time.Second, lock, 2, audit.EventGrant)
	if g := grants[1]; g.Holder != "app-0" || tokenOf(g.Token) != 0 || g.Inferred {
		t.Fatalf("second grant = %+v, want app-0 again with token 0, seen", g)
	}
	f := s.WaitFindings(t, 5*time.Second, lock, audit.FindingTokenReuse)
	if len(f) != 1 || !slices.Equal(f[0].Tokens, []int64{0}) || f[0].Severity != audit.SeverityCritical {
		t.Fatalf("token_reuse findings = %+v, want one critical for token 0", f)
	}
	if l := getLease(t, ns, "leader"); deref(l.Spec.LeaseTransitions) != 0 {
		t.Fatalf("leaseTransitions = %d, want 0: client-go does not count a re-acquire by the same identity", deref(l.Spec.LeaseTransitions))
	}
	ts := s.Tenures(t, lock)
	if len(ts) != 2 || ts[0].End != audit.EndExpired || !ts[1].Held() {
		t.Fatalf("tenures = %+v, want the first expired and the second held", ts)
	}
}

func TestTokenRegressionByHand(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	ns := newNamespace(t)
	lock := ns + "/leader"
	s := newSink(t)
	runCollector(t, s, Config{Namespaces: []string{ns}})

	for _, id := range []string{"a", "b"} {
		e := startElector(t, ns, "leader", id, electorConfig{Release: true})
		e.waitLeading(t, 10*time.Second)
		e.stop()
	}
	s.WaitEvents(t, 10*time.Second, lock, 2, audit.EventRelease)

	// Nothing on the server keeps leaseTransitions from going backwards.
	updateLease(t, ns, "leader", func(l *coordinationv1.Lease) {
		l.Spec.HolderIdentity, l.Spec.LeaseTransitions = ptr("intruder"), ptr[int32](0)
		l.Spec.AcquireTime, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = now(), now(), ptr[int32](10)
	})
	f := s.WaitFindings(t, 10*time.Second, lock, audit.FindingTokenRegression)
	if len(f) != 1 || !slices.Equal(f[0].Tokens, []int64{1, 0}) || !slices.Equal(f[0].Holders, []string{"b", "intruder"}) {
		t.Fatalf("token_regression findings = %+v, want tokens [1 0], holders [b intruder]", f)
	}
	grants := s.Events(t, lock, audit.EventGrant)
	if g := grants[len(grants)-1]; g.Holder != "intruder" || tokenOf(g.Token) != 0 {
		t.Fatalf("last grant = %+v, want intruder with token 0", g)
	}
	s.NoFindings(t, lock, audit.FindingOverlap)
}

// TestHandEditedHolderOverlaps hands a held Lease to a new holder by hand
// (kubectl edit, a controller that ignores the lease) while the elector's
// lease is still valid: both may believe they hold it, so the grant comes
// with an overlap finding, and the elector's tenure ends as superseded rather
// than expired.
func TestHandEditedHolderOverlaps(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	ns := newNamespace(t)
	lock := ns + "/leader"
	s := newSink(t)
	runCollector(t, s, Config{Namespaces: []string{ns}})

	// A long lease, so the edit lands well inside it however loaded the
	// machine is.
	const lease = 10 * time.Second
	a := startElector(t, ns, "leader", "node-a", electorConfig{LeaseDuration: lease})
	a.waitLeading(t, 10*time.Second)
	s.WaitEvents(t, 10*time.Second, lock, 1, audit.EventRenew)

	// Nothing on the server checks that the holder's lease ran out first.
	edited := updateLease(t, ns, "leader", func(l *coordinationv1.Lease) {
		l.Spec.HolderIdentity = ptr("intruder")
		l.Spec.LeaseTransitions = ptr(deref(l.Spec.LeaseTransitions) + 1)
		l.Spec.AcquireTime, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = now(), now(), ptr[int32](10)
	})
	f := s.WaitFindings(t, 10*time.Second, lock, audit.FindingOverlap)
	// The elector finds the Lease held by another with a valid lease, writes
	// nothing more and stops leading; stopping it now keeps it from taking
	// the Lease back once the intruder's lease runs out.
	a.stop()

	if len(f) != 1 || f[0].Severity != audit.SeverityCritical || !slices.Equal(f[0].Holders, []string{"node-a", "intruder"}) || !slices.Equal(f[0].Tokens, []int64{0, 1}) {
		t.Fatalf("overlap findings = %+v, want one critical, holders [node-a intruder], tokens [0 1]", f)
	}
	if left := f[0].Until.Sub(f[0].At); left <= 0 || left > lease {
		t.Errorf("overlap lasts %s (%s to %s), want the rest of node-a's 10s lease", left, f[0].At, f[0].Until)
	}
	grants := s.Events(t, lock, audit.EventGrant)
	g := grants[len(grants)-1]
	if len(grants) != 2 || g.Holder != "intruder" || tokenOf(g.Token) != 1 || g.Position != edited.ResourceVersion || g.Detail["superseded"] != "node-a" {
		t.Fatalf("grants = %+v, want node-a's then intruder's with token 1 at the edit's resourceVersion %s, superseding node-a", grants, edited.ResourceVersion)
	}
	if !f[0].At.Equal(g.At) {
		t.Errorf("overlap starts at %s, want the intruder's grant at %s", f[0].At, g.At)
	}
	ts := s.Tenures(t, lock)
	if len(ts) != 2 || ts[0].Holder != "node-a" || ts[0].End != audit.EndSuperseded || !ts[0].EndedAt.Equal(g.At) ||
		!ts[0].ExpiresAt.Equal(f[0].Until) || ts[1].Holder != "intruder" || !ts[1].Held() {
		t.Fatalf("tenures = %+v, want node-a's superseded at the grant with its lease running to the overlap's end, then intruder's held", ts)
	}
	if n := len(s.Events(t, lock, audit.EventExpire, audit.EventRelease)); n != 0 {
		t.Errorf("%d expire or release events, want none: node-a's tenure was superseded", n)
	}
	s.NoFindings(t, lock, audit.FindingLeaseExpired, audit.FindingTokenRegression, audit.FindingTokenReuse, audit.FindingTokenSkip)
}

func TestLeaseDeletedWhileHeld(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	ns := newNamespace(t)
	lock := ns + "/leader"
	s := newSink(t)
	runCollector(t, s, Config{Namespaces: []string{ns}})

	a := startElector(t, ns, "leader", "a", electorConfig{})
	a.waitLeading(t, 10*time.Second)
	s.WaitEvents(t, 10*time.Second, lock, 1, audit.EventGrant)
	if err := admin(t).CoordinationV1().Leases(ns).Delete(context.Background(), "leader", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	rel := s.WaitEvents(t, 10*time.Second, lock, 1, audit.EventRelease)[0]
	if rel.Holder != "a" || tokenOf(rel.Token) != 0 || rel.Detail["deleted"] != true {
		t.Fatalf("release = %+v, want a's token 0 with deleted=true", rel)
	}
	f := s.WaitFindings(t, 5*time.Second, lock, audit.FindingLockDeleted)
	if len(f) != 1 || !slices.Equal(f[0].Holders, []string{"a"}) {
		t.Fatalf("lock_deleted findings = %+v, want one naming a", f)
	}
	if ob := s.Obs(lock, audit.EventRelease); len(ob) != 1 || !ob[0].Deleted {
		t.Fatalf("release observations = %+v, want one with Deleted", ob)
	}

	// The elector still believes it leads: its next renewal finds the Lease
	// gone and creates it again, and leaseTransitions starts over at 0.
	grants := s.WaitEvents(t, 10*time.Second, lock, 2, audit.EventGrant)
	if g := grants[1]; g.Holder != "a" || tokenOf(g.Token) != 0 {
		t.Fatalf("grant after the re-create = %+v, want a with token 0", g)
	}
	s.WaitFindings(t, 5*time.Second, lock, audit.FindingTokenReuse)
}

// TestRestartResumesNothingLostOrRepeated stops and restarts the collector
// while electors in two namespaces keep handing Leases over, with watches
// that the apiserver ends every few seconds, and checks every acquisition
// the electors made was recorded as exactly one grant and one release.
func TestRestartResumesNothingLostOrRepeated(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	nsA, nsB, other := newNamespace(t), newNamespace(t), newNamespace(t)
	s := newSink(t)
	cfg := Config{Namespaces: []string{nsA, nsB}}
	opts := []Option{WithWatchTimeout(2 * time.Second)}
	cr := runCollector(t, s, cfg, opts...)
	if c := s.Inputs()[0].Cursor; !strings.Contains(c, nsA+"=") || !strings.Contains(c, nsB+"=") {
		t.Fatalf("cursor %q, want a resourceVersion for each of %s and %s", c, nsA, nsB)
	}

	// Leases long enough that the tracker's clock never expires one while
	// the collector is stopped: every handover here is a release.
	var log electionLog
	stop := make(chan struct{})
	var wg sync.WaitGroup
	worker := func(id int, ns, name string) {
		defer wg.Done()
		for n := 0; ; n++ {
			e := startElector(t, ns, name, fmt.Sprintf("w%d-%d", id, n), electorConfig{Release: true, LeaseDuration: 10 * time.Second, Log: &log})
			select {
			case <-e.leading:
				time.Sleep(time.Duration(50+rand.IntN(100)) * time.Millisecond)
				e.stop()
			case <-stop:
				e.stop()
				return
			}
		}
	}
	for i, l := range []struct{ ns, name string }{{nsA, "a"}, {nsA, "a"}, {nsB, "b"}, {nsB, "b"}, {other, "o"}} {
		wg.Add(1)
		go worker(i, l.ns, l.name)
	}
	count := func() int { return len(log.all()) }
	for round := 1; round <= 3; round++ {
		n := count()
		collectortest.Eventually(t, 20*time.Second, "electors to make progress", func() bool { return count() >= n+8 })
		cr.Stop(t)
		n = count()
		collectortest.Eventually(t, 20*time.Second, "electors to make progress while the collector is stopped", func() bool { return count() >= n+6 })
		cr = runCollector(t, s, cfg, opts...)
	}
	n := count()
	collectortest.Eventually(t, 20*time.Second, "electors to make progress", func() bool { return count() >= n+8 })
	close(stop)
	wg.Wait()

	acqs := log.all()
	want := map[string][]acquisition{}
	for _, a := range acqs {
		want[a.lease] = append(want[a.lease], a)
	}
	for _, lock := range []string{nsA + "/a", nsB + "/b"} {
		// An elector stopped while its acquiring update was in flight sees
		// "context canceled" and never learns the apiserver applied it: the
		// Lease then changed hands without a log entry, and is still held.
		released := len(want[lock])
		ns, name, _ := strings.Cut(lock, "/")
		if l := getLease(t, ns, name); deref(l.Spec.HolderIdentity) != "" {
			want[lock] = append(want[lock], acquisition{lease: lock, identity: *l.Spec.HolderIdentity, token: int64(deref(l.Spec.LeaseTransitions))})
			t.Logf("%s: still held by %s, an acquisition its elector did not see", lock, *l.Spec.HolderIdentity)
		}
		s.WaitEvents(t, 10*time.Second, lock, released, audit.EventRelease)
		s.WaitEvents(t, 10*time.Second, lock, len(want[lock]), audit.EventGrant)
		grants := s.Events(t, lock, audit.EventGrant)
		if len(grants) != len(want[lock]) {
			t.Errorf("%s: %d grants, want one per acquisition: %d", lock, len(grants), len(want[lock]))
		}
		for i := range min(len(grants), len(want[lock])) {
			g, a := grants[i], want[lock][i]
			if g.Holder != a.identity || tokenOf(g.Token) != a.token || a.token != int64(i) || g.Inferred {
				t.Errorf("%s grant %d = %s token %d (inferred %v), want %s token %d as its elector read it", lock, i, g.Holder, tokenOf(g.Token), g.Inferred, a.identity, a.token)
			}
		}
		if ends := s.Events(t, lock, audit.EventRelease, audit.EventExpire); len(ends) != released || slices.ContainsFunc(ends, func(e audit.Event) bool { return e.Kind != audit.EventRelease }) {
			t.Errorf("%s: %d ends, want %d releases", lock, len(ends), released)
		}
		s.NoFindings(t, lock, fencingFindings...)
		s.NoFindings(t, lock, audit.FindingBlindWindow, audit.FindingLeaseExpired)
	}
	if _, ok := s.Lock(t, other+"/o"); ok {
		t.Errorf("lock %s/o recorded: namespace %s is not configured", other, other)
	}
	for i, in := range s.Inputs()[1:] {
		if in.Snapshot || in.Blind != nil {
			t.Fatalf("input %d after the first = %+v, want plain watch inputs: nothing was lost", i+1, in)
		}
	}
	t.Logf("%d acquisitions across 3 restarts", len(acqs))
}

func TestHeartbeatClassification(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	ns := newNamespace(t)
	node := fmt.Sprintf("node-%05d", rand.IntN(100000))
	heartbeat := func() coordinationv1.LeaseSpec {
		return coordinationv1.LeaseSpec{HolderIdentity: ptr(node), LeaseDurationSeconds: ptr[int32](40), RenewTime: now()}
	}
	// A node lease that exists before the collector starts, as kubelet's
	// would, and an identity lease as a kube-apiserver keeps one. The test
	// makes its own: the real apiserver's can be missing for a while when
	// another test stops a second apiserver on the same host, which shares
	// its name and deletes it on the way out.
	createLease(t, NamespaceNodeLease, node, heartbeat())
	identityName := fmt.Sprintf("%s%05d", apiserverIdentityPrefix, rand.IntN(100000))
	identity := namespaceKubeSystem + "/" + identityName
	ids := admin(t).CoordinationV1().Leases(namespaceKubeSystem)
	if _, err := ids.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: identityName, Labels: map[string]string{apiserverIdentityLabel: "kube-apiserver"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr(identityName), LeaseDurationSeconds: ptr[int32](3600), RenewTime: now()},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ids.Delete(context.Background(), identityName, metav1.DeleteOptions{}) })
	s := newSink(t)
	runCollector(t, s, Config{}) // every namespace, one watch
	first := s.Inputs()[0]
	if strings.Contains(first.Cursor, "=") {
		t.Errorf("cursor %q, want a bare resourceVersion for an all-namespaces watch", first.Cursor)
	}
	// Every identity lease, the test's and the apiservers' own, a heartbeat.
	classes := map[string]audit.Class{}
	for _, ob := range first.Observations {
		classes[ob.Lock.Name] = ob.Class
		if strings.HasPrefix(ob.Lock.Name, namespaceKubeSystem+"/"+apiserverIdentityPrefix) && ob.Class != audit.ClassHeartbeat {
			t.Errorf("snapshot class of %s = %s, want heartbeat", ob.Lock.Name, ob.Class)
		}
	}
	if classes[NamespaceNodeLease+"/"+node] != audit.ClassHeartbeat || classes[identity] != audit.ClassHeartbeat {
		t.Fatalf("snapshot classes %v, want heartbeat for %s and %s", classes, node, identity)
	}

	// A node renewing, and a lock without leaseTransitions next to it.
	nodeLock := NamespaceNodeLease + "/" + node
	updateLease(t, NamespaceNodeLease, node, func(l *coordinationv1.Lease) { l.Spec.RenewTime = now() })
	s.WaitEvents(t, 10*time.Second, nodeLock, 1, audit.EventRenew)
	createLease(t, ns, "plain", coordinationv1.LeaseSpec{HolderIdentity: ptr("worker"), LeaseDurationSeconds: ptr[int32](10), RenewTime: now()})
	s.WaitFindings(t, 10*time.Second, ns+"/plain", audit.FindingUnfencedLock)

	for _, name := range []string{nodeLock, identity} {
		l, ok := s.Lock(t, name)
		if !ok || l.Class != audit.ClassHeartbeat {
			t.Errorf("lock %s = %+v, want class heartbeat", name, l)
		}
		s.NoFindings(t, name, audit.FindingUnfencedLock)
	}
	if l, _ := s.Lock(t, ns+"/plain"); l.Class != audit.ClassLock {
		t.Errorf("lock %s/plain class %s, want lock", ns, l.Class)
	}
	if evs := s.Events(t, nodeLock); len(evs) != 2 || evs[0].Kind != audit.EventObserved || evs[1].Kind != audit.EventRenew || evs[1].Token != nil {
		t.Errorf("events of %s = %+v, want observed then renew, without a token", nodeLock, evs)
	}
}

// A collector outage longer than the lease, while the holder keeps renewing,
// is not an expiry: the tracker's clock waits until the resumed collector has
// replayed the renewals and says it is caught up.
func TestOutageLongerThanLeaseIsNotAnExpiry(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	ns := newNamespace(t)
	lock := ns + "/leader"
	s := newSink(t)
	cfg := Config{Namespaces: []string{ns}}
	cr := runCollector(t, s, cfg)
	e := startElector(t, ns, "leader", "holder-1", electorConfig{Release: true, LeaseDuration: 2 * time.Second})
	e.waitLeading(t, 20*time.Second)
	s.WaitEvents(t, 10*time.Second, lock, 2, audit.EventRenew)

	cr.Stop(t)
	stopped := time.Now()
	collectortest.Eventually(t, 20*time.Second, "the elector to renew for more than two leases while the collector is stopped", func() bool {
		rt := getLease(t, ns, "leader").Spec.RenewTime
		return rt != nil && rt.Time.Sub(stopped) > 5*time.Second
	})
	before := len(s.Events(t, lock, audit.EventRenew))
	runCollector(t, s, cfg)
	s.WaitEvents(t, 20*time.Second, lock, before+10, audit.EventRenew)

	s.NoFindings(t, lock, audit.FindingLeaseExpired, audit.FindingTokenReuse, audit.FindingOverlap)
	if ts := s.Tenures(t, lock); len(ts) != 1 || !ts[0].Held() {
		t.Fatalf("tenures = %+v, want the one tenure, still held", ts)
	}
}

// TestSteadyRenewalsShareInputs renews Leases one after another, as a
// cluster's heartbeats trickle in, and checks that the collector records them
// in few inputs (each one a commit) rather than one input per renewal, and
// that every renewal is recorded once.
func TestSteadyRenewalsShareInputs(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	ns := newNamespace(t)
	const leases = 16
	for i := range leases {
		createLease(t, ns, fmt.Sprintf("node-%d", i), coordinationv1.LeaseSpec{
			HolderIdentity: ptr(fmt.Sprintf("node-%d", i)), LeaseDurationSeconds: ptr[int32](40), RenewTime: now(),
		})
	}
	s := newSink(t)
	runCollector(t, s, Config{Namespaces: []string{ns}})
	before := len(s.Inputs())

	// About 1.5 s of renewals, each a Get and an Update, by one writer per
	// Lease at once: many per batch window even when a busy apiserver
	// takes a hundred milliseconds a write.
	start := time.Now()
	var wrote atomic.Int64
	var wg sync.WaitGroup
	cli := admin(t).CoordinationV1().Leases(ns)
	errs := make(chan error, leases)
	for i := range leases {
		wg.Go(func() {
			ctx := context.Background()
			for time.Since(start) < 1500*time.Millisecond {
				l, err := cli.Get(ctx, fmt.Sprintf("node-%d", i), metav1.GetOptions{})
				if err == nil {
					l.Spec.RenewTime = now()
					_, err = cli.Update(ctx, l, metav1.UpdateOptions{})
				}
				if err != nil {
					errs <- err
					return
				}
				wrote.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("renew a Lease: %v", err)
	}
	writes := int(wrote.Load())
	spent := time.Since(start)
	collectortest.Eventually(t, 10*time.Second, "every renewal recorded", func() bool { return len(s.Obs("", audit.EventRenew)) >= writes })

	var inputs, renewals int
	for _, in := range s.Inputs()[before:] {
		if len(in.Observations) > 0 {
			inputs++
		}
		for _, ob := range in.Observations {
			if ob.Kind == audit.EventRenew {
				renewals++
			}
		}
	}
	if renewals != writes {
		t.Fatalf("%d renewals recorded, want the %d made", renewals, writes)
	}
	// One input per batch window while they keep coming, the first one at
	// once, and one for the stragglers (more if delivery lags a window).
	if most := int(spent/DefaultBatchWindow) + 3; inputs > most || writes < 2*most {
		t.Fatalf("%d renewals in %s recorded in %d inputs, want at most %d (one per %s), and at least twice that many renewals",
			writes, spent.Round(time.Millisecond), inputs, most, DefaultBatchWindow)
	}
}

// withSnapshotChunk sets how many held Leases a first snapshot records an
// input.
func withSnapshotChunk(n int) Option { return func(c *Collector) { c.snapshotChunk = n } }

// withListPage sets how many Leases a page of a list brings.
func withListPage(n int) Option { return func(c *Collector) { c.listPage = n } }

// pagedSink is a sink that notes, at each input, how many pages of Lease
// lists its collector's client had asked for by then.
type pagedSink struct {
	*collectortest.Sink
	pages   atomic.Int32
	mu      sync.Mutex
	pagesAt []int32 // per input, in order
}

func (s *pagedSink) Record(ctx context.Context, in audit.Input) error {
	s.mu.Lock()
	s.pagesAt = append(s.pagesAt, s.pages.Load())
	s.mu.Unlock()
	return s.Sink.Record(ctx, in)
}

// config is the apiserver's client configuration, counting the pages of
// Lease lists asked for.
func (s *pagedSink) config() *rest.Config {
	cfg := rest.CopyConfig(apiserver.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if q := req.URL.Query(); req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/leases") && q.Get("watch") == "" {
				s.pages.Add(1)
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestFirstSnapshotInChunks: a first start records its held Leases a chunk
// an input, in name order, each once and as observed, as the list's pages
// bring them, and only the last input carries the cursor and vouches for
// the present: at 130,000 Leases one input held every Lease's events and
// rows in memory at once, and a list read to its end before the first
// chunk held every Lease's observation.
func TestFirstSnapshotInChunks(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	ns := newNamespace(t)
	for i := range 5 {
		name := fmt.Sprintf("node-%d", i)
		createLease(t, ns, name, coordinationv1.LeaseSpec{HolderIdentity: ptr(name), LeaseDurationSeconds: ptr[int32](40), RenewTime: now()})
	}
	createLease(t, ns, "free", coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr[int32](40)})
	s := &pagedSink{Sink: newSink(t)}
	// Pages of two: free and node-0, node-1 and node-2, node-3 and node-4.
	runCollector(t, s, Config{Namespaces: []string{ns}}, withSnapshotChunk(2), withListPage(2), WithRESTConfig(s.config()))

	ins := s.Inputs()
	if len(ins) < 3 {
		t.Fatalf("%d inputs, want the 5 held Leases in 3", len(ins))
	}
	var names []string
	for i, in := range ins[:3] {
		last := i == 2
		if (in.Cursor != "") != last || in.Live != last || in.Snapshot || in.Blind != nil || len(in.Observations) != []int{2, 2, 1}[i] {
			t.Errorf("input %d: cursor %q, live %v, snapshot %v, %d observations; want 2, 2, then 1 observations, only the last with a cursor and live, none a snapshot",
				i, in.Cursor, in.Live, in.Snapshot, len(in.Observations))
		}
		for _, ob := range in.Observations {
			names = append(names, strings.TrimPrefix(ob.Lock.Name, ns+"/"))
			if ob.Kind != audit.EventObserved || ob.Inferred {
				t.Errorf("input %d: %s %s (inferred %v), want observed", i, ob.Lock.Name, ob.Kind, ob.Inferred)
			}
		}
	}
	if want := []string{"node-0", "node-1", "node-2", "node-3", "node-4"}; !slices.Equal(names, want) {
		t.Errorf("snapshot observed %v, want %v in that order", names, want)
	}
	s.mu.Lock()
	pagesAt := slices.Clone(s.pagesAt[:3])
	s.mu.Unlock()
	if want := []int32{2, 3, 3}; !slices.Equal(pagesAt, want) {
		t.Errorf("the snapshot's inputs came after %v pages of the list, want %v: each chunk recorded once its page was read", pagesAt, want)
	}
	for i := range 5 {
		lock := fmt.Sprintf("%s/node-%d", ns, i)
		if evs := s.Events(t, lock); len(evs) != 1 || evs[0].Kind != audit.EventObserved {
			t.Errorf("events of %s = %+v, want one observed", lock, evs)
		}
		if l, _ := s.Lock(t, lock); l.State != audit.StateHeld {
			t.Errorf("lock %s = %s, want held", lock, l.State)
		}
	}
}
