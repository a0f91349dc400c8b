package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/collectors/redis/redisserver"
)

// redisLoad is the Redis scenario: many string locks taken with SET NX PX and
// kept by extending their TTL, as redsync does.
type redisLoad struct {
	locks      int
	ttl        time.Duration
	every      time.Duration
	warmup     time.Duration
	duration   time.Duration
	leasewatch string
	keep       bool // keep the run's folder (database, config) for inspection
}

// extendScript extends a lock only while it holds the caller's value
// (redsync's extend).
const extendScript = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`

// The load's clients: loadWorkers connections, each pipelining up to
// loadPipeline locks' commands per round trip.
const (
	loadWorkers  = 16
	loadPipeline = 64
)

// tally is what the load did, as redis-server answered it.
type tally struct {
	held                  []atomic.Bool
	extended              []atomic.Int64 // per lock
	grants, renewals      atomic.Int64
	lost, skipped, failed atomic.Int64
}

// send takes or extends the locks of batch in one pipeline, and counts what
// happened. A command without an answer may or may not have run: it is
// counted as failed, and a run with failures cannot be compared exactly.
func (k *redisLoad) send(cli *goredis.Client, extend *goredis.Script, batch []int, t *tally) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmds := make([]goredis.Cmder, len(batch))
	_, _ = cli.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for n, i := range batch {
			key, value := "lock:"+strconv.Itoa(i), "holder-"+strconv.Itoa(i)
			if !t.held[i].Load() {
				cmds[n] = p.SetNX(ctx, key, value, k.ttl)
			} else {
				cmds[n] = extend.EvalSha(ctx, p, []string{key}, value, k.ttl.Milliseconds())
			}
		}
		return nil
	})
	for n, i := range batch {
		switch c := cmds[n].(type) {
		case *goredis.BoolCmd:
			ok, err := c.Result()
			switch {
			case err != nil:
				t.failed.Add(1)
			case ok:
				t.held[i].Store(true)
				t.grants.Add(1)
			}
		case *goredis.Cmd:
			v, err := c.Int64()
			switch {
			case err != nil:
				t.failed.Add(1)
			case v == 1:
				t.renewals.Add(1)
				t.extended[i].Add(1)
			default:
				t.held[i].Store(false) // it expired before the extension: take it again
				t.lost.Add(1)
			}
		}
	}
}

// redisRig is a redis-server on loopback with a leasewatch process
// recording its lock:* keys, and a client for the load.
type redisRig struct {
	dir    string
	srv    *redisserver.Server
	lw     *leasewatchProc
	cli    *goredis.Client
	extend *goredis.Script
	keep   bool
	pg     *pgtest.Server // leasewatch's database, when on PostgreSQL
}

// startRedisRig starts the rig; config is added to leasewatch's
// configuration after its sources. With postgres, leasewatch's database is
// on a PostgreSQL server of the rig's own (Debian's, run as pgtest runs
// it, with its default settings) instead of a SQLite file.
func startRedisRig(ctx context.Context, bin string, keep, postgres bool, config string, log io.Writer) (rig *redisRig, err error) {
	r := &redisRig{keep: keep}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.dir, err = os.MkdirTemp("", "leasewatch-load-"); err != nil {
		return nil, err
	}
	if keep {
		fmt.Fprintf(log, "keeping %s\n", r.dir)
	}
	if r.srv, err = redisserver.Start(ctx, filepath.Join(r.dir, "redis")); err != nil {
		return nil, err
	}
	var database string
	if postgres {
		if r.pg, err = pgtest.Start(ctx, pgtest.Options{}); err != nil {
			return nil, err
		}
		name, err := r.pg.CreateDatabase(ctx, "leasewatch")
		if err != nil {
			return nil, err
		}
		database = r.pg.URL(name)
		fmt.Fprintf(log, "leasewatch's database: PostgreSQL at %s, data in %s\n", r.pg.Addr, r.pg.DataDir)
	}
	r.lw, err = startLeasewatch(ctx, bin, r.dir, database, fmt.Sprintf(`  - name: %s
    kind: redis
    addr: %s
    patterns: ["lock:*"]
