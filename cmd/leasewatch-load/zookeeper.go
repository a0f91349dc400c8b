package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasewatch/leasewatch/collectors/zookeeper/zkserver"
)

// Defaults of the ZooKeeper scenario: 2,000 lock directories, each handed
// over every 4 s, 500 handovers a second.
const (
	zkDefaultLocks = 2000
	zkDefaultHold  = 4 * time.Second
	// zkLoadRoot is the one path leasewatch watches; lock N is the
	// directory zkLoadRoot/lock-N, whose contenders are go-zookeeper's
	// _c_<guid>-lock-<seq> nodes.
	zkLoadRoot = "/leasewatch-load"
	// zkLagTarget is the handover lag a run must stay under at its 99th
	// percentile, by default.
	zkLagTarget = 500 * time.Millisecond
)

// flags registers the ZooKeeper scenario's flags on fs.
func (k *zkLoad) flags(fs *flag.FlagSet) {
	fs.IntVar(&k.locks, "locks", zkDefaultLocks, "lock directories")
	fs.IntVar(&k.contenders, "contenders", 2, "contenders queued on each lock (at least 2)")
	fs.IntVar(&k.sessions, "sessions", 32, "ZooKeeper sessions (connections) the contenders are drawn from")
	fs.DurationVar(&k.session, "session-timeout", 10*time.Second, "the contenders' session timeout")
	fs.DurationVar(&k.hold, "hold", zkDefaultHold, fmt.Sprintf("how long each lock is held before its holder unlocks and queues again: locks/hold handovers per second (the default, %.0f/s)",
		float64(zkDefaultLocks)/zkDefaultHold.Seconds()))
	fs.DurationVar(&k.warmup, "warmup", 10*time.Second, "load before measuring, after the locks' first grants")
	fs.DurationVar(&k.duration, "duration", 30*time.Second, "measured load")
	fs.DurationVar(&k.target, "lag-target", zkLagTarget, "the handover lag p99 the run must stay under")
	fs.StringVar(&k.leasewatch, "leasewatch", "", "leasewatch binary (default: go build ./cmd/leasewatch)")
	fs.BoolVar(&k.keep, "keep", false, "keep the run's folder (leasewatch's database and config) and say where")
}

// zkLoad is the ZooKeeper scenario: many lock directories, each contended
// by sessions that take it by the documented lock recipe (go-zookeeper's
// Lock), handed over as their holders unlock and queue again. Every grant
// and release the clients saw is compared, lock by lock and token (czxid)
// by token, with what leasewatch stored.
type zkLoad struct {
	locks      int
	contenders int
	sessions   int
	session    time.Duration
	hold       time.Duration
	warmup     time.Duration
	duration   time.Duration
	target     time.Duration // the handover lag p99 to stay under
	leasewatch string
	keep       bool
}

