package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

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
	const root = "/t-paced"
	const busy = root + "/busy"
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
		t.Logf("%s: held from %s for %s", lock, acquired.Format("15:04:05.000"), tenure)

		grant := sk.WaitEvents(t, 5*time.Second, lock, 1, audit.EventGrant)[0]
		if grant.Token == nil || *grant.Token != st.Czxid {
			t.Errorf("%s: grant token = %v, want the holder's czxid %d", lock, grant.Token, st.Czxid)
		}
		if late := grant.At.Sub(acquired); late > tenure || late < -tenure {
			t.Errorf("%s: grant stamped %s after the holder acquired it, want within %s", lock, late, tenure)
		}
	}
}

// A tenure that came and went before the collector first read its
// directory, and one between two reads of a free directory, are each
// counted in the next grant's unseen_contenders: the reads' cversion and
// numChildren show the creates that no read showed.
func TestUnseenContendersOfFreshAndFreeDirectories(t *testing.T) {
	a := connect(t, 4*time.Second)
	const root = "/t-unseen"
	const lock = root + "/jobs"
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
