package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// failoverLoad is the replicated scenario: two replicas share the sources
// while their clients change etcd locks, renew Kubernetes Leases and extend
// Redis locks, and resources report fenced writes to either replica. The
// failover kills the owner of a source (kill -9) at random moments and
// starts it again at once, as a node's death and its pod's restart; the
// rolling restart stops each replica in turn (SIGTERM) and starts it again,
// as a Deployment's RollingUpdate. Then it checks what leasewatch stored
// against what the clients logged.
type failoverLoad struct {
	replicaOptions
	rolling    bool          // restart each replica in turn instead of killing owners
	database   bool          // fail PostgreSQL over to its standby instead of killing owners
	kills      int           // kill -9s of an owner, or database failovers
	every      time.Duration // mean time between disruptions, once the replicas have settled
	etcdLocks  int
	hold       time.Duration // how long each etcd lock is held before it changes hands
	leases     int           // Kubernetes Leases
	renewEvery time.Duration
	redisLocks int
	extend     time.Duration // extension period of each Redis lock
	writers    int
	writeEvery time.Duration
	seed       uint64
}

// flags registers the scenario's flags on fs; scenario picks the
// disruption: failover (kill -9 of owners), rolling or dbfailover.
func (k *failoverLoad) flags(fs *flag.FlagSet, scenario string) {
	k.rolling, k.database, k.replicas = scenario == "rolling", scenario == "dbfailover", 2
	switch scenario {
	case "failover":
		fs.IntVar(&k.kills, "kills", 20, "kill -9s of the owner of a source, each at a random moment")
	case "dbfailover":
		k.standby = true
		fs.IntVar(&k.kills, "failovers", 20, "PostgreSQL failovers: the primary killed, its standby promoted, the old primary rebuilt as the new one's standby")
		fs.BoolVar(&k.asyncStandby, "async", false, "an asynchronous standby (synchronous_standby_names empty): measures what a failover can lose")
	}
	fs.DurationVar(&k.every, "every", 5*time.Second, "mean time between disruptions (±50%), once every source is up again")
	fs.DurationVar(&k.lease, "lease", 2*time.Second, "the ownership lease's duration")
	fs.IntVar(&k.etcdLocks, "etcd-locks", 50, "concurrency.Mutex locks on etcd, each with 2 contenders")
	fs.DurationVar(&k.hold, "hold", 2*time.Second, "how long each etcd lock is held before it changes hands")
	fs.IntVar(&k.leases, "leases", 200, "Kubernetes Leases")
	fs.DurationVar(&k.renewEvery, "renew-every", 2*time.Second, "renewal period of each Lease")
	fs.IntVar(&k.redisLocks, "redis-locks", 200, "Redis string locks")
	fs.DurationVar(&k.extend, "extend-every", 500*time.Millisecond, "extension period of each Redis lock (TTL: 4 periods)")
	fs.IntVar(&k.writers, "writers", 20, "resources posting fenced write reports to the replicas")
	fs.DurationVar(&k.writeEvery, "write-every", 500*time.Millisecond, "a writer's pause between reports (±50%)")
	fs.Uint64Var(&k.seed, "seed", uint64(time.Now().UnixNano()), "seed of the disruptions' moments and victims")
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "use this cluster instead of starting a test apiserver")
	fs.StringVar(&k.leasewatch, "leasewatch", "", "leasewatch binary (default: go build ./cmd/leasewatch)")
	fs.BoolVar(&k.keep, "keep", false, "keep the run's folder (the replicas' configurations and logs, the servers' data) and say where")
}

// disruption is one kill or restart of a replica.
type disruption struct {
	at        time.Time
	replica   string
	victim    string                   // the process killed or stopped, by id
	owned     []string                 // the sources it had up
	takeovers map[string]time.Duration // per source it had: until up on another process
	outage    time.Duration            // a database failover: until every source is up and every replica ready
}

// failoverResult is what a run did and found.
type failoverResult struct {
	wall        time.Duration
	disruptions []disruption
	etcd        lockOutcome
	kube        kubeOutcome
	writes      ingestResult
	sent, acked int // write reports made, and answered 202
	retried     int // sends not answered 202, made again
	blinds      map[string][]blindWindow
	handovers   [][2]time.Time // of the Redis source's collector, as sampled, and the outages
	// outages are the database failovers', from the kill until every
	// source recorded again: a Redis collector whose input failed in one
	// has a blind window over it, one whose inputs all went in has none.
	outages [][2]time.Time
	cursors cursorLog
	drained time.Duration
}