func (k *zkLoad) run(ctx context.Context, out, log io.Writer) error {
	if k.locks < 1 || k.hold <= 0 {
		return fmt.Errorf("want at least one lock and a positive --hold")
	}
	if k.contenders < 2 || k.sessions < 1 {
		return fmt.Errorf("want at least 2 contenders per lock and a session (%d contenders, %d sessions)", k.contenders, k.sessions)
	}
	dir, done, err := runFolder(k.keep, log)
	if err != nil {
		return err
	}
	defer done()
	rig, err := startZKRig(ctx, k.leasewatch, dir, k.locks, k.sessions, k.session, log)
	if err != nil {
		return err
	}
	defer rig.close()

	fmt.Fprintf(log, "%d ZooKeeper locks, %d contenders each from %d sessions, handed over every %s: %s of warm-up, %s measured\n",
		k.locks, k.contenders, k.sessions, k.hold, k.warmup, k.duration)
	locks := make([]*loggedLock, k.locks)
	for i := range locks {
		locks[i] = &loggedLock{name: zkLockPath(i), release: make(chan struct{}, 1)}
	}
	t := &loadTally{}
	holdCtx, stopHolding := context.WithCancel(ctx)
	var contending sync.WaitGroup
	defer func() {
		stopHolding()
		rig.closeSessions() // ends the queued Locks, which take no context
		contending.Wait()
	}()
	// Every lock's contenders queue at once: the directories exist, and
	// the grants that follow are one per lock.
	t.inFlight.Add(int64(k.locks)) // until each lock's first grant
	for i, l := range locks {
		for j := range k.contenders {
			conn := rig.conns[(i*k.contenders+j)%len(rig.conns)]
			holder := fmt.Sprintf("worker-%d-%d", i, j)
			contending.Go(func() { contendZK(holdCtx, conn, l, holder, t) })
		}
	}
	if err := waitFor(ctx, time.Minute, "every lock's first grant", func() bool { return t.inFlight.Load() == 0 }); err != nil {
		return fmt.Errorf("%w (%d locks without a holder, %d Lock/Unlock calls failed)", err, t.inFlight.Load(), t.failed.Load())
	}
	// The handovers start once leasewatch has the first grants: a tenure
	// cut short while it still reads the first burst of every lock at once
	// would be one that no reader of ZooKeeper sees (F.5 of
	// collectors/backends.md), not lag.
	if err := waitFor(ctx, time.Minute, "leasewatch to record every lock's first grant", func() bool {
		return recorded(ctx, rig.lw.url, loadSource, "grant") >= float64(k.locks)
	}); err != nil {
		return err
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	dispatched := signalHandovers(loadCtx, locks, k.hold, t)
	w, err := measure(ctx, rig.lw.url, rig.lw.cmd.Process.Pid, loadSource, k.warmup, k.duration)
	stopLoad()
	dispatched()
	if err != nil {
		return err
	}
	// Every lock has a holder again and no handover is under way: the
	// queued contenders wait behind the holders, so what leasewatch stores
	// from here on is what the clients logged.
	loadEnd := time.Now()
	if err := waitFor(ctx, time.Minute, "the last handovers", func() bool { return t.inFlight.Load() == 0 }); err != nil {
		return fmt.Errorf("%w (%d handovers under way, %d Lock/Unlock calls failed)", err, t.inFlight.Load(), t.failed.Load())
	}
	return k.verify(ctx, out, rig, locks, t, w, time.Since(loadEnd))
}

// verify drains leasewatch, checks that it recorded what the clients did,
// once, with their tokens and within the lag target, and writes the run's
// table to out.
func (k *zkLoad) verify(ctx context.Context, out io.Writer, rig *zkRig, locks []*loggedLock, t *loadTally, w window, settled time.Duration) error {
	_, _, madeGrants, madeReleases := madeCounts(locks)
	drained := drain(ctx, rig.lw.url, loadSource, map[string]float64{"grant": float64(madeGrants), "release": float64(madeReleases)})
	gotGrants, gotReleases := recorded(ctx, rig.lw.url, loadSource, "grant"), recorded(ctx, rig.lw.url, loadSource, "release")
	o, err := readLockOutcome(ctx, rig.lw.database, loadSource, locks)
	if err != nil {
		return err
	}
	lag := histogramBetween(w.before, w.after, "leasewatch_observation_lag_seconds", map[string]string{"source": loadSource})
	stored := time.Duration(lag.quantile(0.99) * float64(time.Second))
	handover := o.tokens.releaseSkew.quantile(0.99) + stored
	w.write(out, fmt.Sprintf("leasewatch-load zookeeper: %d lock directories, %d contenders each (go-zookeeper's Lock, the documented recipe) from %d sessions (%s timeout), each lock handed over every %s (%.0f handovers/s offered), %s measured after %s warm-up; the observation lag is the collector's read of a changed directory → stored, the handover lag the holder's Unlock return → the collector's read of it, plus that",
		k.locks, k.contenders, k.sessions, k.session, k.hold, float64(k.locks)/k.hold.Seconds(), k.duration, k.warmup), [][2]string{
		{"handovers achieved", fmt.Sprintf("%.0f/s (%d skipped while a lock was between holders, %d Lock/Unlock calls failed)", float64(madeReleases)/(k.warmup+k.duration).Seconds(), t.skipped.Load(), t.failed.Load())},
		{"grants made / recorded", fmt.Sprintf("%d / %.0f (the load settled in %s, then leasewatch drained %s)", madeGrants, gotGrants, settled.Round(time.Millisecond), drained)},
		{"releases made / recorded", fmt.Sprintf("%d / %.0f (expiries recorded %d)", madeReleases, gotReleases, o.expiries)},
		{"locks whose grants differ", fmt.Sprintf("%d: %s", o.grantsDiffer, o.grantsPerLock)},
		{"locks whose releases differ", fmt.Sprintf("%d: %s", o.releasesDiffer, o.releasesPerLock)},
		{"tenures recorded with the client's token (czxid)", o.tokens.summary()},
		{"client's Lock return → collector's grant, p50 / p99", o.tokens.grantSkew.describe()},
		{"client's Unlock return → collector's release, p50 / p99", o.tokens.releaseSkew.describe()},
		{"handover lag p99 (Unlock → release read, p99, plus observation lag p99)", fmt.Sprintf("%s (target < %s)", handover.Round(100*time.Microsecond), k.target)},
	})
	if problems := o.problems("zookeeper"); len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	if handover >= k.target {
		return fmt.Errorf("handover lag p99 %s, over the %s target", handover, k.target)
	}
	return nil
}

// zkLockPath is lock i's directory.
func zkLockPath(i int) string { return fmt.Sprintf("%s/lock-%d", zkLoadRoot, i) }

// zkRig is a ZooKeeper server with a leasewatch process recording the load's
// lock directories, and the sessions the load's clients contend with.
type zkRig struct {
	srv   *zkserver.Server
	lw    *leasewatchProc
	conns []*zk.Conn
	once  sync.Once
}

// startZKRig starts the server, makes the locks' directories, starts
// leasewatch on them (with probe_sessions, to tell releases from expiries)
// and opens sessions sessions with the given timeout.
func startZKRig(ctx context.Context, bin, dir string, locks, sessions int, timeout time.Duration, log io.Writer) (rig *zkRig, err error) {
	r := &zkRig{}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	// The harness's 200 ms tick caps sessions at 4 s; a load's sessions
	// keep the timeout they ask for.
	if r.srv, err = zkserver.Start(fmt.Sprintf("maxSessionTimeout=%d", max(timeout, 10*time.Second).Milliseconds())); err != nil {
		return nil, err
	}
	conn, err := r.dial(timeout)
	if err != nil {
		return nil, err
	}
	for _, p := range append([]string{zkLoadRoot}, lockPaths(locks)...) {
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return nil, fmt.Errorf("create %s: %w", p, err)
		}
	}
	r.lw, err = startLeasewatch(ctx, bin, dir, "", fmt.Sprintf(`  - name: %s
    kind: zookeeper
    servers: [%q]
    paths: [%q]
    probe_sessions: true
`, loadSource, r.srv.Addr, zkLoadRoot), log)
	if err != nil {
		return nil, err
	}
	if err := waitUp(ctx, r.lw.url, loadSource); err != nil {
		return nil, err
	}
	for range sessions - 1 {
		if _, err := r.dial(timeout); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func lockPaths(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = zkLockPath(i)
	}
	return out
}

// dial opens a session and waits until the server has granted it.
func (r *zkRig) dial(timeout time.Duration) (*zk.Conn, error) {
	conn, events, err := zk.Connect([]string{r.srv.Addr}, timeout, zk.WithLogInfo(false), zk.WithLogger(stdlog.New(io.Discard, "", 0)))
	if err != nil {
		return nil, err
	}
	r.conns = append(r.conns, conn)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go func() {
					for range events { // the library blocks on an unread event
					}
				}()
				return conn, nil
			}
		case <-deadline:
			return nil, fmt.Errorf("no ZooKeeper session on %s after 30s", r.srv.Addr)
		}
	}
}

