package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	_ "modernc.org/sqlite" // database/sql driver "sqlite" for the demo resources

	"github.com/leasewatch/leasewatch/audit/fence"
)

// The demo's lock names, under the demo source's prefixes.
const (
	demoOrdersLock   = "/locks/orders"
	demoBillingLock  = "/locks/billing"
	demoElectionLock = "/election/scheduler"
	// Session TTLs in seconds. The pauser's is etcd's minimum, so its lease
	// runs out soon after it stalls; the others are long enough that the
	// collector's 1 s TTL resolution tells a release from an expiry.
	demoPauserTTL = 2
	demoWorkerTTL = 5
)

// workload is the demo's traffic: real etcd lock clients contending for
// mutexes and an election, and two protected resources that report every
// write to leasewatch. The "ledger" resource is fenced (a SQL update that
// compares tokens); the "cache" resource is not, so a paused holder's late
// write lands there.
type workload struct {
	cli    *clientv3.Client
	db     *sql.DB
	ledger *fence.Reporter
	cache  *fence.Reporter
	// beliefs is how the pauser tells leasewatch what it believes: a
	// Believer is made per session, each its own holder.
	beliefs fence.BelieverConfig
	log     *slog.Logger
	mu      sync.Mutex // serialises each resource's check-and-write
	pauses  int        // the pauser's stalls so far; only its goroutine uses it
}

func newWorkload(cli *clientv3.Client, dbPath string, ledger, cache *fence.Reporter, beliefs fence.BelieverConfig, log *slog.Logger) (*workload, error) {
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, fmt.Errorf("open demo resources: %w", err)
	}
	db.SetMaxOpenConns(1)
	for _, stmt := range []string{
		// One fenced row per lock: tokens of different locks do not compare.
		`CREATE TABLE IF NOT EXISTS ledger (lock TEXT PRIMARY KEY, entries INTEGER NOT NULL, fence INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS cache (lock TEXT PRIMARY KEY, value TEXT NOT NULL, token INTEGER NOT NULL)`,
		`INSERT OR IGNORE INTO ledger VALUES ('` + demoOrdersLock + `', 0, 0), ('` + demoBillingLock + `', 0, 0)`,
		`INSERT OR IGNORE INTO cache VALUES ('` + demoOrdersLock + `', '', 0)`,
	} {
		if _, err := db.Exec(stmt); err != nil {
			db.Close()
			return nil, fmt.Errorf("prepare demo resources: %w", err)
		}
	}
	return &workload{cli: cli, db: db, ledger: ledger, cache: cache, beliefs: beliefs, log: log}, nil
}

// run starts every worker and returns when ctx ends and they have stopped.
func (w *workload) run(ctx context.Context) {
	var wg sync.WaitGroup
	workers := []func(context.Context, string){
		w.pauser,
		func(ctx context.Context, name string) { w.worker(ctx, name, demoOrdersLock) },
		func(ctx context.Context, name string) { w.worker(ctx, name, demoOrdersLock) },
		func(ctx context.Context, name string) { w.worker(ctx, name, demoBillingLock) },
		func(ctx context.Context, name string) { w.worker(ctx, name, demoBillingLock) },
		w.candidate,
		w.candidate,
	}
	for i, fn := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "worker-" + strconv.Itoa(i+1)
			for ctx.Err() == nil {
				fn(ctx, name)
			}
		}()
	}
	wg.Wait()
	w.db.Close()
}

// worker keeps one session (so one holder) across many tenures: it takes
// the lock, writes to the ledger a few times with its token and unlocks;
// now and then it closes its session instead, which revokes the lease and
// releases the lock that way, and starts a new one.
func (w *workload) worker(ctx context.Context, name, lock string) {
	var s *concurrency.Session
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	for ctx.Err() == nil {
		if s == nil {
			var err error
			if s, err = concurrency.NewSession(w.cli, concurrency.WithTTL(demoWorkerTTL), concurrency.WithContext(ctx)); err != nil {
				w.retryLater(ctx, name, err)
				continue
			}
		}
		m := concurrency.NewMutex(s, lock)
		if err := m.Lock(ctx); err != nil {
			s.Close()
			s = nil
			w.retryLater(ctx, name, err)
			continue
		}
		token, err := w.token(ctx, m.Key())
		if err != nil {
			w.retryLater(ctx, name, err)
			continue
		}
		holder := leaseHex(s.Lease())
		for i := 0; i < 2+rand.IntN(3); i++ {
			w.writeLedger(ctx, lock, holder, token)
			if lock == demoOrdersLock {
				w.writeCache(ctx, lock, holder, token)
			}
			if !sleepCtx(ctx, time.Duration(300+rand.IntN(700))*time.Millisecond) {
				return
			}
		}
		if rand.IntN(5) == 0 {
			s.Close() // revokes the lease: the lock is released with it
			s = nil
		} else {
			_ = m.Unlock(ctx)
		}
		sleepCtx(ctx, time.Duration(100+rand.IntN(400))*time.Millisecond)
	}
}

