package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

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

// send takes or extends the locks of batch in one pipeline, and counts what
// happened.
func (k *redisLoad) send(cli *goredis.Client, extend *goredis.Script, held []atomic.Bool, batch []int, grants, renewals, lost *atomic.Int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmds := make([]goredis.Cmder, len(batch))
	_, _ = cli.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for n, i := range batch {
			key, value := "lock:"+strconv.Itoa(i), "holder-"+strconv.Itoa(i)
			if !held[i].Load() {
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
			if ok, err := c.Result(); err == nil && ok {
				held[i].Store(true)
				grants.Add(1)
			}
		case *goredis.Cmd:
			if v, err := c.Int64(); err == nil {
				if v == 1 {
					renewals.Add(1)
				} else {
					held[i].Store(false) // it expired before the extension: take it again
					lost.Add(1)
				}
			}
		}
	}
}

func (k *redisLoad) run(ctx context.Context, out, log io.Writer) error {
	dir, err := os.MkdirTemp("", "leasewatch-load-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := redisserver.Start(ctx, filepath.Join(dir, "redis"))
	if err != nil {
		return err
	}
	defer srv.Stop()

	lw, err := startLeasewatch(ctx, k.leasewatch, dir, fmt.Sprintf(`  - name: %s
    kind: redis
    addr: %s
    patterns: ["lock:*"]
`, loadSource, srv.Addr), log)
	if err != nil {
		return err
	}
	defer lw.stop()
	url := lw.url
	if err := waitFor(ctx, 60*time.Second, "leasewatch's Redis source to come up", func() bool {
		mfs, err := scrape(ctx, url)
		return err == nil && len(labelled(mfs, "leasewatch_collector_up", map[string]string{"source": loadSource})) > 0 &&
			labelled(mfs, "leasewatch_collector_up", map[string]string{"source": loadSource})[0].GetGauge().GetValue() == 1
	}); err != nil {
		return err
	}

	fmt.Fprintf(log, "%d locks with %s TTLs extended every %s: %s of warm-up, %s measured\n", k.locks, k.ttl, k.every, k.warmup, k.duration)
	cli := goredis.NewClient(&goredis.Options{Addr: srv.Addr, PoolSize: loadWorkers})
	defer cli.Close()
	extend := goredis.NewScript(extendScript)
	if err := extend.Load(ctx, cli).Err(); err != nil {
		return err
	}
	held := make([]atomic.Bool, k.locks)
	var grants, renewals, lost, skipped atomic.Int64
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
				k.send(cli, extend, held, batch, &grants, &renewals, &lost)
			}
		}()
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var dispatched sync.WaitGroup
	dispatched.Add(1)
	go func() {
		defer dispatched.Done()
		dispatch(loadCtx, k.locks, k.every, func(i int) {
			select {
			case work <- i:
			default: // redis-server is behind: skip rather than queue without bound
				skipped.Add(1)
			}
		})
	}()

	w, err := measure(ctx, url, lw.cmd.Process.Pid, loadSource, k.warmup, k.duration)
	stopLoad()
	dispatched.Wait()
	close(work)
	wg.Wait()
	if err != nil {
		return err
	}

	// Drain: every grant and extension must be recorded exactly once.
	_ = waitFor(ctx, 30*time.Second, "leasewatch to record every grant and extension", func() bool {
		return recorded(ctx, url, loadSource, "grant") >= float64(grants.Load()) && recorded(ctx, url, loadSource, "renew") >= float64(renewals.Load())
	})
	gotGrants, gotRenewals := recorded(ctx, url, loadSource, "grant"), recorded(ctx, url, loadSource, "renew")
	w.write(out, fmt.Sprintf("leasewatch-load redis: %d string locks with %s TTLs extended every %s (%.0f extensions/s offered), %s measured after %s warm-up; lag is the collector's receipt of the keyspace event → stored",
		k.locks, k.ttl, k.every, float64(k.locks)/k.every.Seconds(), k.duration, k.warmup), [][2]string{
		{"extensions achieved", fmt.Sprintf("%.0f/s (%d skipped while redis-server was behind, %d locks lost to expiry)", float64(renewals.Load())/(k.warmup+k.duration).Seconds(), skipped.Load(), lost.Load())},
		{"grants made / recorded", fmt.Sprintf("%d / %.0f (missed %.0f)", grants.Load(), gotGrants, float64(grants.Load())-gotGrants)},
		{"extensions made / recorded", fmt.Sprintf("%d / %.0f (missed %.0f)", renewals.Load(), gotRenewals, float64(renewals.Load())-gotRenewals)},
	})
	if gotGrants != float64(grants.Load()) || gotRenewals != float64(renewals.Load()) {
		return fmt.Errorf("leasewatch recorded %.0f grants of %d and %.0f extensions of %d", gotGrants, grants.Load(), gotRenewals, renewals.Load())
	}
	return nil
}
