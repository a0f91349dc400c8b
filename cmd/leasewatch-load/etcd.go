package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/leasewatch/leasewatch/collectors/etcd/embedded"
)

// Defaults of the etcd scenario: 5,000 locks handed over every 20s, 250
// handovers a second, which leasewatch records exactly, as they happen, on
// 2 cores. With 5s TTLs most of what it stores is renewals (each keepalive
// of a session renews its ~150 locks, ~3,000 renew events a second), and
// those, not the handovers, set the lag; --ttl 15s leaves a third of them.
const (
	etcdDefaultLocks = 5000
	etcdDefaultHold  = 20 * time.Second
)

// flags registers the etcd scenario's flags on fs.
func (k *etcdLoad) flags(fs *flag.FlagSet) {
	fs.IntVar(&k.locks, "locks", etcdDefaultLocks, "concurrency.Mutex locks")
	fs.IntVar(&k.contenders, "contenders", 2, "sessions contending for each lock (at least 2)")
	fs.IntVar(&k.sessions, "sessions", 32, "etcd sessions (leases) the contenders are drawn from")
	fs.DurationVar(&k.ttl, "ttl", 5*time.Second, "session lease TTL (whole seconds, at least 2s)")
	fs.DurationVar(&k.hold, "hold", etcdDefaultHold, fmt.Sprintf("how long each lock is held before its holder unlocks and queues again: locks/hold handovers per second (the default, %.0f/s with %d locks, leasewatch records exactly on 2 cores; with the default TTL the renewals it stores set its lag)",
		float64(etcdDefaultLocks)/etcdDefaultHold.Seconds(), etcdDefaultLocks))
	fs.DurationVar(&k.warmup, "warmup", 10*time.Second, "load before measuring, after up to 30s to start the locks")
	fs.DurationVar(&k.duration, "duration", 30*time.Second, "measured load")
	fs.StringVar(&k.leasewatch, "leasewatch", "", "leasewatch binary (default: go build ./cmd/leasewatch)")
	fs.BoolVar(&k.keep, "keep", false, "keep the run's folder (leasewatch's database and config) and say where")
}

// etcdLoad is the etcd scenario: many concurrency.Mutex locks, each contended
// by several sessions, handed over as their holders unlock and queue again.
type etcdLoad struct {
	locks      int
	contenders int // sessions contending for each lock
	sessions   int // the pool the contenders are drawn from
	ttl        time.Duration
	hold       time.Duration
	warmup     time.Duration
	duration   time.Duration
	leasewatch string
	keep       bool // keep the run's folder (database, config) for inspection
}

const (
	// etcdLoadPrefix is the one prefix leasewatch watches: lock N is the
	// mutex prefix etcdLoadPrefix+"lock-N", so its contenders write
	// etcdLoadPrefix+"lock-N/<lease-hex>", which the collector calls lock
	// etcdLoadPrefix+"lock-N".
	etcdLoadPrefix = "/leasewatch-load/"
	// etcdClients is how many client connections the sessions are spread over.
	etcdClients = 4
	// etcdRamp is the longest the load takes to start every lock's
	// contenders: spread out, the first grants look like the handovers that
	// follow rather than a burst of every Lock call at once.
	etcdRamp = 30 * time.Second
)

