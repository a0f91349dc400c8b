package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/collectors/etcd/embedded"
	"github.com/leasewatch/leasewatch/collectors/redis/redisserver"
)

// The sources of the replicated scenarios, one per backend, and the
// namespace of their Kubernetes Leases.
const (
	etcdSource  = "etcd"
	kubeSource  = "kubernetes"
	redisSource = "redis"
	replicaNS   = "leasewatch-replicas"
)

// replicaSources are the configured sources the replicas share; leasewatch's
// own source (its ownership leases) is the fourth.
var replicaSources = []string{etcdSource, kubeSource, redisSource}

// replicaRig is leasewatch replicas sharing one PostgreSQL database and the
// backends they watch: an embedded etcd (also where they elect each
// source's owner), a kube-apiserver and a redis-server.
type replicaRig struct {
	dir, bin string
	log      io.Writer
	database string
	// namespace holds the Kubernetes source's Leases.
	namespace string
	config    string         // what every replica's configuration holds after its listen and database lines
	pg        *pgtest.Server // the primary
	standby   *pgtest.Server // with replicaOptions.standby: the primary's streaming standby
	async     bool           // the standby is asynchronous
	etcd      *embedded.Server
	redis     *redisserver.Server
	cs        kubernetes.Interface
	stopKube  func()
	replicas  []*replica
}

// replica is one leasewatch replica: a process at a time, each started with
// the same identity and configuration.
type replica struct {
	identity, dir string
	mu            sync.Mutex
	proc          *leasewatchProc // nil while it is down
}

// replicaOptions are what the rig's replicas are configured with.
type replicaOptions struct {
	replicas   int
	lease      time.Duration // the ownership lease
	kubeconfig string        // a cluster to use instead of starting a kube-apiserver
	namespace  string        // of the Kubernetes source's Leases; default replicaNS
	leasewatch string        // the binary; empty: go build
	keep       bool
	// standby gives PostgreSQL a streaming standby, synchronous unless
	// asyncStandby, and the replicas both hosts (pgtest.FailoverURL).
	standby, asyncStandby bool
}

// startReplicaRig starts the backends, PostgreSQL and opt.replicas
// replicas, and waits until every source is up on one of them.
func startReplicaRig(ctx context.Context, opt replicaOptions, log io.Writer) (rig *replicaRig, err error) {
	if opt.namespace == "" {
		opt.namespace = replicaNS
	}
	r := &replicaRig{log: log, namespace: opt.namespace, stopKube: func() {}}
	defer func() {
		if err != nil {
			r.close(opt.keep)
		}
	}()
	if r.dir, err = os.MkdirTemp("", "leasewatch-load-"); err != nil {
		return nil, err
	}
	if opt.keep {
		fmt.Fprintf(log, "keeping %s\n", r.dir)
	}
	kube := kubeLoad{kubeconfig: opt.kubeconfig}
	kubeDir := filepath.Join(r.dir, "kubernetes") // its own etcd's folder is etcd, as the sources' is
	if err := os.Mkdir(kubeDir, 0o700); err != nil {
		return nil, err
	}
	var kubeconfig string
	if kubeconfig, r.cs, r.stopKube, err = kube.connect(ctx, kubeDir, log); err != nil {
		return nil, err
	}
	if r.etcd, err = embedded.Start(ctx, filepath.Join(r.dir, "etcd"), embedded.Options{}); err != nil {
		return nil, err
	}
	if r.redis, err = redisserver.Start(ctx, filepath.Join(r.dir, "redis")); err != nil {
		return nil, err
	}
	if r.pg, err = pgtest.Start(ctx, pgtest.Options{}); err != nil {
		return nil, err
	}
	name, err := r.pg.CreateDatabase(ctx, "leasewatch")
	if err != nil {
		return nil, err
	}
	r.database = r.pg.URL(name)
	if opt.standby {
		if r.database, err = r.addStandby(ctx, opt.asyncStandby); err != nil {
			return nil, err
		}
	}
	if r.bin = opt.leasewatch; r.bin == "" {
		if r.bin, err = buildLeasewatch(ctx, r.dir, log); err != nil {
			return nil, err
		}
	}
	r.config = replicaConfig(r.etcd.Endpoint, kubeconfig, opt.namespace, r.redis.Addr, opt.lease)
	for i := range opt.replicas {
		rep := &replica{identity: fmt.Sprintf("replica-%d", i), dir: filepath.Join(r.dir, fmt.Sprintf("replica-%d", i))}
		if err := os.MkdirAll(rep.dir, 0o700); err != nil {
			return nil, err
		}
		r.replicas = append(r.replicas, rep)
		if err := r.start(ctx, rep); err != nil {
			return nil, err
		}
	}
	return r, r.settle(ctx, time.Minute)
}

