package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
	_ "modernc.org/sqlite" // openDatabase reads leasewatch's SQLite database

	"github.com/leasewatch/leasewatch/audit"
)

// window is what leasewatch did over the measured part of a run.
type window struct {
	source                string
	before, after         map[string]*dto.MetricFamily
	procBefore, procAfter procStats
}

// measure waits out the warm-up, then measures the leasewatch process at url
// (pid) for duration.
func measure(ctx context.Context, url string, pid int, source string, warmup, duration time.Duration) (window, error) {
	w := window{source: source}
	if err := sleep(ctx, warmup); err != nil {
		return w, err
	}
	var err error
	if w.before, err = scrape(ctx, url); err != nil {
		return w, err
	}
	if w.procBefore, err = readProcStats(pid); err != nil {
		return w, err
	}
	if err := sleep(ctx, duration); err != nil {
		return w, err
	}
	if w.after, err = scrape(ctx, url); err != nil {
		return w, err
	}
	w.procAfter, err = readProcStats(pid)
	return w, err
}

// waitUp waits, for up to a minute, until leasewatch at url says source's
// collector is up: its first snapshot is stored.
func waitUp(ctx context.Context, url, source string) error {
	return waitFor(ctx, time.Minute, fmt.Sprintf("leasewatch's source %s to come up", source), func() bool {
		mfs, err := scrape(ctx, url)
		up := labelled(mfs, "leasewatch_collector_up", map[string]string{"source": source})
		return err == nil && len(up) > 0 && up[0].GetGauge().GetValue() == 1
	})
}

// recorded returns how many events of kind (all kinds if empty) leasewatch
// at url has stored for source so far.
func recorded(ctx context.Context, url, source, kind string) float64 {
	mfs, err := scrape(ctx, url)
	if err != nil {
		return -1
	}
	labels := map[string]string{"source": source}
	if kind != "" {
		labels["kind"] = kind
	}
	return counterSum(mfs, "leasewatch_events_recorded_total", labels)
}

// drainIdle is how long drain waits for leasewatch's counts to grow before
// it gives up on what is still missing.
const drainIdle = 10 * time.Second

// drain waits, after a load stopped, until leasewatch at url has recorded
// at least made[kind] events of each kind for source, and its counts held
// still between two looks, so that a duplicate shows as well. A backlog
// takes as long as it takes: drain waits while the counts grow, and gives
// up once they have not for drainIdle. It says how long it waited.
func drain(ctx context.Context, url, source string, made map[string]float64) string {
	var last float64 = -1
	done := false
	took := waitProgress(ctx, drainIdle, func() (bool, float64) {
		total, enough := 0.0, true
		for kind, n := range made {
			got := recorded(ctx, url, source, kind)
			total += got
			enough = enough && got >= n
		}
		done = enough && total == last
		last = total
		return done, total
	}).Round(100 * time.Millisecond)
	if !done {
		return fmt.Sprintf("not in %s (no progress for %s)", took, drainIdle)
	}
	return "in " + took.String()
}

// write prints the window's figures as a Markdown table, after a title and
// before the scenario's own rows.
func (w window) write(out io.Writer, title string, extra [][2]string) {
	src := map[string]string{"source": w.source}
	wall := w.procAfter.at.Sub(w.procBefore.at)
	events := counterSum(w.after, "leasewatch_events_recorded_total", src) - counterSum(w.before, "leasewatch_events_recorded_total", src)
	renewals := counterSum(w.after, "leasewatch_events_recorded_total", renewalsOf(w.source)) - counterSum(w.before, "leasewatch_events_recorded_total", renewalsOf(w.source))
	cpu := w.procAfter.cpu - w.procBefore.cpu
	lag := histogramBetween(w.before, w.after, "leasewatch_observation_lag_seconds", src)
	fmt.Fprintf(out, "\n%s; %d CPUs, %s\n\n| measure | value |\n|---|---|\n", title, runtime.NumCPU(), runtime.Version())
	rows := [][2]string{
		{"events recorded", fmt.Sprintf("%.0f/s", events/wall.Seconds())},
		{"observation lag p50", seconds(lag.quantile(0.50))},
		{"observation lag p99", seconds(lag.quantile(0.99))},
		{"lag samples", fmt.Sprintf("%.0f", lag.count())},
		{"leasewatch CPU", fmt.Sprintf("%.1f%% of one core", 100*cpu.Seconds()/wall.Seconds())},
		{"leasewatch CPU per renewal recorded", perEvent(cpu, renewals) + fmt.Sprintf(" (%.0f renewals)", renewals)},
		{"leasewatch CPU per event recorded", perEvent(cpu, events)},
		{"leasewatch RSS (end / peak)", fmt.Sprintf("%.1f MiB / %.1f MiB", mib(w.procAfter.rss), mib(w.procAfter.hwm))},
	}
	for _, r := range append(rows, extra...) {
		fmt.Fprintf(out, "| %s | %s |\n", r[0], r[1])
	}
}

// renewalsOf selects source's renew events in leasewatch_events_recorded_total.
func renewalsOf(source string) map[string]string {
	return map[string]string{"source": source, "kind": "renew"}
}

// perEvent is CPU time spent divided over n events, in microseconds: the
// cost a fleet multiplies by its rate. /proc counts CPU in 10 ms ticks, so
// a window needs some seconds of CPU for the figure to mean much.
func perEvent(cpu time.Duration, n float64) string {
	if n <= 0 {
		return "n/a (none recorded)"
	}
	return fmt.Sprintf("%.0f µs", float64(cpu.Microseconds())/n)
}

// dispatch calls send for items 0, 1, 2, ... (modulo n) at n per period,
// spread evenly, by the clock rather than by ticks (a busy machine delays and
// drops ticks, which would quietly lower the offered rate), until ctx ends.
func dispatch(ctx context.Context, n int, period time.Duration, send func(i int)) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start, sent := time.Now(), 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			due := int(int64(now.Sub(start)) * int64(n) / int64(period))
			for ; sent < due; sent++ {
				send(sent % n)
			}
		}
	}
}

// recordedPerLock returns, from leasewatch's database, how
// many events of kind each of source's locks has: the per-lock side of a
// comparison whose totals could hide a miss behind a duplicate.
func recordedPerLock(ctx context.Context, database, source, kind string) (map[string]int64, error) {
	out := make(map[string]int64)
	err := storedEvents(ctx, database, source, []audit.EventKind{audit.EventKind(kind)}, func(name string, _ audit.Event) { out[name]++ })
	if err != nil {
		return nil, fmt.Errorf("count %s events per lock: %w", kind, err)
	}
	return out, nil
}

// compareCounts compares what a load made of each lock (by name) with what
// leasewatch recorded, and describes the locks where they differ.
func compareCounts(made, got map[string]int64) (differ int, summary string) {
	var fewer, more int
	var example string
	for _, name := range slices.Sorted(maps.Keys(made)) {
		if got[name] == made[name] {
			continue
		}
		if got[name] < made[name] {
			fewer++
		} else {
			more++
		}
		if example == "" {
			example = fmt.Sprintf("; e.g. %s: %d made, %d recorded", name, made[name], got[name])
		}
	}
	for name := range got {
		if _, ok := made[name]; !ok {
			more++
		}
	}
	return fewer + more, fmt.Sprintf("%d with fewer recorded, %d with more%s", fewer, more, example)
}
