package faulttest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// failRecorder is a testing.TB whose Fatalf records the failure and ends
// the goroutine, so the test can see Measure fail.
type failRecorder struct {
	testing.TB
	msg string
}

func (f *failRecorder) Helper() {}

func (f *failRecorder) Logf(string, ...any) {}

func (f *failRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

// measure runs u.Measure on a failRecorder and returns its failure, if any.
func measure(t *testing.T, u *Usage, cycle int) (msg string) {
	t.Helper()
	f := &failRecorder{TB: t}
	defer func() {
		if p := recover(); p != nil {
			if p != f {
				panic(p)
			}
			msg = f.msg
		}
	}()
	u.Measure(f, cycle)
	return ""
}

func TestUsageCatchesGoroutineGrowth(t *testing.T) {
	u := &Usage{MaxGoroutines: 3, MaxHeap: 64 << 20, Settle: 200 * time.Millisecond}
	if msg := measure(t, u, 1); msg != "" {
		t.Fatalf("baseline failed: %s", msg)
	}
	stop := make(chan struct{})
	defer close(stop)
	for i := 0; i < 2; i++ {
		go func() { <-stop }()
	}
	if msg := measure(t, u, 2); msg != "" {
		t.Fatalf("2 more goroutines (limit 3) failed: %s", msg)
	}
	for i := 0; i < 5; i++ {
		go func() { <-stop }()
	}
	msg := measure(t, u, 3)
	if !strings.Contains(msg, "cycle 3") || !strings.Contains(msg, "grew by more than 3") {
		t.Fatalf("7 more goroutines (limit 3): failure %q, want one naming cycle 3 and the limit", msg)
	}
}

func TestUsageCatchesHeapGrowth(t *testing.T) {
	u := &Usage{MaxGoroutines: 100, MaxHeap: 1 << 20}
	if msg := measure(t, u, 1); msg != "" {
		t.Fatalf("baseline failed: %s", msg)
	}
	kept := make([]byte, 4<<20)
	msg := measure(t, u, 2)
	if !strings.Contains(msg, "heap") || !strings.Contains(msg, "1.00 MiB") {
		t.Fatalf("4 MiB more heap (limit 1 MiB): failure %q, want one naming the heap and the limit", msg)
	}
	runtime.KeepAlive(kept)
}

func TestCycles(t *testing.T) {
	t.Setenv(CyclesEnv, "")
	if n := Cycles(t, 3); n != 3 {
		t.Fatalf("Cycles without %s = %d, want 3", CyclesEnv, n)
	}
	t.Setenv(CyclesEnv, "50")
	if n := Cycles(t, 3); n != 50 {
		t.Fatalf("Cycles with %s=50 = %d, want 50", CyclesEnv, n)
	}
	t.Setenv(CyclesEnv, "many")
	f := &failRecorder{TB: t}
	func() {
		defer func() { recover() }()
		Cycles(f, 3)
	}()
	if !strings.Contains(f.msg, CyclesEnv) {
		t.Fatalf("Cycles with %s=many: failure %q, want one naming the variable", CyclesEnv, f.msg)
	}
}