// pauser holds the orders lock, then stalls like a process in a long GC
// pause: it stops renewing, its lease expires and another worker takes the
// lock. When it wakes it still believes it holds the lock, says so (a
// zombie_holder finding) and writes with its old token; the fenced ledger
// rejects that write, and every other time (the first time included, so a
// new user sees it soon) it also writes to the unfenced cache, which
// accepts it.
func (w *workload) pauser(ctx context.Context, name string) {
	s, err := concurrency.NewSession(w.cli, concurrency.WithTTL(demoPauserTTL), concurrency.WithContext(ctx))
	if err != nil {
		w.retryLater(ctx, name, err)
		return
	}
	m := concurrency.NewMutex(s, demoOrdersLock)
	if err := m.Lock(ctx); err != nil {
		s.Close()
		w.retryLater(ctx, name, err)
		return
	}
	token, err := w.token(ctx, m.Key())
	if err != nil {
		s.Close()
		w.retryLater(ctx, name, err)
		return
	}
	holder := leaseHex(s.Lease())
	w.believe(ctx, holder, token)
	w.writeLedger(ctx, demoOrdersLock, holder, token)
	w.writeCache(ctx, demoOrdersLock, holder, token)

	s.Orphan() // the pause: keepalives stop, the lease runs out
	w.log.Info("demo: worker pauses past its lease", "worker", name, "token", token)
	if !sleepCtx(ctx, time.Duration(demoPauserTTL)*time.Second+2500*time.Millisecond) {
		return
	}
	w.believe(ctx, holder, token)
	w.writeLedger(ctx, demoOrdersLock, holder, token)
	if w.pauses%2 == 0 {
		w.writeCache(ctx, demoOrdersLock, holder, token)
	}
	w.pauses++
	sleepCtx(ctx, time.Duration(2+rand.IntN(4))*time.Second)
}

// believe tells leasewatch that holder acts under token of the orders lock.
func (w *workload) believe(ctx context.Context, holder string, token int64) {
	cfg := w.beliefs
	cfg.Holder = holder
	b, err := fence.NewBeliever(cfg)
	if err == nil {
		err = b.Believe(ctx, demoOrdersLock, token)
	}
	if err != nil && ctx.Err() == nil {
		w.log.Warn("demo: belief not delivered", "holder", holder, "err", err)
	}
}

// candidate campaigns in the scheduler election, leads for a while,
// proclaims a new value once and resigns.
func (w *workload) candidate(ctx context.Context, name string) {
	s, err := concurrency.NewSession(w.cli, concurrency.WithTTL(demoWorkerTTL), concurrency.WithContext(ctx))
	if err != nil {
		w.retryLater(ctx, name, err)
		return
	}
	defer s.Close()
	e := concurrency.NewElection(s, demoElectionLock)
	if err := e.Campaign(ctx, name); err != nil {
		w.retryLater(ctx, name, err)
		return
	}
	if !sleepCtx(ctx, time.Duration(2+rand.IntN(3))*time.Second) {
		return
	}
	_ = e.Proclaim(ctx, name+" (draining)")
	sleepCtx(ctx, time.Second)
	_ = e.Resign(ctx)
	sleepCtx(ctx, time.Duration(500+rand.IntN(1000))*time.Millisecond)
}

// token returns the fencing token of the lock key: its CreateRevision.
func (w *workload) token(ctx context.Context, key string) (int64, error) {
	resp, err := w.cli.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, errors.New("lock key vanished: the session expired")
	}
	return resp.Kvs[0].CreateRevision, nil
}

// writeLedger performs a fenced write and reports its outcome.
func (w *workload) writeLedger(ctx context.Context, lock, holder string, token int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	outcome, err := fence.Exec(ctx, w.db, `UPDATE ledger SET entries = entries + 1, fence = ? WHERE lock = ? AND fence <= ?`, token, lock, token)
	if err != nil {
		return
	}
	var highest int64
	_ = w.db.QueryRowContext(ctx, `SELECT fence FROM ledger WHERE lock = ?`, lock).Scan(&highest)
	w.ledger.Report(fence.Write{Lock: lock, Token: &token, Outcome: outcome, HighestToken: &highest, Holder: holder})
}

// writeCache writes without checking the token: whatever arrives lands.
func (w *workload) writeCache(ctx context.Context, lock, holder string, token int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.db.ExecContext(ctx, `UPDATE cache SET value = ?, token = ? WHERE lock = ?`, holder, token, lock); err != nil {
		return
	}
	w.cache.Report(fence.Write{Lock: lock, Token: &token, Outcome: fence.Accepted, Holder: holder})
}

func (w *workload) retryLater(ctx context.Context, name string, err error) {
	if ctx.Err() == nil {
		w.log.Debug("demo: worker retries", "worker", name, "err", err)
		sleepCtx(ctx, 500*time.Millisecond)
	}
}

func leaseHex(id clientv3.LeaseID) string { return strconv.FormatInt(int64(id), 16) }

// sleepCtx waits for d or until ctx ends, and reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
