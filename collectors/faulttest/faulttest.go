// Package faulttest is what the collectors' backend-fault tests share: how
// many fault cycles to run, freezing a backend process with SIGSTOP, and
// measuring the test process's goroutines and heap across cycles, so a
// reconnect that leaks shows as growth.
package faulttest

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// CyclesEnv names the environment variable that sets how many fault cycles
// the tests run (the long version: LEASEWATCH_FAULT_CYCLES=50).
const CyclesEnv = "LEASEWATCH_FAULT_CYCLES"

// Cycles returns $LEASEWATCH_FAULT_CYCLES when set, else short: the normal
// test run keeps to a few cycles.
func Cycles(t testing.TB, short int) int {
	t.Helper()
	v := os.Getenv(CyclesEnv)
	if v == "" {
		return short
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number of cycles", CyclesEnv, v)
	}
	return n
}

// Freeze stops process pid with SIGSTOP and returns once it is stopped: it
// keeps its sockets open and answers nothing, as a server stalled in a long
// GC pause, swapped out or on a paused VM does. Thaw lets it go on.
func Freeze(t testing.TB, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	// kill returns before a process running on another core has stopped:
	// the outage starts once the kernel shows it stopped.
	deadline := time.Now().Add(5 * time.Second)
	for procState(pid) != 'T' {
		if time.Now().After(deadline) {
			t.Fatalf("process %d not stopped 5s after SIGSTOP (state %c)", pid, procState(pid))
		}
		time.Sleep(time.Millisecond)
	}
}

// procState returns the state letter of /proc/<pid>/stat (R, S, T, ...).
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return '?'
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return '?'
	}
	return b[i+2]
}

// Thaw continues a process stopped by Freeze.
func Thaw(t testing.TB, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT %d: %v", pid, err)
	}
}

// Sample is the test process's resource use after one cycle.
type Sample struct {
	Cycle      int
	Goroutines int
	HeapAlloc  uint64 // bytes live after a full GC
}

// Usage records a Sample per cycle and checks that neither goroutines nor
// the heap grow with the cycles. The first sample is the baseline: take it
// after the first cycle, once every kind of connection has been opened once.
type Usage struct {
	// MaxGoroutines is how many more goroutines than the baseline a later
	// cycle may leave (connections being torn down, timers).
	MaxGoroutines int
	// MaxHeap is how many more bytes than the baseline a later cycle may
	// leave live.
	MaxHeap uint64
	// Settle bounds how long Measure waits for goroutines of closed
	// connections to end. Default 10s.
	Settle time.Duration

	Samples []Sample
}

// Measure takes the sample of cycle, waiting up to u.Settle for the
// goroutine count to come within u.MaxGoroutines of the baseline, and fails
// the test, with every goroutine's stack, when it does not or when the heap
// grew past u.MaxHeap.
func (u *Usage) Measure(t testing.TB, cycle int) Sample {
	t.Helper()
	settle := u.Settle
	if settle == 0 {
		settle = 10 * time.Second
	}
	s := Sample{Cycle: cycle, Goroutines: runtime.NumGoroutine()}
	if len(u.Samples) > 0 {
		limit := u.Samples[0].Goroutines + u.MaxGoroutines
		for deadline := time.Now().Add(settle); s.Goroutines > limit && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond) // goroutines of closed connections ending: nothing to poll but the count
			s.Goroutines = runtime.NumGoroutine()
		}
	}
	s.HeapAlloc = heapAfterGC()
	u.Samples = append(u.Samples, s)
	t.Logf("cycle %d: goroutines %d, heap %s", cycle, s.Goroutines, mib(s.HeapAlloc))
	if len(u.Samples) == 1 {
		return s
	}
	base := u.Samples[0]
	if s.Goroutines > base.Goroutines+u.MaxGoroutines {
		var b strings.Builder
		pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Fatalf("cycle %d: %d goroutines, baseline %d (cycle %d): grew by more than %d\n%s",
			cycle, s.Goroutines, base.Goroutines, base.Cycle, u.MaxGoroutines, b.String())
	}
	if s.HeapAlloc > base.HeapAlloc+u.MaxHeap {
		t.Fatalf("cycle %d: heap %s, baseline %s (cycle %d): grew by more than %s",
			cycle, mib(s.HeapAlloc), mib(base.HeapAlloc), base.Cycle, mib(u.MaxHeap))
	}
	return s
}

// heapAfterGC returns HeapAlloc after two full collections (the second
// frees what finalizers of the first released).
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Report logs every sample and a summary line of cycles 1, 10 and the last.
func (u *Usage) Report(t testing.TB) {
	t.Helper()
	var b strings.Builder
	for _, s := range u.Samples {
		fmt.Fprintf(&b, "cycle %3d: goroutines %4d heap %s\n", s.Cycle, s.Goroutines, mib(s.HeapAlloc))
	}
	t.Logf("resource use per cycle:\n%s", b.String())
	var sum []string
	for _, s := range u.Samples {
		if s.Cycle == 1 || s.Cycle == 10 || s.Cycle == u.Samples[len(u.Samples)-1].Cycle {
			sum = append(sum, fmt.Sprintf("cycle %d: %d goroutines, %s heap", s.Cycle, s.Goroutines, mib(s.HeapAlloc)))
		}
	}
	t.Logf("summary: %s", strings.Join(sum, "; "))
}

func mib(n uint64) string { return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20)) }

// Supervise runs c under a collectors.Runner configured by cfg, as leasewatch
// runs its collectors (restarted with capped backoff after each failure),
// until the test ends, and waits until c is up.
func Supervise(t testing.TB, sink collectors.Sink, c collectors.Collector, cfg collectors.RunnerConfig) *collectors.Runner {
	t.Helper()
	r, err := collectors.NewRunner(sink, []collectors.Collector{c}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("runner did not stop within 15s of cancel")
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for r.Sources()[0].State != audit.SourceUp {
		if time.Now().After(deadline) {
			t.Fatalf("collector not up after 30s: %+v", r.Sources()[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r
}

// SameHolders polls until leasewatch shows, for every lock, the holder the
// backend has (holders reads both; "" is none), and fails if that takes
// longer than wait. It returns when they agreed.
func SameHolders(t testing.TB, backend string, locks []string, wait time.Duration, holders func(lock string) (shown, backendHas string)) time.Time {
	t.Helper()
	for deadline := time.Now().Add(wait); ; time.Sleep(10 * time.Millisecond) {
		diff := ""
		for _, lock := range locks {
			if shown, want := holders(lock); shown != want {
				diff += fmt.Sprintf(" %s: leasewatch %q, %s %q;", lock, shown, backend, want)
			}
		}
		if diff == "" {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for leasewatch to show %s's holders:%s", backend, diff)
		}
	}
}

// Reconnected checks that the collector saw its backend again (at) within
// limit of the backend's return (returned): its reconnect backoff is capped.
func Reconnected(t testing.TB, what string, returned, at time.Time, limit time.Duration) time.Duration {
	t.Helper()
	d := at.Sub(returned)
	if d > limit {
		t.Fatalf("%s: collector caught up %s after the backend returned, want within %s (backoff cap + slack)", what, d.Round(time.Millisecond), limit)
	}
	return d
}