// replicaConfig is the replicas' sources, ingest token and replication
// settings: ownership elected on the etcd at endpoint with leases of lease.
func replicaConfig(endpoint, kubeconfig, namespace, redisAddr string, lease time.Duration) string {
	return fmt.Sprintf(`  - name: %s
    kind: etcd
    endpoints: [%q]
    prefixes: [%q]
  - name: %s
    kind: kubernetes
    kubeconfig: %s
    namespaces: [%s]
  - name: %s
    kind: redis
    addr: %s
    patterns: ["lock:*"]
ingest_tokens: [%q]
replication:
  backend: etcd
  endpoints: [%q]
  lease_duration: %s
  renew_deadline: %s
  retry_period: %s
`, etcdSource, endpoint, etcdLoadPrefix, kubeSource, kubeconfig, namespace, redisSource, redisAddr, ingestToken,
		endpoint, lease, lease*3/4, lease*3/20)
}

// start starts a new process of rep.
func (r *replicaRig) start(ctx context.Context, rep *replica) error {
	config := r.config + fmt.Sprintf("  identity: %s\n", rep.identity)
	proc, err := startLeasewatch(ctx, r.bin, rep.dir, r.database, config, r.log)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, time.Minute, rep.identity+" to answer", func() bool {
		_, err := sourceStates(ctx, proc.url)
		return err == nil
	}); err != nil {
		proc.kill()
		return err
	}
	rep.mu.Lock()
	rep.proc = proc
	rep.mu.Unlock()
	return nil
}

// current returns rep's process, nil while it is down.
func (rep *replica) current() *leasewatchProc {
	rep.mu.Lock()
	defer rep.mu.Unlock()
	return rep.proc
}

// down marks rep down and returns the process it had.
func (rep *replica) down() *leasewatchProc {
	rep.mu.Lock()
	defer rep.mu.Unlock()
	p := rep.proc
	rep.proc = nil
	return p
}

// sourceStates returns the state of every source of the leasewatch at base.
func sourceStates(ctx context.Context, base string) (map[string]string, error) {
	var resp struct {
		Sources []struct{ Name, State string }
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := getJSON(ctx, base+"/api/v1/sources", &resp); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(resp.Sources))
	for _, s := range resp.Sources {
		out[s.Name] = s.State
	}
	return out, nil
}

// owners returns, per source, the processes (by id) it is up on, and
// whether the replicas have settled: every replica is up and answered
// with each source up or in standby, and none holds more than its share,
// so that no rebalancing handover is still to come.
func (r *replicaRig) owners(ctx context.Context) (up map[string][]string, settled bool) {
	up = make(map[string][]string)
	settled = true
	held := make(map[string]int) // per process: the sources up on it
	for _, rep := range r.replicas {
		p := rep.current()
		if p == nil {
			settled = false
			continue
		}
		states, err := sourceStates(ctx, p.url)
		if err != nil {
			settled = false
			continue
		}
		for name, state := range states {
			switch state {
			case "up":
				up[name] = append(up[name], p.id())
				held[p.id()]++
			case "standby":
			default:
				settled = false // taking over, or failing
			}
		}
	}
	sources := append(replicaSources, "leasewatch")
	for _, name := range sources {
		settled = settled && len(up[name]) == 1
	}
	share := (len(sources) + len(r.replicas) - 1) / len(r.replicas)
	for _, n := range held {
		settled = settled && n <= share
	}
	return up, settled
}

// settle waits until every replica is up, each source is up on exactly
// one of them, and none holds more than its share.
func (r *replicaRig) settle(ctx context.Context, timeout time.Duration) error {
	return waitFor(ctx, timeout, "each source up on one replica, in standby on the others", func() bool {
		_, settled := r.owners(ctx)
		return settled
	})
}

// urls returns the URLs of the replicas that are up.
func (r *replicaRig) urls() []string {
	var out []string
	for _, rep := range r.replicas {
		if p := rep.current(); p != nil {
			out = append(out, p.url)
		}
	}
	return out
}

