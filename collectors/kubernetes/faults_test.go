package kubernetes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
	"github.com/leasewatch/leasewatch/collectors/faulttest"
	"github.com/leasewatch/leasewatch/collectors/kubernetes/kubetest"
	"github.com/leasewatch/leasewatch/deploy/testproc"
)

// Fault-test timings: electors' leases a little longer than the package's
// (a busy machine must not make them lose their Leases on their own), a
// freeze past both a lease and the collector's silence limit, and the
// Runner's backoff cap.
const (
	faultLease      = 4 * time.Second
	faultFreeze     = apiserverSilence + time.Second
	faultBackoffCap = 2 * time.Second
	// faultSlack is what catching up may take beyond the backoff: the
	// collector noticing the silence, resuming (or listing) and storing what
	// it replays, on a busy 2-core machine under -race.
	faultSlack = 6 * time.Second
)

// TestBackendFaults stops and restarts the kube-apiserver the collector
// watches through, and freezes it with SIGSTOP for longer than a lease,
// while electors hand a Lease over through a second apiserver on the same
// etcd, as in a highly available control plane: the changes happen while
// the collector cannot see them. After each fault the collector must have
// caught up within its capped backoff, recorded every acquisition once with
// its token (inferred only after a blind window that covers the outage),
// and show exactly the Lease's holder; the renewals it could not see must
// not make the lease look expired. Across the cycles neither goroutines nor
// the heap may grow. LEASEWATCH_FAULT_CYCLES=50 runs the long version.
func TestBackendFaults(t *testing.T) {
	needAPIServer(t)
	peer := startPeerApiserver(t)
	ns := newNamespace(t)
	lease := ns + "/f"
	s := newSink(t)
	c, err := New(Config{Name: testSource, Namespaces: []string{ns}}, collectortest.Logger(t, testSource), WithRESTConfig(peer.Config))
	if err != nil {
		t.Fatal(err)
	}
	faulttest.Supervise(t, s, c, collectors.RunnerConfig{
		Logger: collectortest.Logger(t, testSource), MinBackoff: 100 * time.Millisecond, MaxBackoff: faultBackoffCap,
	})

	elog := &faultLog{electionLog: &electionLog{}}
	// The heap measured includes the package's in-process etcd, whose index
	// grows with every renewal the electors write until the apiserver
	// compacts it (every 5 minutes), and the inputs the sink keeps.
	usage := &faulttest.Usage{MaxGoroutines: 10, MaxHeap: 8 << 20}
	cycles := faulttest.Cycles(t, 1)
	for cycle := 1; cycle <= cycles; cycle++ {
		// Stop and restart: a releases while the collector's apiserver is
		// down, and b takes over.
		a := startElector(t, ns, "f", fmt.Sprintf("a%d", cycle), electorConfig{Release: true, LeaseDuration: faultLease, Log: elog.electionLog})
		a.waitLeading(t, 10*time.Second)
		b := startElector(t, ns, "f", fmt.Sprintf("b%d", cycle), electorConfig{Release: true, LeaseDuration: faultLease, Log: elog.electionLog})
		waitHolder(t, s, lease, a.identity, 10*time.Second)
		peer.stop()
		down := time.Now()
		a.stop()
		b.waitLeading(t, 10*time.Second)
		back := time.Now()
		peer.restart()
		checkFault(t, s, ns, "f", elog, down, back, time.Now())

		// Freeze past the lease: b hands over to c meanwhile, and c renews
		// all through it.
		cc := startElector(t, ns, "f", fmt.Sprintf("c%d", cycle), electorConfig{Release: true, LeaseDuration: faultLease, Log: elog.electionLog})
		faulttest.Freeze(t, peer.Pid())
		down = time.Now()
		b.stop()
		cc.waitLeading(t, 10*time.Second)
		time.Sleep(time.Until(down.Add(faultFreeze))) // the freeze itself is what is under test
		back = time.Now()
		faulttest.Thaw(t, peer.Pid())
		checkFault(t, s, ns, "f", elog, down, back, time.Now())
		cc.stop()
		waitHolder(t, s, lease, "", 10*time.Second)
		usage.Measure(t, cycle)
	}
	usage.Report(t)
	s.NoFindings(t, lease, audit.FindingOverlap, audit.FindingTokenRegression, audit.FindingTokenReuse)
}

// faultLog is the electors' acquisitions, and how many of them checkFault
// has checked.
type faultLog struct {
	*electionLog
	checked int
}

// peerApiserver is a second kube-apiserver on the shared apiserver's etcd,
// for the collector to watch through while the test stops and freezes it.
type peerApiserver struct {
	*kubetest.Apiserver
	t       *testing.T
	running bool
}

