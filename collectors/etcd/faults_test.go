package etcd

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
	"github.com/leasewatch/leasewatch/collectors/faulttest"
)

// Fault-test timings: leases of 5s (short, yet long enough for a busy
// machine to keep a session alive), a freeze past both a lease and the
// collector's silence limit, and the Runner's backoff cap.
const (
	faultTTL        = 5 // seconds
	faultFreeze     = 6 * time.Second
	faultBackoffCap = 2 * time.Second
	// faultSlack is what catching up may take beyond the backoff: the
	// collector noticing the silence, dialling, resuming the watches and
	// storing what they replay, on a busy 2-core machine under -race.
	faultSlack = 6 * time.Second
)

// TestBackendFaults stops and restarts etcd, and freezes it with SIGSTOP for
// longer than a lease, while locks change hands around and during the
// outage. etcd keeps its history across both, so the collector resumes from
// its cursor and loses nothing: there is no blind window to record, and
// every acquisition must be recorded exactly once with its token. After each
// fault the collector must have caught up with etcd within its capped
// backoff and show exactly etcd's holders; across the cycles neither
// goroutines nor the heap may grow. LEASEWATCH_FAULT_CYCLES=50 runs the long
// version.
func TestBackendFaults(t *testing.T) {
	srv := startEtcdProcess(t)
	cli := newClient(t, srv.endpoint)
	sink := newRecorder()
	cfg := testConfig([]string{"/locks/"}, srv.endpoint)
	c, err := New(cfg, collectortest.Logger(t, testSource), WithProgressInterval(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	faulttest.Supervise(t, sink, c, collectors.RunnerConfig{
		Logger: collectortest.Logger(t, testSource), MinBackoff: 100 * time.Millisecond, MaxBackoff: faultBackoffCap,
	})

	var acquired []acquisition
	lock := func(s *concurrency.Session, name string) *concurrency.Mutex {
		t.Helper()
		m := lockMutex(t, s, name)
		acquired = append(acquired, acquisition{name, token(t, cli, m.Key())})
		return m
	}
	locks := []string{"/locks/f", "/locks/g"}
	usage := &faulttest.Usage{MaxGoroutines: 5, MaxHeap: 4 << 20}
	cycles := faulttest.Cycles(t, 2)
	for cycle := 1; cycle <= cycles; cycle++ {
		// Stop and restart, with a contender queued while etcd is down.
		sA := faultSession(t, cli)
		mA := lock(sA, "/locks/f")
		sink.waitCursor(t, head(t, cli))
		srv.stop()
		down := time.Now()
		queued := queueLock(cli, "/locks/f")
		srv.start()
		ready := time.Now()
		caughtUp(t, sink, cli, ready)
		unlockMutex(t, mA)
		b := <-queued
		acquired = append(acquired, b.acquisition)
		checkHolders(t, sink, cli, locks, ready)
		t.Logf("cycle %d: etcd down %s", cycle, ready.Sub(down).Round(time.Millisecond))
		closeSessions(sA, b.s)

		// Freeze past the lease and the collector's silence limit: C's
		// lease may run out on waking, and D queues for another lock
		// meanwhile.
		sC := faultSession(t, cli)
		lock(sC, "/locks/g")
		sink.waitCursor(t, head(t, cli))
		faulttest.Freeze(t, srv.pid())
		down = time.Now()
		queued = queueLock(cli, "/locks/f")
		time.Sleep(faultFreeze) // the freeze itself is what is under test
		back := time.Now()
		faulttest.Thaw(t, srv.pid())
		ready = time.Now()
		d := <-queued
		acquired = append(acquired, d.acquisition)
		caughtUp(t, sink, cli, ready)
		checkHolders(t, sink, cli, locks, ready)
		t.Logf("cycle %d: etcd frozen %s", cycle, back.Sub(down).Round(time.Millisecond))
		closeSessions(sC, d.s)
		sink.waitCursor(t, head(t, cli))

		checkRecordedOnce(t, sink, acquired)
		usage.Measure(t, cycle)
	}
	usage.Report(t)
	for _, k := range []audit.FindingKind{audit.FindingTokenRegression, audit.FindingTokenReuse, audit.FindingOverlap, audit.FindingBlindWindow} {
		if f := sink.findingsOf(k); len(f) != 0 {
			t.Errorf("%s findings across the faults: %+v", k, f[0])
		}
	}
}

type acquisition struct {
	lock  string
	token int64
}

// faultSession opens a session with a short lease. Unlike newSession it is
// closed by the cycle that opened it, so sessions do not pile up.
func faultSession(t *testing.T, cli *clientv3.Client) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(faultTTL))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func closeSessions(ss ...*concurrency.Session) {
	for _, s := range ss {
		if s != nil {
			s.Close() // a lease that ran out cannot be revoked: nothing to do
		}
	}
}

// queueLock asks for lock name in the background, as a contender does:
// it opens its session and locks, retrying while etcd is out of reach, and
// sends what it acquired. The caller closes the session.
func queueLock(cli *clientv3.Client, name string) <-chan contender {
	out := make(chan contender, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for ctx.Err() == nil {
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(faultTTL), concurrency.WithContext(ctx))
			if err != nil {
				continue // etcd is down: the client waits for it between attempts
			}
			m := concurrency.NewMutex(s, name)
			if err := m.Lock(ctx); err != nil {
				s.Close()
				continue
			}
			resp, err := cli.Get(ctx, m.Key())
			if err != nil || len(resp.Kvs) == 0 {
				s.Close()
				continue
			}
			out <- contender{acquisition{name, resp.Kvs[0].CreateRevision}, s}
			return
		}
		out <- contender{acquisition: acquisition{name, -1}}
	}()
	return out
}