// close stops the replicas and the servers, and removes the rig's folder
// unless keep.
func (r *replicaRig) close(keep bool) {
	for _, rep := range r.replicas {
		if p := rep.down(); p != nil {
			p.stop()
		}
	}
	r.stopKube()
	if r.redis != nil {
		r.redis.Stop()
	}
	if r.etcd != nil {
		r.etcd.Close()
	}
	for _, pg := range []*pgtest.Server{r.pg, r.standby} {
		if pg != nil {
			_ = pg.Stop()
		}
	}
	if r.dir != "" && !keep {
		os.RemoveAll(r.dir)
	}
}

// ownerRun is one stretch of samples in which a source was up on one
// process (owner, by id), or on none (owner "").
type ownerRun struct {
	owner       string
	first, last time.Time
}

// ownerLog samples, every 100 ms, which process each source is up on, and
// keeps the runs.
type ownerLog struct {
	mu   sync.Mutex
	runs map[string][]ownerRun
}

// watch samples r until ctx ends.
func (l *ownerLog) watch(ctx context.Context, r *replicaRig) {
	l.runs = make(map[string][]ownerRun)
	for ctx.Err() == nil {
		up, _ := r.owners(ctx)
		now := time.Now()
		l.mu.Lock()
		for _, name := range replicaSources {
			owner := strings.Join(up[name], ",")
			runs := l.runs[name]
			if n := len(runs); n > 0 && runs[n-1].owner == owner {
				runs[n-1].last = now
			} else {
				l.runs[name] = append(runs, ownerRun{owner: owner, first: now, last: now})
			}
		}
		l.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// measure sets how long after d each source its victim had was first
// seen up on another process.
func (l *ownerLog) measure(d *disruption) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d.takeovers = make(map[string]time.Duration)
	for _, source := range d.owned {
		for _, run := range l.runs[source] {
			if run.owner != "" && run.owner != d.victim && !strings.Contains(run.owner, ",") && !run.last.Before(d.at) {
				d.takeovers[source] = audit.MaxTime(run.first, d.at).Sub(d.at)
				break
			}
		}
	}
}

// handovers returns, for source, the gaps between one owner's last sample
// and the next owner's first: where its collector changed hands.
func (l *ownerLog) handovers(source string) [][2]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][2]time.Time
	var prev *ownerRun
	for i := range l.runs[source] {
		run := &l.runs[source][i]
		if run.owner == "" {
			continue
		}
		if prev != nil && prev.owner != run.owner {
			out = append(out, [2]time.Time{prev.last, run.first})
		}
		prev = run
	}
	return out
}

// fencedWriters post write reports to the replicas. A report the replica
// does not answer 202 (it does not own the report's source, or it died
// under the request) is sent again, the same request, to the next replica,
// until one answers 202: what audit/fence's reporter does.
type fencedWriters struct {
	k    ingestLoad // the reports: about the etcd source's locks, some rejected
	rig  *replicaRig
	sent []sentReports
	// retried counts the sends that were not answered 202.
	retried []int
}

// run runs n writers, each posting a report every k.writeEvery or so,
// until ctx ends; a report under way then is still sent until answered, or
// for up to a minute.
func (w *fencedWriters) run(ctx context.Context, n int, locks []*loggedLock) {
	w.sent = make([]sentReports, n)
	w.retried = make([]int, n)
	client := &http.Client{Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { w.writer(ctx, client, i, locks) })
	}
	wg.Wait()
}

func (w *fencedWriters) writer(ctx context.Context, client *http.Client, i int, locks []*loggedLock) {
	rng := rand.New(rand.NewPCG(uint64(i), 3))
	sent := &w.sent[i]
	next := i // the replica to send to first: the last that answered 202
	for seq := 0; ctx.Err() == nil; seq++ {
		report, rejected := w.k.report(rng, etcdSource, locks, fmt.Sprintf("w%d-%d", i, seq))
		sent.acked = append(sent.acked, false)
		sent.rejected = append(sent.rejected, rejected)
		body, _ := json.Marshal(report)
		giveUp := time.Now().Add(time.Minute)
		for ; time.Now().Before(giveUp); next++ {
			urls := w.rig.urls()
			if len(urls) > 0 && post(client, urls[next%len(urls)]+"/api/v1/writes", body, 1) == nil {
				sent.acked[seq] = true
				break
			}
			w.retried[i]++
			time.Sleep(100 * time.Millisecond) // the retry's back-off, as a reporter's
		}
		if sleep(ctx, jitter(rng, w.k.writeEvery)) != nil {
			return
		}
	}
}
