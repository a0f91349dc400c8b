package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/leasewatch/leasewatch/audit/fence"
	lwredis "github.com/leasewatch/leasewatch/collectors/redis"
)

// The demo's Redis locks: redsync mutexes (no fencing token) and locks taken
// with the recommended fenced acquire script.
const (
	demoRedisSource  = "demo-redis"
	demoJobsLock     = "lock:jobs"
	demoPaymentsLock = "lock:payments"
	// The counter lives outside the lock pattern (lock:*), so it is not a lock.
	demoPaymentsFence = "fence:payments"
	demoRedisTTL      = 2 * time.Second
)

// redisWorkload runs redsync workers on lock:jobs and fenced workers on
// lock:payments; one of the latter now and then stalls past its TTL, and its
// late write is rejected by the payments resource.
type redisWorkload struct {
	cli      *goredis.Client
	rs       *redsync.Redsync
	acquire  *goredis.Script
	release  *goredis.Script
	payments *fence.Reporter
	guard    fence.Guard
	log      *slog.Logger
}

// releaseScript deletes the lock only if it still holds the caller's value.
const releaseScript = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

func newRedisWorkload(addr string, payments *fence.Reporter, log *slog.Logger) *redisWorkload {
	cli := goredis.NewClient(&goredis.Options{Addr: addr})
	return &redisWorkload{
		cli: cli, rs: redsync.New(redsyncgoredis.NewPool(cli)),
		acquire: goredis.NewScript(lwredis.AcquireScript), release: goredis.NewScript(releaseScript),
		payments: payments, log: log,
	}
}

func (w *redisWorkload) run(ctx context.Context) {
	var wg sync.WaitGroup
	workers := []func(context.Context, string){w.jobs, w.jobs, w.paymentsWorker, w.paymentsWorker}
	for i, fn := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "redis-worker-" + strconv.Itoa(i+1)
			for n := 0; ctx.Err() == nil; n++ {
				fn(ctx, fmt.Sprintf("%s/%d", name, n))
			}
		}()
	}
	wg.Wait()
	w.cli.Close()
}

// jobs takes a redsync mutex, extends it a few times and unlocks it.
func (w *redisWorkload) jobs(ctx context.Context, name string) {
	m := w.rs.NewMutex(demoJobsLock, redsync.WithExpiry(demoRedisTTL), redsync.WithTries(64), redsync.WithRetryDelay(100*time.Millisecond))
	if err := m.LockContext(ctx); err != nil {
		sleepCtx(ctx, 200*time.Millisecond)
		return
	}
	for i := 0; i < 1+mathrand.IntN(3); i++ {
		if !sleepCtx(ctx, 600*time.Millisecond) {
			return
		}
		if ok, err := m.ExtendContext(ctx); !ok || err != nil {
			return
		}
	}
	_, _ = m.UnlockContext(ctx)
	sleepCtx(ctx, time.Duration(100+mathrand.IntN(400))*time.Millisecond)
}

// paymentsWorker takes lock:payments with the fenced acquire script, writes
// with its token, and releases; every fourth tenure it stalls past its TTL
// instead and writes late.
func (w *redisWorkload) paymentsWorker(ctx context.Context, name string) {
	id := randomID()
	token, err := w.acquire.Run(ctx, w.cli, []string{demoPaymentsLock, demoPaymentsFence}, id, demoRedisTTL.Milliseconds()).Int64()
	if err != nil { // held by someone else (redis.Nil) or a transient error
		sleepCtx(ctx, time.Duration(100+mathrand.IntN(200))*time.Millisecond)
		return
	}
	value := strconv.FormatInt(token, 10) + ":" + id
	w.write(token, id)
	if token%4 == 0 {
		// A stall: no renewal, no release. The key expires and another
		// worker takes the lock before this one writes again.
		if !sleepCtx(ctx, demoRedisTTL+1500*time.Millisecond) {
			return
		}
		w.write(token, id)
		return
	}
	sleepCtx(ctx, time.Duration(300+mathrand.IntN(700))*time.Millisecond)
	w.write(token, id)
	_ = w.release.Run(ctx, w.cli, []string{demoPaymentsLock}, value).Err()
	sleepCtx(ctx, time.Duration(100+mathrand.IntN(300))*time.Millisecond)
}

// write is the payments resource: an in-memory fence that accepts tokens at
// least as high as the highest it has seen, reporting each outcome.
func (w *redisWorkload) write(token int64, holder string) {
	outcome, highest := w.guard.Check(demoPaymentsLock, token)
	w.payments.Report(fence.Write{Lock: demoPaymentsLock, Token: &token, Outcome: outcome, HighestToken: &highest, Holder: holder})
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