%s`, loadSource, r.srv.Addr, config), log)
	if err != nil {
		return nil, err
	}
	if err := waitUp(ctx, r.lw.url, loadSource); err != nil {
		return nil, err
	}
	if err := r.connect(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// connect opens the load's client of r.srv and loads the extend script.
func (r *redisRig) connect(ctx context.Context) error {
	r.cli = goredis.NewClient(&goredis.Options{Addr: r.srv.Addr, PoolSize: loadWorkers})
	r.extend = goredis.NewScript(extendScript)
	return r.extend.Load(ctx, r.cli).Err()
}

func (r *redisRig) close() {
	if r.cli != nil {
		r.cli.Close()
	}
	if r.lw != nil {
		r.lw.stop()
	}
	if r.srv != nil {
		r.srv.Stop()
	}
	if r.pg != nil {
		r.pg.Stop()
	}
	if r.dir != "" && !r.keep {
		os.RemoveAll(r.dir)
	}
}

// drive takes and extends k.locks locks on r's redis-server until ctx ends,
// and returns what it did once every command sent has been answered.
func (k *redisLoad) drive(ctx context.Context, r *redisRig) *tally {
	t := &tally{held: make([]atomic.Bool, k.locks), extended: make([]atomic.Int64, k.locks)}
	work := make(chan int, k.locks)
	var wg sync.WaitGroup
	// Each worker sends what is due in one pipeline: many clients' worth of
	// commands for little of the load tool's own CPU, which shares the
	// machine with redis-server and leasewatch.
	for range loadWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				batch := []int{i}
			more:
				for len(batch) < loadPipeline {
					select {
					case j, ok := <-work:
						if !ok {
							break more
						}
						batch = append(batch, j)
					default:
						break more
					}
				}
				k.send(r.cli, r.extend, batch, t)
			}
		}()
	}
	dispatch(ctx, k.locks, k.every, func(i int) {
		select {
		case work <- i:
		default: // redis-server is behind: skip rather than queue without bound
			t.skipped.Add(1)
		}
	})
	close(work)
	wg.Wait()
	return t
}

func (k *redisLoad) run(ctx context.Context, out, log io.Writer) error {
	rig, err := startRedisRig(ctx, k.leasewatch, k.keep, false, "", log)
	if err != nil {
		return err
	}
	defer rig.close()
	url := rig.lw.url

	fmt.Fprintf(log, "%d locks with %s TTLs extended every %s: %s of warm-up, %s measured\n", k.locks, k.ttl, k.every, k.warmup, k.duration)
	loadCtx, stopLoad := context.WithCancel(ctx)
	done := make(chan *tally, 1)
	go func() { done <- k.drive(loadCtx, rig) }()
	w, err := measure(ctx, url, rig.lw.cmd.Process.Pid, loadSource, k.warmup, k.duration)
	stopLoad()
	t := <-done
	if err != nil {
		return err
	}

	// Drain: every grant and extension must be recorded exactly once.
	drained := drain(ctx, url, loadSource, map[string]float64{"grant": float64(t.grants.Load()), "renew": float64(t.renewals.Load())})
	gotGrants, gotRenewals := recorded(ctx, url, loadSource, "grant"), recorded(ctx, url, loadSource, "renew")
	made := make(map[string]int64, k.locks)
	for i := range t.extended {
		if n := t.extended[i].Load(); n > 0 {
			made["lock:"+strconv.Itoa(i)] = n
		}
	}
	got, err := recordedPerLock(ctx, rig.lw.database, loadSource, "renew")
	if err != nil {
		return err
	}
	differ, perLock := compareCounts(made, got)
	w.write(out, fmt.Sprintf("leasewatch-load redis: %d string locks with %s TTLs extended every %s (%.0f extensions/s offered), %s measured after %s warm-up; lag is the keyspace event's publication (its receipt less the pub/sub connection's PING round trip) → stored",
		k.locks, k.ttl, k.every, float64(k.locks)/k.every.Seconds(), k.duration, k.warmup), [][2]string{
		{"backlog after the load stopped", "recorded " + drained},
		{"extensions achieved", fmt.Sprintf("%.0f/s (%d skipped while redis-server was behind, %d locks lost to expiry, %d commands unanswered)", float64(t.renewals.Load())/(k.warmup+k.duration).Seconds(), t.skipped.Load(), t.lost.Load(), t.failed.Load())},
		{"grants made / recorded", fmt.Sprintf("%d / %.0f (missed %.0f)", t.grants.Load(), gotGrants, float64(t.grants.Load())-gotGrants)},
		{"extensions made / recorded", fmt.Sprintf("%d / %.0f (missed %.0f)", t.renewals.Load(), gotRenewals, float64(t.renewals.Load())-gotRenewals)},
		{"locks whose extensions differ", fmt.Sprintf("%d: %s", differ, perLock)},
	})
	if gotGrants != float64(t.grants.Load()) || gotRenewals != float64(t.renewals.Load()) || differ > 0 {
		return fmt.Errorf("leasewatch recorded %.0f grants of %d and %.0f extensions of %d; %d locks differ", gotGrants, t.grants.Load(), gotRenewals, t.renewals.Load(), differ)
	}
	return nil
}

// flags declares the redis load's flags on fs.
func (r *redisLoad) flags(fs *flag.FlagSet) {
	fs.IntVar(&r.locks, "locks", 10000, "string locks")
	fs.DurationVar(&r.ttl, "ttl", 2*time.Second, "lock TTL")
	fs.DurationVar(&r.every, "every", 500*time.Millisecond, "extension period of each lock")
	fs.DurationVar(&r.warmup, "warmup", 10*time.Second, "load before measuring")
	fs.DurationVar(&r.duration, "duration", 30*time.Second, "measured load")
	fs.StringVar(&r.leasewatch, "leasewatch", "", "leasewatch binary (default: go build ./cmd/leasewatch)")
	fs.BoolVar(&r.keep, "keep", false, "keep the run's folder (leasewatch's database and config) and say where")
}
