package main

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The garbage collector runs once the heap has grown by GOGC percent of
// what is live, so its CPU is the allocation rate over that headroom.
// Most of leasewatch's heap is long-lived (every lock's state, about 1.1 KB
// a lock in all): at 100,000 locks Go's default of 100 lets a 110 MiB heap
// grow to twice that before each collection, 50 to one and a half times
// (BENCHMARKS.md, Memory). At a few thousand locks, though, the live heap
// is 10 to 20 MiB, and half of it is so little headroom that the collector
// runs twice as often to save a few MiB, about a tenth of a quiet
// collector's CPU per event (BENCHMARKS.md, CPU per renewal). So serve and
// demo keep at least gcHeadroom of headroom: GOGC 100 up to that much live
// heap, then whatever keeps gcHeadroom, down to 50 from twice that, where
// memory is what counts. The GOGC environment variable, when set, is left
// alone.
const (
	minGCPercent = 50
	maxGCPercent = 100
	gcHeadroom   = 32 << 20
	gcTuneEvery  = time.Second
)

// gcPercentFor is the GOGC that keeps gcHeadroom over a live heap of live
// bytes, between minGCPercent and maxGCPercent.
func gcPercentFor(live uint64) int {
	if live == 0 {
		return maxGCPercent
	}
	return int(min(max(gcHeadroom*100/live, minGCPercent), maxGCPercent))
}

// tuneGC starts the process at minGCPercent (the safe side for memory while
// a large store is restored) and then sets GOGC from the live heap every
// interval until ctx ends. It does nothing when the GOGC environment
// variable is set.
func tuneGC(ctx context.Context, every time.Duration) {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	current := minGCPercent
	debug.SetGCPercent(current)
	go func() {
		live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if ctx.Err() != nil {
				return
			}
			metrics.Read(live)
			if live[0].Value.Kind() != metrics.KindUint64 {
				return
			}
			// Small moves are not worth a change: the live heap
			// wanders between collections.
			if want := gcPercentFor(live[0].Value.Uint64()); want > current+5 || want < current-5 ||
				(want != current && (want == minGCPercent || want == maxGCPercent)) {
				current = want
				debug.SetGCPercent(current)
			}
		}
	}()
}