func startPeerApiserver(t *testing.T) *peerApiserver {
	t.Helper()
	dir := t.TempDir()
	logFile, err := os.Create(filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a, err := apiserver.StartPeer(ctx, filepath.Join(dir, "peer"), logFile)
	if err != nil {
		logFile.Close()
		t.Fatalf("peer kube-apiserver: %v\n%s", err, testproc.TailFile(logFile.Name(), 30))
	}
	p := &peerApiserver{Apiserver: a, t: t, running: true}
	t.Cleanup(func() {
		if p.running {
			faulttest.Thaw(t, p.Pid()) // in case the test failed during a freeze
			p.StopProcess()
		}
		logFile.Close()
	})
	return p
}

func (p *peerApiserver) stop() {
	p.StopProcess()
	p.running = false
}

func (p *peerApiserver) restart() {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := p.Restart(ctx); err != nil {
		p.t.Fatal(err)
	}
	p.running = true
}

// waitHolder polls the store until lock is held by holder (free for "").
func waitHolder(t *testing.T, s *collectortest.Sink, lock, holder string, timeout time.Duration) {
	t.Helper()
	if holder != "" {
		s.WaitHeld(t, timeout, lock, holder)
		return
	}
	collectortest.Eventually(t, timeout, lock+" free", func() bool {
		l, ok := s.Lock(t, lock)
		return !ok || l.State != audit.StateHeld
	})
}

// checkFault checks the collector after an outage of its apiserver, which
// was certainly out of reach from down to back and answered again at ready:
// it shows the Lease's holder within the backoff cap of ready, every
// acquisition so far is one grant with its token (inferred only at the end
// of a blind window, which must cover the outage; none at all only for a
// tenure that a blind window hid whole), and nothing looks expired.
func checkFault(t *testing.T, s *collectortest.Sink, ns, name string, elog *faultLog, down, back, ready time.Time) {
	t.Helper()
	lock := ns + "/" + name
	holder := deref(getLease(t, ns, name).Spec.HolderIdentity)
	waitHolder(t, s, lock, holder, faultBackoffCap+faultSlack+10*time.Second)
	d := faulttest.Reconnected(t, "kubernetes", ready, time.Now(), faultBackoffCap+faultSlack)

	var blinds []string
	var blindEnds []time.Time // every blind window's end: where the tracker infers what it missed
	var blindFrom []time.Time // and its start
	for _, in := range s.Inputs() {
		b := in.Blind
		if b == nil {
			continue
		}
		blindEnds = append(blindEnds, b.To)
		blindFrom = append(blindFrom, b.From)
		if b.To.After(down) {
			if b.From.After(down) || b.To.Before(back) {
				t.Fatalf("blind window %s .. %s does not contain the outage %s .. %s", b.From.Format(time.StampMicro), b.To.Format(time.StampMicro), down.Format(time.StampMicro), back.Format(time.StampMicro))
			}
			blinds = append(blinds, b.Reason)
		}
	}
	atBlindEnd := func(at time.Time) bool {
		for _, to := range blindEnds {
			if at.Equal(to) {
				return true
			}
		}
		return false
	}
	// An expiry inferred for a lease that ran out unseen is placed at the
	// lease's end, inside the blind window that hid it.
	inBlind := func(at time.Time) bool {
		for i, to := range blindEnds {
			if !at.Before(blindFrom[i]) && !at.After(to) {
				return true
			}
		}
		return false
	}
	grants := map[string]int{}
	for _, e := range s.Events(t, lock, audit.EventGrant) {
		if e.Inferred && !atBlindEnd(e.At) {
			t.Fatalf("inferred grant %+v, not at the end of a blind window", e)
		}
		grants[fmt.Sprintf("%s@%d", e.Holder, tokenOf(e.Token))]++
	}
	acqs := elog.all()
	for _, a := range acqs[elog.checked:] {
		k := fmt.Sprintf("%s@%d", a.holder, a.token)
		if grants[k] == 1 || grants[k] == 0 && len(blinds) > 0 && a.holder != holder {
			continue
		}
		t.Fatalf("acquisition %s recorded as %d grants, want 1 (grants: %v)", k, grants[k], grants)
	}
	elog.checked = len(acqs)
	// Every holder renewed or released: an expiry is the collector's
	// mistake, except one the tracker infers within a blind window for a
	// tenure that ended unseen.
	for _, e := range s.Events(t, lock, audit.EventExpire) {
		if !e.Inferred || !inBlind(e.At) {
			t.Fatalf("expire event %+v: every holder renewed or released; the collector just could not see it", e)
		}
	}
	for _, f := range s.Findings(t, lock, audit.FindingLeaseExpired) {
		if !inBlind(f.At) {
			t.Fatalf("lease_expired finding %+v: every holder renewed or released", f)
		}
	}
	t.Logf("outage %s .. %s: caught up %s after the apiserver returned; blind windows: %s", down.Format(time.StampMilli), back.Format(time.StampMilli), d.Round(time.Millisecond), strings.Join(blinds, "; "))
}
