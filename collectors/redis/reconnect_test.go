package redis

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// TestReconnectBackoff: while its instance stays unreachable the collector
// waits longer before each reconnection, doubling up to its cap, each delay
// jittered into the upper half of its step as the Runner's restarts are;
// once a connection was up again, the next loss starts from the shortest
// delay.
func TestReconnectBackoff(t *testing.T) {
	const least, most = 20 * time.Millisecond, 160 * time.Millisecond
	srv := startRedis(t)
	log := &retryLog{}
	c, err := New(testConfig(srv), slog.New(log), WithReconnectBackoff(least, most))
	if err != nil {
		t.Fatal(err)
	}
	sk := newSink(t)
	collectortest.Run(t, c, sk)

	// step is the delay before reconnection attempt i (0-based) before jitter.
	step := func(i int) time.Duration { return min(least<<i, most) }
	within := func(what string, d time.Duration, i int) {
		t.Helper()
		if d < step(i)/2 || d >= step(i) {
			t.Errorf("%s: delay %s, want within [%s, %s) (%v)", what, d, step(i)/2, step(i), log.all())
		}
	}

	srv.stop()
	unreachable := log.wait(t, 7)
	for i, d := range unreachable {
		within(fmt.Sprintf("reconnection attempt %d while unreachable", i), d, i)
	}
	back := time.Now()
	srv.start()
	// Connected again: its first scan ends the blind window.
	collectortest.Eventually(t, 10*time.Second, "the collector connected again", func() bool {
		return slices.ContainsFunc(sk.Inputs(), func(in audit.Input) bool { return in.Blind != nil && in.Blind.To.After(back) })
	})
	before := len(log.all())
	srv.stop()
	again := log.wait(t, before+2)[before:]
	within("first attempt after a connection was up", again[0], 0)
	within("second attempt after a connection was up", again[1], 1)
}

// retryLog keeps the reconnection delays a collector logs (retry_in).
type retryLog struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (l *retryLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *retryLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *retryLog) WithGroup(string) slog.Handler            { return l }

func (l *retryLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "retry_in" {
			l.mu.Lock()
			l.delays = append(l.delays, a.Value.Duration())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

func (l *retryLog) all() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.delays...)
}

// wait polls until n delays are logged and returns the first n.
func (l *retryLog) wait(t *testing.T, n int) []time.Duration {
	t.Helper()
	collectortest.Eventually(t, 10*time.Second, "reconnection attempts logged", func() bool { return len(l.all()) >= n })
	return l.all()[:n]
}