func (k *etcdLoad) run(ctx context.Context, out, log io.Writer) error {
	if k.locks < 1 || k.hold <= 0 {
		return fmt.Errorf("want at least one lock and a positive --hold")
	}
	if k.contenders < 2 || k.sessions < k.contenders {
		return fmt.Errorf("want at least 2 contenders per lock and at least as many sessions (%d contenders, %d sessions)", k.contenders, k.sessions)
	}
	if k.ttl < 2*time.Second {
		return fmt.Errorf("--ttl %s: etcd's minimum lease TTL is 2s with its default heartbeat", k.ttl)
	}
	dir, done, err := runFolder(k.keep, log)
	if err != nil {
		return err
	}
	defer done()
	rig, err := startEtcdRig(ctx, k.leasewatch, dir, "", k.sessions, k.ttl, log)
	if err != nil {
		return err
	}
	defer rig.close()
	lw, sessions := rig.lw, rig.sessions
	url := lw.url

	fmt.Fprintf(log, "%d locks, %d contenders each from %d sessions with %s TTLs, handed over every %s: %s of warm-up, %s measured\n",
		k.locks, k.contenders, k.sessions, k.ttl, k.hold, k.warmup, k.duration)
	locks := make([]*loggedLock, k.locks)
	for i := range locks {
		locks[i] = &loggedLock{name: fmt.Sprintf("%slock-%d", etcdLoadPrefix, i), release: make(chan struct{}, 1)}
	}
	t := &loadTally{}
	// Queued Locks end with queueCtx, at the end of the load; holders stop
	// holding (without unlocking) with holdCtx, after the comparison.
	queueCtx, stopQueue := context.WithCancel(ctx)
	defer stopQueue()
	holdCtx, stopHolding := context.WithCancel(ctx)
	var contending sync.WaitGroup
	defer func() {
		// On an early return the Locks are still queued: end them too, or
		// the wait never ends.
		stopQueue()
		stopHolding()
		contending.Wait()
	}()

	k.startContenders(ctx, queueCtx, holdCtx, sessions, locks, t, &contending)
	if ctx.Err() != nil {
		return ctx.Err()
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	dispatched := signalHandovers(loadCtx, locks, k.hold, t)
	w, err := measure(ctx, url, lw.cmd.Process.Pid, loadSource, k.warmup, k.duration)
	stopLoad()
	dispatched()
	if err != nil {
		return err
	}
	settled, swept, err := settle(ctx, t, rig, stopQueue, locks)
	if err != nil {
		return err
	}

	return k.verify(ctx, out, url, locks, t, rig, w, settled, swept)
}

// settle waits, once the load has stopped, for the last handovers, then
// ends the queued Locks (stopQueue) and sweeps the keys they left. It
// returns how long that took and how many keys it swept.
func settle(ctx context.Context, t *loadTally, rig *etcdRig, stopQueue context.CancelFunc, locks []*loggedLock) (settled time.Duration, swept int, err error) {
	loadEnd := time.Now()
	// End the queued Locks only once every lock has a holder and no handover
	// is under way. Then every queued key is behind its lock's holder, and
	// deleting it (as a cancelled Lock does) changes no owner. Cancelled
	// earlier, a Lock could give up just as its key became the owner, a
	// grant and release that leasewatch rightly records and no client saw.
	if err := waitFor(ctx, 60*time.Second, "the last handovers", func() bool { return t.inFlight.Load() == 0 }); err != nil {
		// A lost session's waiters never get their turn.
		return 0, 0, fmt.Errorf("%w (%d handovers under way, %d Lock/Unlock calls failed, %d sessions lost)", err, t.inFlight.Load(), t.failed.Load(), rig.lost.Load())
	}
	stopQueue()
	if err := waitFor(ctx, 60*time.Second, "the queued Locks to end", func() bool { return t.queued.Load() == 0 }); err != nil {
		return 0, 0, err
	}
	// A Lock cancelled during its first request may have left its key
	// behind; being behind a holder's, deleting it changes no owner either.
	swept, err = sweepQueued(ctx, rig.clients[0], locks)
	if err != nil {
		return 0, 0, err
	}
	return time.Since(loadEnd), swept, nil
}

// startContenders starts every lock's contenders, spread over the ramp so
// etcd is not asked for every lock at once; it returns when all have
// started or ctx ends. Queued Locks end with queueCtx, holders stop holding
// with holdCtx; contending counts the contenders running.
func (k *etcdLoad) startContenders(ctx, queueCtx, holdCtx context.Context, sessions []*concurrency.Session, locks []*loggedLock,
	t *loadTally, contending *sync.WaitGroup) {
	ramp := min(k.hold, etcdRamp)
	started := make([]bool, k.locks)
	rampCtx, rampDone := context.WithCancel(ctx)
	dispatch(rampCtx, k.locks, ramp, func(i int) {
		if started[i] {
			return
		}
		started[i] = true
		t.inFlight.Add(1) // until its first grant
		for j := range k.contenders {
			s := sessions[(i+j*(k.sessions/k.contenders))%k.sessions]
			contending.Add(1)
			go func() {
				defer contending.Done()
				contend(queueCtx, holdCtx, s, locks[i], t)
			}()
		}
		if i == k.locks-1 {
			rampDone()
		}
	})
	rampDone()
}

// verify drains leasewatch, checks that it recorded what the clients did,
// once, with their tokens, and writes the run's table (w, how the load
// settled and what the tally t and the rig counted) to out.
func (k *etcdLoad) verify(ctx context.Context, out io.Writer, url string, locks []*loggedLock, t *loadTally, rig *etcdRig,
	w window, settled time.Duration, swept int) error {
	_, _, madeGrants, madeReleases := madeCounts(locks)

	// Drain: leasewatch must record what the clients did, once.
	drained := drain(ctx, url, loadSource, map[string]float64{"grant": float64(madeGrants), "release": float64(madeReleases)})
	gotGrants, gotReleases := recorded(ctx, url, loadSource, "grant"), recorded(ctx, url, loadSource, "release")
	gotExpiries := recorded(ctx, url, loadSource, "expire")

	o, err := readLockOutcome(ctx, rig.lw.database, loadSource, locks)
	if err != nil {
		return err
	}

	w.write(out, fmt.Sprintf("leasewatch-load etcd: %d concurrency.Mutex locks, %d contenders each from %d sessions (%s TTL), each lock handed over every %s (%.0f handovers/s offered), %s measured after %s warm-up; lag is the collector's receipt of the watch response (of the TTL read, for a renewal) → stored, plus any wait before the receipt that the collector could see (a lease read showing the revision before the watch delivered it); the client → collector rows cross-check it from the clients' side",
		k.locks, k.contenders, k.sessions, k.ttl, k.hold, float64(k.locks)/k.hold.Seconds(), k.duration, k.warmup), [][2]string{
		{"handovers achieved", fmt.Sprintf("%.0f/s (%d skipped while a lock was between holders, %d Lock/Unlock calls failed, %d sessions lost)", float64(madeReleases)/(k.warmup+k.duration).Seconds(), t.skipped.Load(), t.failed.Load(), rig.lost.Load())},
		{"grants made / recorded", fmt.Sprintf("%d / %.0f (missed %.0f; the load settled in %s, %d queued keys swept, then leasewatch drained %s)", madeGrants, gotGrants, float64(madeGrants)-gotGrants, settled.Round(time.Millisecond), swept, drained)},
		{"releases made / recorded", fmt.Sprintf("%d / %.0f (missed %.0f; expiries recorded %.0f)", madeReleases, gotReleases, float64(madeReleases)-gotReleases, gotExpiries)},
		{"locks whose grants differ", fmt.Sprintf("%d: %s", o.grantsDiffer, o.grantsPerLock)},
		{"locks whose releases differ", fmt.Sprintf("%d: %s", o.releasesDiffer, o.releasesPerLock)},
		{"tenures recorded with the client's token", o.tokens.summary()},
		{"client's Lock return → collector's grant event, p50 / p99", o.tokens.grantSkew.describe()},
		{"client's Unlock return → collector's release event, p50 / p99", o.tokens.releaseSkew.describe()},
	})
	if gotGrants != float64(madeGrants) || gotReleases != float64(madeReleases) || gotExpiries != 0 ||
		o.grantsDiffer > 0 || o.releasesDiffer > 0 || o.tokens.missing > 0 || o.tokens.unknown > 0 {
		return fmt.Errorf("leasewatch recorded %.0f grants of %d, %.0f releases of %d and %.0f expiries; %d locks' grants and %d locks' releases differ; %d tenures without their token, %d tokens the clients never held",
			gotGrants, madeGrants, gotReleases, madeReleases, gotExpiries, o.grantsDiffer, o.releasesDiffer, o.tokens.missing, o.tokens.unknown)
	}
	return nil
}

// etcdRig is an embedded etcd with a leasewatch process recording the load's
// prefix, and the sessions the load's clients contend with.
type etcdRig struct {
	srv      *embedded.Server
	lw       *leasewatchProc
	clients  []*clientv3.Client
	sessions []*concurrency.Session
	lost     atomic.Int64 // sessions whose lease ended before the rig closed
	closing  chan struct{}
}

// startEtcdRig starts the rig with its folders in dir: sessions sessions with
// ttl leases over etcdClients connections. config is added to leasewatch's
// configuration after its sources.
func startEtcdRig(ctx context.Context, bin, dir, config string, sessions int, ttl time.Duration, log io.Writer) (rig *etcdRig, err error) {
	r := &etcdRig{closing: make(chan struct{})}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.srv, err = embedded.Start(ctx, filepath.Join(dir, "etcd"), embedded.Options{}); err != nil {
		return nil, err
	}
	r.lw, err = startLeasewatch(ctx, bin, dir, "", fmt.Sprintf(`  - name: %s
    kind: etcd
    endpoints: [%q]
    prefixes: [%q]
%s`, loadSource, r.srv.Endpoint, etcdLoadPrefix, config), log)
	if err != nil {
		return nil, err
	}
	if err := waitUp(ctx, r.lw.url, loadSource); err != nil {
		return nil, err
	}
	if err := r.connect(r.srv.Endpoint, sessions, ttl); err != nil {
		return nil, err
	}
	return r, nil
}

// connect opens etcdClients connections to the etcd at endpoint and
// sessions sessions with ttl leases over them.
func (r *etcdRig) connect(endpoint string, sessions int, ttl time.Duration) error {
	for range etcdClients {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return fmt.Errorf("connect to the embedded etcd: %w", err)
		}
		r.clients = append(r.clients, cli)
	}
	// A pool of sessions, each contending for many locks, as services that
	// share one session among their mutexes do: the leases and keepalives
	// stay few while the locks are many.
	for i := range sessions {
		s, err := concurrency.NewSession(r.clients[i%len(r.clients)], concurrency.WithTTL(int(ttl.Seconds())))
		if err != nil {
			return fmt.Errorf("start session %d: %w", i, err)
		}
		r.sessions = append(r.sessions, s)
		go func() {
			select {
			case <-s.Done():
				r.lost.Add(1)
			case <-r.closing:
			}
		}()
	}
	return nil
}

