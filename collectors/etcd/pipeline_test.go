package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// gatedSink is a collectors.Submitter whose commits wait for the test: each
// value taken from gate lets the oldest waiting input commit (true) or fail
// (false), as the recorder's commits would. It counts the inputs in flight.
type gatedSink struct {
	*recorder
	gate chan bool

	mu                              sync.Mutex
	submits, inFlight, mostInFlight int
}

var _ collectors.Submitter = (*gatedSink)(nil)

func newGatedSink() *gatedSink { return &gatedSink{recorder: newRecorder(), gate: make(chan bool)} }

func (g *gatedSink) Submit(ctx context.Context, in audit.Input) func() error {
	g.mu.Lock()
	g.submits++
	g.inFlight++
	g.mostInFlight = max(g.mostInFlight, g.inFlight)
	g.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		var err error
		select {
		case ok := <-g.gate:
			if ok {
				err = g.recorder.Record(ctx, in)
			} else {
				err = errors.New("disk full")
			}
		case <-ctx.Done():
			err = ctx.Err()
		}
		g.mu.Lock()
		g.inFlight--
		g.mu.Unlock()
		done <- err
	}()
	return func() error { return <-done }
}

func (g *gatedSink) counts() (submits, mostInFlight int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.submits, g.mostInFlight
}

// open lets every input commit from now until the test ends.
func (g *gatedSink) open(t *testing.T) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		for {
			select {
			case g.gate <- true:
			case <-stop:
				return
			}
		}
	}()
}

// checkOnce checks every lock in tokens has exactly one grant and one
// release, with its token, and that nothing else was granted.
func checkOnce(t *testing.T, sink *recorder, tokens map[string]int64) {
	t.Helper()
	grants, releases := map[string][]int64{}, map[string][]int64{}
	for _, ob := range sink.obs("") {
		switch ob.Kind {
		case audit.EventGrant:
			grants[ob.Lock.Name] = append(grants[ob.Lock.Name], tokenOf(ob))
		case audit.EventRelease:
			releases[ob.Lock.Name] = append(releases[ob.Lock.Name], tokenOf(ob))
		case audit.EventExpire:
			t.Errorf("%s expired: nothing did", ob.Lock.Name)
		}
	}
	for name, tok := range tokens {
		want := fmt.Sprint([]int64{tok})
		if got := fmt.Sprint(grants[name]); got != want {
			t.Errorf("grants of %s: tokens %s, want %s", name, got, want)
		}
		if got := fmt.Sprint(releases[name]); got != want {
			t.Errorf("releases of %s: tokens %s, want %s", name, got, want)
		}
	}
	for name := range grants {
		if _, ok := tokens[name]; !ok {
			t.Errorf("grant of %s, which nobody locked", name)
		}
	}
}

// While an input commits, the collector keeps applying what the watch
// brings but submits none of it: it goes into the next input, whatever its
// size. A second input in flight could commit after the first failed,
// storing a cursor past changes that never were.
func TestOneInputInFlight(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := newGatedSink()
	runCollector(t, ep, sink, "/locks/")
	s := newSession(t, cli, 10)
	lockAndUnlock := func(name string) int64 {
		m := lockMutex(t, s, name)
		tok := token(t, cli, m.Key())
		unlock(t, cli, m)
		return tok
	}

	tokens := map[string]int64{"/locks/p0": lockAndUnlock("/locks/p0")}
	collectortest.Eventually(t, 5*time.Second, "the first input to be submitted", func() bool { n, _ := sink.counts(); return n == 1 })
	for i := 1; i <= 30; i++ {
		name := fmt.Sprintf("/locks/p%d", i)
		tokens[name] = lockAndUnlock(name)
	}
	end := head(t, cli)
	if n, _ := sink.counts(); n != 1 {
		t.Fatalf("%d inputs submitted while the first waited to commit, want 1", n)
	}
	if got := sink.cursorRev(); got >= end {
		t.Fatalf("cursor %d before any input committed", got)
	}

	sink.open(t)
	sink.waitCursor(t, end)
	checkOnce(t, sink.recorder, tokens)
	submits, most := sink.counts()
	if most != 1 {
		t.Errorf("%d inputs were in flight at once, want 1", most)
	}
	// 62 revisions: the first alone, the rest gathered while it waited (a
	// renewal or a late watch response may add one or two).
	if submits > 5 {
		t.Errorf("%d inputs for 31 handovers, want the ones made during a commit gathered into one", submits)
	}
	t.Logf("31 handovers in %d inputs", submits)
}

// A commit that fails ends the run; what was gathered behind it is dropped
// with it, and the restarted collector resumes from the last stored cursor,
// so every change is recorded exactly once.
func TestFailedCommitLosesNothing(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := newGatedSink()
	cr := runCollector(t, ep, sink, "/locks/")
	s := newSession(t, cli, 10)
	lockAndUnlock := func(name string) int64 {
		m := lockMutex(t, s, name)
		tok := token(t, cli, m.Key())
		unlock(t, cli, m)
		return tok
	}

	tokens := map[string]int64{"/locks/f0": lockAndUnlock("/locks/f0")}
	collectortest.Eventually(t, 5*time.Second, "the first input to be submitted", func() bool { n, _ := sink.counts(); return n == 1 })
	for i := 1; i <= 10; i++ {
		name := fmt.Sprintf("/locks/f%d", i)
		tokens[name] = lockAndUnlock(name)
	}
	sink.gate <- false
	if err := cr.Failed(t, 10*time.Second); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Run returned %v, want the commit's error", err)
	}
	if n := len(sink.obs("", audit.EventGrant, audit.EventRelease)); n != 0 {
		t.Fatalf("%d grants and releases stored before the restart, want none", n)
	}

	sink.open(t)
	runCollector(t, ep, sink, "/locks/")
	sink.waitCursor(t, head(t, cli))
	checkOnce(t, sink.recorder, tokens)
}

// An Unlock deletes one key of a lease that keeps others: a release, told
// from the revision alone, even when the session is closed right after and
// the lease is gone by the time anyone could read it.
func TestUnlockWhileLeaseKeepsOtherKeys(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	cli := newClient(t, ep)
	sink := newRecorder()
	runCollector(t, ep, sink, "/locks/")

	s := newSession(t, cli, 10)
	mx := lockMutex(t, s, "/locks/x")
	lockMutex(t, s, "/locks/y")
	sink.waitObs(t, 5*time.Second, "", 2, audit.EventGrant)
	unlock(t, cli, mx)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ends := sink.waitObs(t, 5*time.Second, "", 2, audit.EventRelease, audit.EventExpire)
	x, y := ends[0], ends[1]
	if x.Lock.Name != "/locks/x" || x.Kind != audit.EventRelease || x.Detail["revoked"] != nil || x.Detail["reason"] != "key deleted; its lease kept other keys" {
		t.Fatalf("first end = %s of %s %v, want the release of /locks/x, not revoked", x.Kind, x.Lock.Name, x.Detail)
	}
	if y.Lock.Name != "/locks/y" || y.Kind != audit.EventRelease || y.Detail["revoked"] != true {
		t.Fatalf("second end = %s of %s %v, want the revoked release of /locks/y", y.Kind, y.Lock.Name, y.Detail)
	}
}
