package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
	"github.com/leasewatch/leasewatch/collectors/faulttest"
)

// Fault-test timings: a lock whose lease the freeze outlasts, a freeze
// longer than deadAfter (so the collector must call the connection dead
// rather than wait it out), and the reconnect backoff cap.
const (
	faultLease      = 1500 * time.Millisecond
	faultFreeze     = deadAfter + time.Second
	faultBackoffCap = 2 * time.Second
	// faultSlack is what a reconnect may take beyond the backoff: dialling,
	// enabling notifications, subscribing, scanning and storing the snapshot
	// on a busy 2-core machine under -race.
	faultSlack = 3 * time.Second
)

// TestBackendFaults stops and restarts redis-server, and freezes it with
// SIGSTOP for longer than a lease, while locks change hands around and
// during the outage. After each fault the collector must have reconnected
// within its capped backoff, recorded a blind window that covers the
// outage, and show exactly the holders Redis has; across the cycles neither
// goroutines nor the heap may grow. LEASEWATCH_FAULT_CYCLES=50 runs the
// long version.
func TestBackendFaults(t *testing.T) {
	srv := startRedis(t)
	cli := srv.client(t)
	sk := newSink(t)
	c, err := New(testConfig(srv), collectortest.Logger(t, testSource), WithReconnectBackoff(100*time.Millisecond, faultBackoffCap))
	if err != nil {
		t.Fatal(err)
	}
	faulttest.Supervise(t, sk, c, collectors.RunnerConfig{
		Logger: collectortest.Logger(t, testSource), MinBackoff: 100 * time.Millisecond, MaxBackoff: faultBackoffCap,
	})
	ctx := context.Background()
	locks := []string{"lock:f", "lock:g"}
	usage := &faulttest.Usage{MaxGoroutines: 5, MaxHeap: 2 << 20}
	cycles := faulttest.Cycles(t, 2)
	for cycle := 1; cycle <= cycles; cycle++ {
		// Stop and restart: without persistence the new server has no keys.
		setLock(t, cli, "lock:f", fmt.Sprintf("A%d", cycle), time.Minute)
		sk.WaitHeld(t, 5*time.Second, "lock:f", fmt.Sprintf("A%d", cycle))
		srv.stop()
		down := time.Now()
		back := time.Now()
		srv.start()
		blind := waitBlind(t, sk, down, back)
		if !strings.Contains(blind.Reason, "restarted") {
			t.Fatalf("cycle %d: blind window after the restart = %+v, want the restart named", cycle, blind)
		}
		setLock(t, cli, "lock:g", fmt.Sprintf("B%d", cycle), time.Minute)
		checkHolders(t, sk, cli, locks, back)

		// Freeze past the lease: C's lease runs out inside the freeze, and D
		// asks for another lock during it, which Redis grants on waking.
		setLock(t, cli, "lock:f", fmt.Sprintf("C%d", cycle), faultLease)
		sk.WaitHeld(t, 5*time.Second, "lock:f", fmt.Sprintf("C%d", cycle))
		if err := cli.Del(ctx, "lock:g").Err(); err != nil {
			t.Fatal(err)
		}
		faulttest.Freeze(t, srv.pid())
		down = time.Now()
		granted := make(chan error, 1)
		go func() {
			granted <- cli.SetNX(ctx, "lock:g", fmt.Sprintf("D%d", cycle), time.Minute).Err()
		}()
		time.Sleep(faultFreeze) // the freeze itself is what is under test
		back = time.Now()
		faulttest.Thaw(t, srv.pid())
		if err := <-granted; err != nil {
			t.Fatalf("cycle %d: D's SETNX during the freeze: %v", cycle, err)
		}
		blind = waitBlind(t, sk, down, back)
		if !strings.Contains(blind.Reason, "lost the connection") {
			t.Fatalf("cycle %d: blind window after the freeze = %+v, want the lost connection named", cycle, blind)
		}
		checkHolders(t, sk, cli, locks, back)
		usage.Measure(t, cycle)
	}
	usage.Report(t)
	for _, k := range []audit.FindingKind{audit.FindingOverlap, audit.FindingTokenRegression} {
		if f := sk.Findings(t, "", k); len(f) != 0 {
			t.Errorf("%s findings across the faults: %+v", k, f[0])
		}
	}
}

// setLock takes key for value as a lock client does (SET NX PX), deleting a
// previous holder's key first.
func setLock(t *testing.T, cli *goredis.Client, key, value string, lease time.Duration) {
	t.Helper()
	ctx := context.Background()
	if err := cli.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	ok, err := cli.SetNX(ctx, key, value, lease).Result()
	if err != nil || !ok {
		t.Fatalf("SET %s %s NX = %v, %v", key, value, ok, err)
	}
}

// waitBlind waits for the first blind window that ends after back, checks
// it covers the outage (from down, when the server had certainly stopped, to
// back, when it was about to return) and that it ended (the collector
// reconnected) within the backoff cap, and returns it.
func waitBlind(t *testing.T, sk *collectortest.Sink, down, back time.Time) *audit.Blind {
	t.Helper()
	var b *audit.Blind
	for deadline := time.Now().Add(faultBackoffCap + faultSlack + 5*time.Second); b == nil; time.Sleep(10 * time.Millisecond) {
		var seen []string
		for _, in := range sk.Inputs() {
			if in.Blind != nil && in.Blind.To.After(back) {
				b = in.Blind
				break
			} else if in.Blind != nil {
				seen = append(seen, in.Blind.From.Format(time.StampMicro)+" .. "+in.Blind.To.Format(time.StampMicro))
			}
		}
		if b == nil && time.Now().After(deadline) {
			t.Fatalf("no blind window ending after the server returned at %s; blind windows: %v", back.Format(time.StampMicro), seen)
		}
	}
	if b.From.After(down) || b.To.Before(back) {
		t.Fatalf("blind window %s .. %s does not contain the outage %s .. %s", b.From.Format(time.StampMicro), b.To.Format(time.StampMicro), down.Format(time.StampMicro), back.Format(time.StampMicro))
	}
	d := faulttest.Reconnected(t, "redis", back, b.To, faultBackoffCap+faultSlack)
	t.Logf("blind %s .. %s (outage %s), reconnected %s after the server returned: %s", b.From.Format(time.StampMilli), b.To.Format(time.StampMilli), back.Sub(down).Round(time.Millisecond), d.Round(time.Millisecond), b.Reason)
	return b
}

// checkHolders waits until the store shows, for every lock, the holder Redis
// has (or none), and fails if that takes longer than a reconnect may.
func checkHolders(t *testing.T, sk *collectortest.Sink, cli *goredis.Client, locks []string, back time.Time) {
	t.Helper()
	ctx := context.Background()
	agreed := faulttest.SameHolders(t, "redis", locks, faultBackoffCap+faultSlack+5*time.Second, func(key string) (string, string) {
		want, err := cli.Get(ctx, key).Result()
		if errors.Is(err, goredis.Nil) {
			want = ""
		} else if err != nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		got := ""
		if l, ok := sk.Lock(t, key); ok && l.State == audit.StateHeld {
			got = l.Holder
		}
		return got, want
	})
	faulttest.Reconnected(t, "redis holders", back, agreed, faultBackoffCap+faultSlack+time.Second)
}