// contender is a queued lock's acquisition and its session.
type contender struct {
	acquisition
	s *concurrency.Session
}

func unlockMutex(t *testing.T, m *concurrency.Mutex) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("unlock %s: %v", m.Key(), err)
	}
}

// caughtUp waits until the collector has recorded etcd's head as of now,
// and checks it got there within the backoff cap of etcd's return (ready).
func caughtUp(t *testing.T, sink *recorder, cli *clientv3.Client, ready time.Time) {
	t.Helper()
	rev := head(t, cli)
	collectortest.Eventually(t, faultBackoffCap+faultSlack+10*time.Second, fmt.Sprintf("cursor >= %d", rev), func() bool { return sink.cursorRev() >= rev })
	d := faulttest.Reconnected(t, "etcd", ready, time.Now(), faultBackoffCap+faultSlack)
	t.Logf("caught up with etcd's head %d %s after etcd returned", rev, d.Round(time.Millisecond))
}

// checkHolders waits until the tracker shows, for every lock, the holder
// etcd has: the owner of the key with the lowest CreateRevision under it
// (none if there is no key), within the backoff cap of etcd's return.
func checkHolders(t *testing.T, sink *recorder, cli *clientv3.Client, locks []string, ready time.Time) {
	t.Helper()
	agreed := faulttest.SameHolders(t, "etcd", locks, faultBackoffCap+faultSlack+10*time.Second, func(name string) (string, string) {
		resp, err := cli.Get(context.Background(), name+"/", clientv3.WithFirstCreate()...)
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		want := ""
		if len(resp.Kvs) > 0 {
			want = holderOf(resp.Kvs[0].Lease, string(resp.Kvs[0].Value))
		}
		got := ""
		if st := sink.state(name); st.Lock.State == audit.StateHeld {
			got = st.Lock.Holder
		}
		return got, want
	})
	faulttest.Reconnected(t, "etcd holders", ready, agreed, faultBackoffCap+faultSlack+time.Second)
}

// checkRecordedOnce checks that every acquisition so far was recorded as
// exactly one grant, seen rather than inferred, and that nothing else was
// granted.
func checkRecordedOnce(t *testing.T, sink *recorder, acquired []acquisition) {
	t.Helper()
	grants := map[acquisition]int{}
	for _, ob := range sink.obs("", audit.EventGrant, audit.EventObserved) {
		if ob.Inferred || ob.Kind == audit.EventObserved {
			t.Fatalf("%s %s (token %d, inferred %v): etcd kept its history, nothing should be inferred", ob.Kind, ob.Lock.Name, tokenOf(ob), ob.Inferred)
		}
		grants[acquisition{ob.Lock.Name, tokenOf(ob)}]++
	}
	for _, a := range acquired {
		if a.token < 0 {
			t.Fatalf("a contender for %s never acquired it", a.lock)
		}
		if grants[a] != 1 {
			t.Fatalf("acquisition of %s with token %d recorded as %d grants, want 1", a.lock, a.token, grants[a])
		}
		delete(grants, a)
	}
	var extra []string
	for a, n := range grants {
		extra = append(extra, fmt.Sprintf("%s@%d x%d", a.lock, a.token, n))
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Fatalf("grants no contender acquired: %v", extra)
	}
	for _, in := range sink.allInputs() {
		if in.Blind != nil {
			t.Fatalf("blind input %+v: etcd kept its history, nothing was unseen", in.Blind)
		}
	}
}
