package collectortest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/collectors"
)

// ReadyTimeout is how long Run waits for a collector's first snapshot.
const ReadyTimeout = 30 * time.Second

// Running is one collector run by Run.
type Running struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// Run runs c on sink until the test ends, after waiting until it is ready:
// its first snapshot is durable.
func Run(t testing.TB, c collectors.Collector, sink collectors.Sink) *Running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	var once sync.Once
	go func() { r.done <- c.Run(ctx, sink, func() { once.Do(func() { close(ready) }) }) }()
	select {
	case <-ready:
	case err := <-r.done:
		cancel()
		t.Fatalf("collector stopped before ready: %v", err)
	case <-time.After(ReadyTimeout):
		cancel()
		t.Fatalf("collector not ready after %s", ReadyTimeout)
	}
	t.Cleanup(func() { r.Stop(t) })
	return r
}

// Stop cancels the collector and checks that Run returned nil within 10 s.
// Safe to call twice.
func (r *Running) Stop(t testing.TB) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("Run returned %v after cancel, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of cancel")
		}
	})
}

// Failed waits up to timeout for the collector to stop on its own and
// returns the error it stopped with.
func (r *Running) Failed(t testing.TB, timeout time.Duration) error {
	t.Helper()
	var err error
	select {
	case err = <-r.done:
	case <-time.After(timeout):
		t.Fatalf("Run still running after %s", timeout)
	}
	r.once.Do(r.cancel)
	return err
}

// Eventually polls cond every 10 ms until it holds, failing the test after
// timeout with what it was waiting for.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Logger logs to the test's output, at info, tagged with the source.
func Logger(t testing.TB, source string) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})).With("source", source)
}