func (k *failoverLoad) run(ctx context.Context, out, log io.Writer) error {
	if k.kills < 0 || k.every <= 0 || k.etcdLocks < 1 || k.leases < 1 || k.redisLocks < 1 || k.writers < 0 {
		return fmt.Errorf("want a positive --every and at least one lock, Lease and Redis lock")
	}
	res, err := k.execute(ctx, log)
	if err != nil {
		return err
	}
	k.write(out, res)
	return k.check(res)
}

// execute sets the rig up, runs the load through the disruptions, stops it
// and reads what leasewatch stored.
func (k *failoverLoad) execute(ctx context.Context, log io.Writer) (*failoverResult, error) {
	start := time.Now()
	rig, err := startReplicaRig(ctx, k.replicaOptions, log)
	if err != nil {
		return nil, err
	}
	defer rig.close(k.keep)
	clients, err := k.startClients(ctx, rig)
	if err != nil {
		return nil, err
	}
	defer clients.close()

	watchCtx, stopWatching := context.WithCancel(ctx)
	var owners ownerLog
	var cursors cursorLog
	var watching sync.WaitGroup
	watching.Go(func() { owners.watch(watchCtx, rig) })
	watching.Go(func() { cursors.watch(watchCtx, rig.database, rig.namespace) })
	defer func() { stopWatching(); watching.Wait() }()

	res := &failoverResult{}
	disrupt := k.disrupt
	if k.database {
		disrupt = k.failOverDatabase
	}
	if res.disruptions, err = disrupt(ctx, rig); err != nil {
		return nil, err
	}
	if err := clients.stop(ctx); err != nil {
		return nil, err
	}
	if err := rig.settle(ctx, time.Minute); err != nil {
		return nil, err
	}
	if res.drained, err = clients.drain(ctx, rig.database); err != nil {
		return nil, err
	}
	stopWatching()
	watching.Wait()
	for i := range res.disruptions {
		d := &res.disruptions[i]
		owners.measure(d)
		fmt.Fprintf(log, "disruption %d: %v taken over in %v\n", i+1, d.owned, d.takeovers)
	}
	if err := clients.read(ctx, rig.database, res); err != nil {
		return nil, err
	}
	if res.blinds, err = blindWindows(ctx, rig.database); err != nil {
		return nil, err
	}
	res.handovers = owners.handovers(redisSource)
	for _, d := range res.disruptions {
		if d.outage > 0 {
			res.outages = append(res.outages, [2]time.Time{d.at, d.at.Add(d.outage)})
		}
	}
	// The handovers within an outage are one gap with it.
	res.handovers = mergeGaps(append(res.handovers, res.outages...))
	res.cursors = cursors
	res.wall = time.Since(start)
	return res, nil
}

// disrupt kills owners (or, rolling, restarts each replica in turn), one
// disruption at a time: each at a random moment once every source is up
// again, and the replica started again at once.
func (k *failoverLoad) disrupt(ctx context.Context, rig *replicaRig) ([]disruption, error) {
	rng := rand.New(rand.NewPCG(k.seed, 4))
	n := k.kills
	if k.rolling {
		n = len(rig.replicas)
	}
	var out []disruption
	for i := range n {
		if err := sleep(ctx, jitter(rng, k.every)); err != nil {
			return nil, err
		}
		up, _ := rig.owners(ctx)
		rep := rig.replicas[i%len(rig.replicas)]
		if !k.rolling {
			// The owner of a source picked at random.
			source := replicaSources[rng.IntN(len(replicaSources))]
			rep = rig.replicaAt(up[source])
		}
		if rep == nil {
			return nil, fmt.Errorf("disruption %d: no replica to disrupt (sources up: %v)", i+1, up)
		}
		d := disruption{replica: rep.identity}
		proc := rep.down()
		for _, name := range replicaSources {
			if slices.Contains(up[name], proc.id()) {
				d.owned = append(d.owned, name)
			}
		}
		d.at = time.Now()
		if k.rolling {
			proc.stop()
		} else {
			proc.kill()
		}
		if err := rig.start(ctx, rep); err != nil {
			return nil, fmt.Errorf("start %s again: %w", rep.identity, err)
		}
		if err := rig.settle(ctx, time.Minute); err != nil {
			return nil, fmt.Errorf("after disruption %d (%s of %s): %w", i+1, map[bool]string{true: "restart", false: "kill -9"}[k.rolling], rep.identity, err)
		}
		d.victim = proc.id()
		fmt.Fprintf(rig.log, "disruption %d at %s: %s, which had %v up\n", i+1, d.at.UTC().Format(time.StampMilli), d.victim, d.owned)
		out = append(out, d)
	}
	return out, nil
}

