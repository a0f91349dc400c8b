package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// unique returns p with a suffix no other run of a test has used on the
// package's server, so a test that needs directories created during it
// can run again (-count).
func unique(p string) string { return fmt.Sprintf("%s-%d", p, time.Now().UnixNano()) }

// pace keeps the recorder pacing its commits as under several busy sources:
// n resources report writes one after another, each waiting for its
// commit, so every group has several senders and commits come
// audit.DefaultCommitInterval apart. It returns once a report has waited
// at least half that long, and the resources stop when the test ends.
func pace(t *testing.T, rec *audit.Recorder, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var mu sync.Mutex
	var longest time.Duration
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := int64(1)
			for ctx.Err() == nil {
				w := audit.WriteReport{Source: testSource, Lock: fmt.Sprintf("/t-paced-resource/%d", i), Resource: "db",
					Token: &tok, Outcome: audit.WriteAccepted, Holder: "worker", At: time.Now()}
				start := time.Now()
				if err := rec.ReportWrites(ctx, []audit.WriteReport{w}); err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("resource %d: report write: %v", i, err)
					return
				}
				mu.Lock()
				longest = max(longest, time.Since(start))
				mu.Unlock()
				tok++
			}
		}()
	}
	collectortest.Eventually(t, 10*time.Second, "the recorder pacing its commits", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return longest >= audit.DefaultCommitInterval/2
	})
}

// A lock taken in a directory just created and held for 50 ms, while a
// waiter joins another lock (a change that moves only the cursor) and
// three resources keep the recorder pacing its commits: the collector
// reads on while the cursor commits, so it sees the grant, stamped within
// 50 ms of the holder's own time of acquisition.
func TestShortTenureInFreshDirectoryWhileCommitsArePaced(t *testing.T) {
	a, b := connect(t, 4*time.Second), connect(t, 4*time.Second)
	root := unique("/t-paced")
	busy := root + "/busy"
	mkdirs(t, a, busy)
	if err := zk.NewLock(a.Conn, busy, acl).Lock(); err != nil {
		t.Fatal(err)
	}
	sk := newSink(t)
	runCollector(t, testConfig(t, root), sk)
	pace(t, sk.Recorder(), 3)

	const tenure = 50 * time.Millisecond
	for i := range 4 {
		// A waiter joins: nothing changes hands, the cursor moves.
		if _, err := b.CreateProtectedEphemeralSequential(busy+"/lock-", nil, acl); err != nil {
			t.Fatal(err)
		}
		lock := fmt.Sprintf("%s/job-%d", root, i)
		l := zk.NewLock(b.Conn, lock, acl) // creates the directory
		if err := l.Lock(); err != nil {
			t.Fatal(err)
		}
		acquired := time.Now()
		_, st := ownNode(t, b, lock)
		time.Sleep(time.Until(acquired.Add(tenure))) // the holder's work
		if err := l.Unlock(); err != nil {
			t.Fatal(err)
		}

		grant := sk.WaitEvents(t, 5*time.Second, lock, 1, audit.EventGrant)[0]
		if grant.Token == nil || *grant.Token != st.Czxid {
			t.Errorf("%s: grant token = %v, want the holder's czxid %d", lock, grant.Token, st.Czxid)
		}
		late := grant.At.Sub(acquired)
		if late > tenure || late < -tenure {
			t.Errorf("%s: grant stamped %s after the holder acquired it, want within %s", lock, late, tenure)
		}
		t.Logf("%s: grant stamped %s after the holder's acquisition", lock, late)
	}
}