// closeSessions closes every client session: the server deletes their
// nodes, and the Locks still queued return.
func (r *zkRig) closeSessions() {
	r.once.Do(func() {
		for _, c := range r.conns {
			c.Close()
		}
	})
}

// close ends the sessions, leasewatch and the server, in that order.
func (r *zkRig) close() {
	r.closeSessions()
	if r.lw != nil {
		r.lw.stop()
	}
	if r.srv != nil {
		r.srv.Stop()
		os.RemoveAll(r.srv.Dir)
	}
}

// contendZK takes lock l on conn by the documented recipe, holds it until
// told to let go, unlocks and queues again, logging every grant (with its
// node's czxid, the token) and release as the client saw it. It returns
// when its session closes, or when hold ends while it holds the lock,
// which it then keeps until the session closes.
func contendZK(hold context.Context, conn *zk.Conn, l *loggedLock, holder string, t *loadTally) {
	for {
		lk := zk.NewLock(conn, l.name, zk.WorldACL(zk.PermAll))
		t.queued.Add(1)
		err := lk.LockWithData([]byte(holder))
		t.queued.Add(-1)
		if err != nil {
			if hold.Err() == nil {
				t.failed.Add(1)
			}
			return
		}
		node, token, err := ownerNode(conn, l.name)
		if err != nil {
			t.failed.Add(1)
			return
		}
		l.mu.Lock()
		l.key = node
		l.tenures = append(l.tenures, loggedTenure{token: token, key: node, granted: time.Now()})
		n := len(l.tenures) - 1
		l.mu.Unlock()
		t.inFlight.Add(-1)
		select {
		case <-l.release:
		case <-hold.Done():
			return
		}
		if err := lk.Unlock(); err != nil {
			t.failed.Add(1)
			return
		}
		l.mu.Lock()
		l.tenures[n].released, l.tenures[n].unlocked = time.Now(), true
		l.mu.Unlock()
	}
}

// ownerNode returns the lowest-sequence child of lock directory p, which a
// Lock that just returned holds (zk.Lock keeps its node's path to itself),
// and its czxid.
func ownerNode(conn *zk.Conn, p string) (string, int64, error) {
	children, _, err := conn.Children(p)
	if err != nil {
		return "", 0, err
	}
	owner, lowest := "", int64(-1)
	for _, c := range children {
		if seq, ok := zkSequence(c); ok && (lowest < 0 || seq < lowest) {
			owner, lowest = c, seq
		}
	}
	if owner == "" {
		return "", 0, fmt.Errorf("%s: no contender after a grant", p)
	}
	_, st, err := conn.Exists(path.Join(p, owner))
	if err != nil {
		return "", 0, err
	}
	return owner, st.Czxid, nil
}

// zkSequence is the sequence number of a go-zookeeper Lock node,
// _c_<guid>-lock-<seq>.
func zkSequence(name string) (int64, bool) {
	i := strings.LastIndex(name, "-lock-")
	if i < 0 {
		return 0, false
	}
	seq, err := strconv.ParseInt(name[i+len("-lock-"):], 10, 64)
	return seq, err == nil
}
