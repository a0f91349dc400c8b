package kubernetes

import (
	"context"
	"testing"
	"time"

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