// A tenure that came and went before the collector first read its
// directory, and one between two reads of a free directory, are each
// counted in the next grant's unseen_contenders: the reads' cversion and
// numChildren show the creates that no read showed.
func TestUnseenContendersOfFreshAndFreeDirectories(t *testing.T) {
	a := connect(t, 4*time.Second)
	root := unique("/t-unseen")
	lock := root + "/jobs"
	mkdirs(t, a, root)
	sk := newSink(t)
	runCollector(t, testConfig(t, root), sk)

	// The directory, a holder's node and its release in one transaction:
	// no read can show the node.
	missed := func(ops ...any) {
		t.Helper()
		node := lock + "/_c_0b8a2d1c-1111-4a2b-9c3d-2e4f5a6b7c8d-lock-0000000000"
		ops = append(ops, &zk.CreateRequest{Path: node, Acl: acl}, &zk.DeleteRequest{Path: node, Version: -1})
		if _, err := a.Multi(ops...); err != nil {
			t.Fatal(err)
		}
	}
	grantAndRelease := func(n int) audit.Event {
		t.Helper()
		l := zk.NewLock(a.Conn, lock, acl)
		if err := l.Lock(); err != nil {
			t.Fatal(err)
		}
		g := sk.WaitEvents(t, 5*time.Second, lock, n, audit.EventGrant)[n-1]
		if err := l.Unlock(); err != nil {
			t.Fatal(err)
		}
		sk.WaitEvents(t, 5*time.Second, lock, n, audit.EventRelease)
		return g
	}

	missed(&zk.CreateRequest{Path: lock, Acl: acl})
	collectortest.Eventually(t, 5*time.Second, "the collector's first read of "+lock, func() bool {
		return len(sk.Inputs()) > 1
	})
	if g := grantAndRelease(1); fmt.Sprint(g.Detail["unseen_contenders"]) != "1" {
		t.Errorf("first grant's unseen_contenders = %v, want 1 (the tenure before the first read)", g.Detail["unseen_contenders"])
	}
	missed()
	if g := grantAndRelease(2); fmt.Sprint(g.Detail["unseen_contenders"]) != "1" {
		t.Errorf("second grant's unseen_contenders = %v, want 1 (the tenure while the lock was free)", g.Detail["unseen_contenders"])
	}
}

// heldSink is the real recorder's sink whose inputs, handed over by Submit,
// wait to commit until the test sends on gate: true commits the oldest,
// false fails it as a full disk would. It counts the inputs submitted and
// the most in flight at once.
type heldSink struct {
	*collectortest.Sink
	gate chan bool

	mu                              sync.Mutex
	submits, inFlight, mostInFlight int
}

func (h *heldSink) Submit(ctx context.Context, in audit.Input) func() error {
	h.mu.Lock()
	h.submits++
	h.inFlight++
	h.mostInFlight = max(h.mostInFlight, h.inFlight)
	h.mu.Unlock()
	return func() error {
		defer func() { h.mu.Lock(); h.inFlight--; h.mu.Unlock() }()
		select {
		case ok := <-h.gate:
			if !ok {
				return errors.New("disk full")
			}
			return h.Sink.Record(ctx, in)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (h *heldSink) counts() (submits, mostInFlight int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.submits, h.mostInFlight
}

// While an input waits to commit, what the collector reads gathers behind
// it, one input in flight; when its commit fails the run stops with the
// error, nothing of it or behind it is stored, and the stored cursor does
// not pass it: the restarted collector finds the directories changed since
// and records the time as a blind window.
func TestFailedCommitStopsTheRunAndStoresNothingPastIt(t *testing.T) {
	a := connect(t, 4*time.Second)
	root := unique("/t-failed-commit")
	lock := root + "/jobs"
	mkdirs(t, a, lock)
	sk := newSink(t)
	held := &heldSink{Sink: sk, gate: make(chan bool)}
	run := runCollector(t, testConfig(t, root), held)
	stored, _ := sk.Cursor(testSource)

	l := zk.NewLock(a.Conn, lock, acl)
	for i := range 5 {
		if err := l.Lock(); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			collectortest.Eventually(t, 5*time.Second, "the first input submitted", func() bool { n, _ := held.counts(); return n == 1 })
		}
		if err := l.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
	if n, most := held.counts(); n != 1 || most != 1 {
		t.Fatalf("%d inputs submitted, %d in flight at once, while the first waited to commit: want 1 and 1", n, most)
	}
	held.gate <- false
	if err := run.Failed(t, 10*time.Second); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Run returned %v, want the commit's error", err)
	}
	if evs := sk.Events(t, lock, audit.EventGrant, audit.EventRelease); len(evs) != 0 {
		t.Fatalf("%d grants and releases stored, want none: their input failed", len(evs))
	}
	if pos, _ := sk.Cursor(testSource); pos != stored {
		t.Fatalf("stored cursor = %s after the failed commit, want the snapshot's %s", pos, stored)
	}

	runCollector(t, testConfig(t, root), sk)
	if blinds := sk.Blinds(); len(blinds) != 1 {
		t.Fatalf("blind windows after the restart = %+v, want one: the changes since the cursor are gone", blinds)
	}
}
