package main

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestGCPercentKeepsHeadroom(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, maxGCPercent},
		{10 << 20, maxGCPercent},
		{gcHeadroom, maxGCPercent},
		{48 << 20, 66},
		{2 * gcHeadroom, minGCPercent},
		{110 << 20, minGCPercent},
		{4 << 30, minGCPercent},
	} {
		if got := gcPercentFor(c.live); got != c.want {
			t.Errorf("gcPercentFor(%d MiB) = %d, want %d", c.live>>20, got, c.want)
		}
	}
	// The heap goal never falls as the live heap grows.
	goal := func(live uint64) uint64 { return live + live*uint64(gcPercentFor(live))/100 }
	for live := uint64(1 << 20); live < 256<<20; live += 1 << 20 {
		if goal(live+1<<20) < goal(live) {
			t.Fatalf("heap goal falls from %d to %d MiB of live heap", live>>20, (live+1<<20)>>20)
		}
	}
}

func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

func TestTuneGCRaisesTheTargetForASmallHeap(t *testing.T) {
	t.Setenv("GOGC", "") // restored after the test
	os.Unsetenv("GOGC")
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tuneGC(ctx, 10*time.Millisecond)
	if got := gogc(); got != minGCPercent {
		t.Fatalf("GOGC at start = %d, want %d", got, minGCPercent)
	}
	// The test binary's live heap is far under gcHeadroom.
	deadline := time.Now().Add(10 * time.Second)
	for gogc() != maxGCPercent {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC still %d after 10s with a small heap, want %d", gogc(), maxGCPercent)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTuneGCLeavesAGOGCFromTheEnvironment(t *testing.T) {
	t.Setenv("GOGC", "200")
	prev := debug.SetGCPercent(200)
	defer debug.SetGCPercent(prev)
	tuneGC(t.Context(), time.Millisecond)
	if got := gogc(); got != 200 {
		t.Fatalf("GOGC = %d with GOGC=200 in the environment", got)
	}
}