// replicaAt returns the replica whose process is the only one of ids.
func (r *replicaRig) replicaAt(ids []string) *replica {
	if len(ids) != 1 {
		return nil
	}
	for _, rep := range r.replicas {
		if p := rep.current(); p != nil && p.id() == ids[0] {
			return rep
		}
	}
	return nil
}

// blindWindow is one stored blind window of a source.
type blindWindow struct {
	from, to time.Time
	reason   string
}

// blindWindows reads every source's blind windows from database.
func blindWindows(ctx context.Context, database string) (map[string][]blindWindow, error) {
	db, err := openDatabase(database)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT source, from_at, to_at, reason FROM source_blinds ORDER BY source, from_at`)
	if err != nil {
		return nil, fmt.Errorf("read the blind windows: %w", err)
	}
	defer rows.Close()
	out := make(map[string][]blindWindow)
	for rows.Next() {
		var source, reason string
		var from, to int64
		if err := rows.Scan(&source, &from, &to, &reason); err != nil {
			return nil, err
		}
		out[source] = append(out[source], blindWindow{time.Unix(0, from), time.Unix(0, to), reason})
	}
	return out, rows.Err()
}

// cursorLog samples the stored cursors of the etcd and Kubernetes sources
// and notes every one that moved back.
type cursorLog struct {
	samples     int
	regressions []string
}

// watch samples the cursors in database every 200 ms until ctx ends; the
// Kubernetes source watches namespace. The
// load's backends give out integer revisions, so their order can be
// checked: the Kubernetes cursor is the namespace's resourceVersion, an
// etcd revision of the apiserver's.
func (c *cursorLog) watch(ctx context.Context, database, namespace string) {
	db, err := openDatabase(database)
	if err != nil {
		c.regressions = append(c.regressions, err.Error())
		return
	}
	defer db.Close()
	last := map[string]int64{}
	for ctx.Err() == nil {
		rows, err := db.QueryContext(ctx, `SELECT source, position FROM cursors WHERE source IN ($1, $2)`, etcdSource, kubeSource)
		for err == nil && rows.Next() {
			var source, pos string
			if err = rows.Scan(&source, &pos); err != nil {
				break
			}
			if v, perr := url.ParseQuery(pos); perr == nil && v.Has(namespace) {
				pos = v.Get(namespace)
			}
			rev, perr := strconv.ParseInt(pos, 10, 64)
			switch {
			case perr != nil:
				c.regressions = append(c.regressions, fmt.Sprintf("%s: cursor %q is not a revision", source, pos))
			case rev < last[source]:
				c.regressions = append(c.regressions, fmt.Sprintf("%s: cursor moved back from %d to %d", source, last[source], rev))
			}
			last[source] = max(last[source], rev)
		}
		if rows != nil {
			rows.Close()
		}
		c.samples++
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// replicaClients are the load's clients of the three backends and its
// fenced writers.
type replicaClients struct {
	k        *failoverLoad
	etcd     *etcdRig
	locks    []*loggedLock
	tally    loadTally
	leases   []*lease
	kubeDone sync.WaitGroup
	updates  atomic.Int64
	conflict atomic.Int64
	skipped  atomic.Int64
	redis    *redisRig
	redisOut chan *tally
	writers  fencedWriters
	written  sync.WaitGroup

	stopQueue, stopHolding, stopLoad context.CancelFunc
	contending                       sync.WaitGroup
	handovers                        func()
}

// startClients starts every client: the etcd locks' contenders and their
// handovers, the Leases' renewals, the Redis locks' extensions and the
// writers.
func (k *failoverLoad) startClients(ctx context.Context, rig *replicaRig) (c *replicaClients, err error) {
	c = &replicaClients{k: k, redisOut: make(chan *tally, 1)}
	loadCtx, stopLoad := context.WithCancel(ctx)
	queueCtx, stopQueue := context.WithCancel(ctx)
	holdCtx, stopHolding := context.WithCancel(ctx)
	c.stopLoad, c.stopQueue, c.stopHolding = stopLoad, stopQueue, stopHolding
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if _, err := rig.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rig.namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return c, err
	}
	if c.leases, err = createLeases(ctx, rig.cs, rig.namespace, "holder-", k.leases, int32(max(10, 5*k.renewEvery.Seconds()))); err != nil {
		return c, err
	}
	c.kubeDone.Go(func() { renewLoop(loadCtx, rig.cs, c.leases, k.renewEvery, &c.updates, &c.conflict, &c.skipped) })

	const sessions = 4
	c.etcd = &etcdRig{closing: make(chan struct{})}
	if err := c.etcd.connect(rig.etcd.Endpoint, sessions, 5*time.Second); err != nil {
		return c, err
	}
	etcdK := &etcdLoad{locks: k.etcdLocks, contenders: 2, sessions: sessions, hold: k.hold}
	for i := range k.etcdLocks {
		c.locks = append(c.locks, &loggedLock{name: fmt.Sprintf("%slock-%d", etcdLoadPrefix, i), release: make(chan struct{}, 1)})
	}
	etcdK.startContenders(ctx, queueCtx, holdCtx, c.etcd.sessions, c.locks, &c.tally, &c.contending)
	// Reports name a lock's holder: each lock has had its first one.
	if err := waitFor(ctx, time.Minute, "every etcd lock's first grant", func() bool { return c.tally.inFlight.Load() == 0 }); err != nil {
		return c, err
	}
	c.handovers = signalHandovers(loadCtx, c.locks, k.hold, &c.tally)

	c.redis = &redisRig{srv: rig.redis}
	if err := c.redis.connect(ctx); err != nil {
		return c, err
	}
	rk := &redisLoad{locks: k.redisLocks, ttl: 4 * k.extend, every: k.extend}
	go func() { c.redisOut <- rk.drive(loadCtx, c.redis) }()

	c.writers = fencedWriters{k: ingestLoad{rejected: 0.1, writeEvery: k.writeEvery}, rig: rig}
	c.written.Go(func() { c.writers.run(loadCtx, k.writers, c.locks) })
	return c, nil
}

// stop ends the load: the renewals, extensions and reports in flight are
// answered, the last etcd handovers are made and the queued Locks end.
func (c *replicaClients) stop(ctx context.Context) error {
	c.stopLoad()
	c.kubeDone.Wait()
	<-c.redisOut
	c.written.Wait()
	c.handovers()
	_, _, err := settle(ctx, &c.tally, c.etcd, c.stopQueue, c.locks)
	return err
}

// drain waits until leasewatch has stored every etcd grant and release and
// every Lease write the clients made, or has stopped making progress.
func (c *replicaClients) drain(ctx context.Context, database string) (time.Duration, error) {
	grantsMade, releasesMade, _, _ := madeCounts(c.locks)
	want := expectedKinds(c.leases)
	var failed error
	took := waitProgress(ctx, 30*time.Second, func() (bool, float64) {
		grants, err1 := recordedPerLock(ctx, database, etcdSource, "grant")
		releases, err2 := recordedPerLock(ctx, database, etcdSource, "release")
		writes, err3 := recordedWrites(ctx, database, kubeSource)
		if failed = errors.Join(err1, err2, err3); failed != nil {
			return true, 0
		}
		gd, _ := compareCounts(grantsMade, grants)
		rd, _ := compareCounts(releasesMade, releases)
		matched := checkLeases(c.leases, writes).matched
		return gd == 0 && rd == 0 && matched == want.writes, float64(matched - gd - rd)
	})
	return took, failed
}

// read compares what leasewatch stored with what the clients logged.
func (c *replicaClients) read(ctx context.Context, database string, res *failoverResult) error {
	var err error
	if res.etcd, err = readLockOutcome(ctx, database, etcdSource, c.locks); err != nil {
		return err
	}
	writes, err := recordedWrites(ctx, database, kubeSource)
	if err != nil {
		return err
	}
	res.kube = kubeOutcome{want: expectedKinds(c.leases), check: checkLeases(c.leases, writes), updates: c.updates.Load()}
	if err := checkStored(ctx, database, c.writers.sent, &res.writes); err != nil {
		return err
	}
	for i, s := range c.writers.sent {
		res.retried += c.writers.retried[i]
		res.sent += len(s.acked)
		for _, acked := range s.acked {
			if acked {
				res.acked++
			}
		}
	}
	return nil
}

// close stops whatever of the clients is still running.
func (c *replicaClients) close() {
	c.stopLoad()
	c.stopQueue()
	c.stopHolding()
	c.contending.Wait()
	if c.etcd != nil {
		c.etcd.close()
	}
	if c.redis != nil && c.redis.cli != nil {
		c.redis.cli.Close()
	}
}
