package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// shardSources are the configured sources of the sharding test: with
// leasewatch's own, seven shared by three replicas, so the shares differ
// (3, 2 and 2 of them).
var shardSources = []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}

// Three replicas share seven sources (six etcd sources and leasewatch's
// own) on one PostgreSQL store. Each source runs on exactly one replica at
// every poll, each replica within its share; a kill -9 moves the dead
// replica's sources to the other two within the bound; the replica started
// again gets its share back, and the etcd sources move without a blind
// window: every lock handover made meanwhile is stored exactly once.
func TestShardingSpreadsTakesOverAndRebalances(t *testing.T) {
	database := pg.Get(t).Database(t)
	etcdSrv, cli := startEtcd(t)
	configs, procs, bases, _ := startShards(t, database, etcdSrv.Endpoint, 3, shardSources)
	shared := append(slices.Clone(shardSources), "leasewatch")
	watch := watchOwners(t, bases)
	// The first replica took them all, and gave some up to each that
	// joined: wait for the last moves.
	held := waitSpread(t, bases, []int{0, 1, 2}, shared, 2, 10*time.Second, "each replica to hold 2 or 3 of the sources")
	t.Logf("steady state: replicas hold %v of %d sources", held, len(shared))

	up, _ := owners(t, bases)
	victim := up["alpha"][0]
	var survivors []int
	for i := range bases {
		if i != victim {
			survivors = append(survivors, i)
		}
	}
	watch.setBase(victim, "")
	procs[victim].kill()
	killed := time.Now()
	held = waitSpread(t, bases, survivors, shared, 1, replicaTakeoverBound, "the survivors to run every source, each within its share")
	t.Logf("takeover after kill -9 of replica-%d: %s (bound %s); survivors hold %v",
		victim, time.Since(killed).Round(time.Millisecond), replicaTakeoverBound, held)

	handovers := startHandovers(t, cli, shardSources)
	restarted := time.Now()
	procs[victim] = startServeProcess(t, configs[victim])
	bases[victim] = procs[victim].waitListening(t, time.Minute)
	watch.setBase(victim, bases[victim])
	held = waitSpread(t, bases, []int{0, 1, 2}, shared, 2, 20*time.Second, "the returning replica to get its share back, each replica holding 2 or 3")
	t.Logf("rebalance after the restart of replica-%d: %s; replicas hold %v", victim, time.Since(restarted).Round(time.Millisecond), held)

	made := handovers.stop(t)
	checkHandoversStoredOnce(t, openReadOnly(t, database), made)
	checkNoFindings(t, bases[survivors[0]], "blind_window", shardSources...)
	checkNoFindings(t, bases[survivors[0]], "overlap", "leasewatch")
	checkNoFindings(t, bases[survivors[0]], "token_regression", "leasewatch")
	checkNoFindings(t, bases[survivors[0]], "token_reuse", "leasewatch")
	watch.check(t)
}

// waitSpread waits until each of shared is up on exactly one replica of
// live, each of them running at least low and at most its share, and
// returns how many each runs.
func waitSpread(t *testing.T, bases []string, live []int, shared []string, low int, timeout time.Duration, what string) map[int]int {
	t.Helper()
	liveBases := make([]string, len(live))
	for j, i := range live {
		liveBases[j] = bases[i]
	}
	var held map[int]int
	eventually(t, timeout, what, func() bool {
		upLive, clean := owners(t, liveBases)
		up := make(map[string][]int, len(upLive))
		for name, js := range upLive {
			for _, j := range js {
				up[name] = append(up[name], live[j])
			}
		}
		var fair bool
		held, fair = spread(up, shared, live, low)
		return clean && fair
	})
	return held
}

// ownerWatch polls every replica's sources every 100 ms, all replicas at
// once, and keeps every poll on which a source was up on two of them.
type ownerWatch struct {
	mu       sync.Mutex
	bases    []string // "" for a replica that is down
	problems []string
	polls    int
}