// close ends the sessions (revoking their locks), the clients, leasewatch and
// etcd, in that order.
func (r *etcdRig) close() {
	close(r.closing)
	for _, s := range r.sessions {
		_ = s.Close()
	}
	for _, cli := range r.clients {
		cli.Close()
	}
	if r.lw != nil {
		r.lw.stop()
	}
	if r.srv != nil {
		r.srv.Close()
	}
}

// contend takes lock l with session s, holds it until told to let go, unlocks
// and queues again, logging every grant and release as the client saw it. It
// returns when a queued Lock ends with queue, or when hold ends while it
// holds the lock, which it then keeps: the session's end revokes it.
func contend(queue, hold context.Context, s *concurrency.Session, l *loggedLock, t *loadTally) {
	m := concurrency.NewMutex(s, l.name)
	for {
		t.queued.Add(1)
		err := m.Lock(queue)
		t.queued.Add(-1)
		if err != nil {
			if queue.Err() == nil {
				t.failed.Add(1)
			}
			return
		}
		l.mu.Lock()
		l.key = m.Key()
		l.tenures = append(l.tenures, loggedTenure{token: ownerRevision(m), key: m.Key(), granted: time.Now()})
		n := len(l.tenures) - 1
		l.mu.Unlock()
		t.inFlight.Add(-1)
		select {
		case <-l.release:
		case <-hold.Done():
			return
		}
		if err := m.Unlock(hold); err != nil {
			t.failed.Add(1)
			return
		}
		l.mu.Lock()
		l.tenures[n].released, l.tenures[n].unlocked = time.Now(), true
		l.mu.Unlock()
	}
}

// sweepQueued deletes every key under the load's prefix but the holders',
// and returns how many it deleted.
func sweepQueued(ctx context.Context, cli *clientv3.Client, locks []*loggedLock) (int, error) {
	holders := make(map[string]bool, len(locks))
	for _, l := range locks {
		l.mu.Lock()
		holders[l.key] = true
		l.mu.Unlock()
	}
	resp, err := cli.Get(ctx, etcdLoadPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, fmt.Errorf("list the queued keys: %w", err)
	}
	n := 0
	for _, kv := range resp.Kvs {
		if holders[string(kv.Key)] {
			continue
		}
		if _, err := cli.Delete(ctx, string(kv.Key)); err != nil {
			return n, fmt.Errorf("delete a queued key: %w", err)
		}
		n++
	}
	return n, nil
}

// ownerRevision is the CreateRevision of m's key, the fencing token of its
// tenure. Mutex keeps it private, but IsOwner's comparison carries it, which
// spares a Get per grant.
func ownerRevision(m *concurrency.Mutex) int64 {
	cmp := m.IsOwner()
	return cmp.GetCompare().GetCreateRevision()
}
