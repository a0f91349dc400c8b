package kubernetes

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// TestBusyLoopIsNotApiserverSilence: while the collector's loop stores a
// large input it asks the apiserver nothing, and the answer to the probe
// before waits unread. Resuming after longer than apiserverSilence, the
// loop must not take that for a silent apiserver (at 6,500 renewals a
// second a heartbeat sync made the collector restart and list 65,000
// Leases again, over and over); an apiserver that stays silent while asked
// still fails the run.
func TestBusyLoopIsNotApiserverSilence(t *testing.T) {
	needAPIServer(t)
	t.Parallel()
	c, err := New(Config{Name: testSource, Namespaces: []string{"default"}}, collectortest.Logger(t, testSource), WithRESTConfig(apiserver.Config))
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	c.now = func() time.Time { return clock }
	ctx, cancel := context.WithCancel(context.Background())
	ws := &watches{ctx: ctx}
	t.Cleanup(func() { cancel(); ws.wg.Wait() })
	r := newRun(c, newSink(t))
	p := newProber(r, ws)
	answer := func() time.Time {
		t.Helper()
		select {
		case at := <-p.answers:
			return at
		case <-time.After(10 * time.Second):
			t.Fatal("no answer to the probe")
			return time.Time{}
		}
	}

	if err := p.check(); err != nil {
		t.Fatal(err)
	}
	p.answered(answer())
	if err := p.check(); err != nil { // a second probe, whose answer the busy loop leaves unread
		t.Fatal(err)
	}
	collectortest.Eventually(t, 10*time.Second, "the second probe's answer", func() bool { return len(p.answers) == 1 })
	clock = clock.Add(apiserverSilence + 3*time.Second)
	if err := p.check(); err != nil {
		t.Fatalf("check after the loop was busy for %s: %v, want the answer waiting taken and the apiserver asked again", apiserverSilence+3*time.Second, err)
	}
	p.answered(answer())
	clock = clock.Add(probeEvery)
	if err := p.check(); err != nil {
		t.Fatalf("check at the next tick: %v", err)
	}

	// Asked every tick and silent for longer than apiserverSilence (each
	// probe's answer taken as none): the silence still fails the run.
	answer()
	p.answered(time.Time{})
	for range 2 * apiserverSilence / probeEvery {
		clock = clock.Add(probeEvery)
		if err = p.check(); err != nil {
			break
		}
		answer()
		p.answered(time.Time{})
	}
	if err == nil {
		t.Fatal("an apiserver silent while asked for longer than apiserverSilence did not fail the run")
	}
}

// TestNoVouchingBehindABacklog: after a long snapshot or a busy spell the
// watches deliver what happened meanwhile, and the collector must not
// vouch for now until they have caught up (a batch that is not a backlog)
// or gone quiet: the tracker's clock would expire leases whose renewals
// are still on the way. At 6,500 renewals a second on a busy machine it
// expired every Lease after the snapshot, and never caught up.
func TestNoVouchingBehindABacklog(t *testing.T) {
	renewal := func(renewed time.Time) message {
		return message{scope: "kube-node-lease", ev: watch.Event{Type: watch.Modified, Object: lease("kube-node-lease", "node-1",
			coordinationv1.LeaseSpec{HolderIdentity: ptr("node-1"), RenewTime: &metav1.MicroTime{Time: renewed}})}}
	}
	now := time.Now()
	full := make([]message, maxBatch)
	for i := range full {
		full[i] = renewal(now)
	}
	for _, tt := range []struct {
		name  string
		batch []message
		want  bool
	}{
		{"Current", []message{renewal(now.Add(-time.Second)), renewal(now.Add(-100 * time.Millisecond))}, false},
		{"NewestWellBefore", []message{renewal(now.Add(-30 * time.Second)), renewal(now.Add(-20 * time.Second))}, true},
		{"Full", full, true},
		{"NoRenewTime", []message{{scope: "kube-node-lease", ev: watch.Event{Type: watch.Modified, Object: lease("kube-node-lease", "node-1", coordinationv1.LeaseSpec{})}}}, false},
	} {
		if got := backlog(tt.batch, now); got != tt.want {
			t.Errorf("%s: backlog = %v, want %v", tt.name, got, tt.want)
		}
	}

	s := newSink(t)
	r := newRun(&Collector{cfg: Config{Name: testSource}, now: time.Now, batchWindow: 100 * time.Millisecond}, s)
	r.window = r.c.batchWindow
	ws := newWatches(r, context.Background())
	vouched := func() bool {
		t.Helper()
		before := len(s.Inputs())
		if err := r.live(context.Background(), ws); err != nil {
			t.Fatal(err)
		}
		return len(s.Inputs()) > before
	}
	r.applied, r.behind = time.Now().Add(-time.Second), true
	r.recorded = time.Now() // a batch from a backlog that took a second to store
	if vouched() {
		t.Fatal("vouched for now right after a batch from a backlog")
	}
	r.behind = false
	ws.msgs <- renewal(now)
	if vouched() {
		t.Fatal("vouched for now with watch events waiting")
	}
	<-ws.msgs
	r.behind, r.recorded = true, time.Now().Add(-time.Second) // quiet since the backlog's last batch
	if !vouched() {
		t.Fatal("did not vouch once the watches had gone quiet after a backlog")
	}
}