// watchOwners starts an ownerWatch of bases until the test ends.
func watchOwners(t *testing.T, bases []string) *ownerWatch {
	w := &ownerWatch{bases: slices.Clone(bases)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w.poll()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// setBase sets replica i's base URL; "" stops polling it (it is killed).
func (w *ownerWatch) setBase(i int, base string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bases[i] = base
}

func (w *ownerWatch) poll() {
	w.mu.Lock()
	bases := slices.Clone(w.bases)
	w.mu.Unlock()
	states := make([]map[string]string, len(bases))
	errs := make([]error, len(bases))
	var wg sync.WaitGroup
	for i, base := range bases {
		if base != "" {
			wg.Go(func() { states[i], errs[i] = readSourceStates(base) })
		}
	}
	wg.Wait()
	at := time.Now().Format("15:04:05.000")
	up := map[string][]int{}
	var problems []string
	w.mu.Lock()
	for i := range bases {
		// A replica killed while it was polled is no problem.
		if errs[i] != nil && w.bases[i] == bases[i] {
			problems = append(problems, fmt.Sprintf("%s: replica-%d: %v", at, i, errs[i]))
		}
		for name, state := range states[i] {
			if state == "up" {
				up[name] = append(up[name], i)
			}
		}
	}
	for name, replicas := range up {
		if len(replicas) > 1 {
			problems = append(problems, fmt.Sprintf("%s: source %s up on replicas %v at once", at, name, replicas))
		}
	}
	w.polls++
	w.problems = append(w.problems, problems...)
	w.mu.Unlock()
}

// check fails the test with every problem the polls saw.
func (w *ownerWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.problems) > 0 {
		t.Errorf("%d problems in %d polls of every replica's sources:\n%s",
			len(w.problems), w.polls, strings.Join(w.problems[:min(len(w.problems), 20)], "\n"))
	}
	t.Logf("%d polls of every replica's sources, each source up on at most one", w.polls)
}

// handoverLoad locks and unlocks an etcd mutex on each source in turn, one
// lock /locks/SOURCE/job each, until stopped.
type handoverLoad struct {
	cancel context.CancelFunc
	done   chan struct{}
	made   map[string]int // per source, lock and unlock pairs completed
	err    error
}

// startHandovers starts a handoverLoad on sources.
func startHandovers(t *testing.T, cli *clientv3.Client, sources []string) *handoverLoad {
	ctx, cancel := context.WithCancel(context.Background())
	h := &handoverLoad{cancel: cancel, done: make(chan struct{}), made: make(map[string]int)}
	go func() {
		defer close(h.done)
		for i := 0; ctx.Err() == nil; i++ {
			src := sources[i%len(sources)]
			if err := lockHandover(ctx, cli, "/locks/"+src+"/job"); err != nil {
				if ctx.Err() == nil {
					h.err = fmt.Errorf("handover on %s: %w", src, err)
				}
				return
			}
			h.made[src]++
		}
	}()
	t.Cleanup(h.halt)
	return h
}

// lockHandover is one grant and release of the mutex at key, in a session of
// its own.
func lockHandover(ctx context.Context, cli *clientv3.Client, key string) error {
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		return err
	}
	defer sess.Close()
	m := concurrency.NewMutex(sess, key)
	// A handover cut short by stop would be half made: it gets its own
	// context, so that every counted lock has its unlock.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := m.Lock(hctx); err != nil {
		return err
	}
	return m.Unlock(hctx)
}

func (h *handoverLoad) halt() { h.cancel(); <-h.done }

// stop ends the load and returns, per source, how many handovers it made.
func (h *handoverLoad) stop(t *testing.T) map[string]int {
	t.Helper()
	h.halt()
	if h.err != nil {
		t.Fatal(h.err)
	}
	return h.made
}

// checkHandoversStoredOnce waits until the store holds made's grants and
// releases, per source, and fails unless it holds each exactly once and
// nothing that says a collector lost its place (transitions).
func checkHandoversStoredOnce(t *testing.T, db *storeDB, made map[string]int) {
	t.Helper()
	total := 0
	for _, src := range shardSources {
		total += made[src]
		stored := func() (int, int) { return storedTransitions(t, db, src) }
		eventually(t, 20*time.Second, fmt.Sprintf("the %d handovers on %s to be stored", made[src], src), func() bool {
			g, r := stored()
			return g >= made[src] && r >= made[src]
		})
		if g, r := stored(); g != made[src] || r != made[src] {
			t.Errorf("%s: %d grants and %d releases stored, want %d each, once", src, g, r, made[src])
		}
	}
	t.Logf("%d lock handovers during the rebalance, each grant and release stored once", total)
}

// checkNoFindings fails the test if the service at base has a finding of
// kind on any of sources.
func checkNoFindings(t *testing.T, base, kind string, sources ...string) {
	t.Helper()
	for _, src := range sources {
		var resp struct{ Findings []apiFinding }
		getJSON(t, base, fmt.Sprintf("/api/v1/findings?kind=%s&source=%s&class=all", kind, src), &resp)
		if len(resp.Findings) > 0 {
			t.Errorf("source %s has %d %s findings, want none: %+v", src, len(resp.Findings), kind, resp.Findings)
		}
	}
}
