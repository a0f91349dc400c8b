package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Where a Redis blind window may lie around a handover of the Redis
// source's collector, as the load sampled it (the old owner's last sample
// g0, the new owner's first g1): it starts at the old owner's last stored
// cursor, at most blindBefore before g0, and ends when the new owner
// subscribed, at most blindAfter after g1 (its first scan, then the
// sample, come after).
const (
	blindBefore = 2 * time.Second
	blindAfter  = time.Second
)

// kubeOutcome compares the Leases' committed writes with what leasewatch
// stored.
type kubeOutcome struct {
	want    writeTally
	check   leaseCheck
	updates int64
}

// takeovers returns every takeover the disruptions measured, and the
// sources no other process took up.
func takeovers(ds []disruption) (all []time.Duration, missing []string) {
	for i, d := range ds {
		for _, name := range d.owned {
			t, ok := d.takeovers[name]
			if !ok {
				missing = append(missing, fmt.Sprintf("%s after disruption %d", name, i+1))
				continue
			}
			all = append(all, t)
		}
	}
	return all, missing
}

// matchBlinds pairs each handover of the Redis source's collector with the
// blind windows that cover it: one, or several in a row when the source
// passed through an owner the samples missed (it started and gave the
// source up within a sample, and each owner records the gap it saw). Each
// overlaps the gap, starting at most blindBefore before it and ending at
// most blindAfter after it, and each starts at most blindAfter after the
// one before ends. It returns the handovers no windows cover so, and
// the windows at no handover.
func matchBlinds(handovers [][2]time.Time, windows []blindWindow) (uncovered [][2]time.Time, stray []blindWindow) {
	windows = slices.Clone(windows)
	slices.SortFunc(windows, func(a, b blindWindow) int { return a.from.Compare(b.from) })
	used := make([]bool, len(windows))
	for _, g := range handovers {
		lo, hi := g[0].Add(-blindBefore), g[1].Add(blindAfter)
		var at []int // the windows over the gap, within its slack
		for i, w := range windows {
			if !used[i] && !w.from.Before(lo) && !w.to.After(hi) && !w.from.After(g[1]) && !w.to.Before(g[0]) {
				at = append(at, i)
			}
		}
		covered := len(at) > 0
		for n := 1; covered && n < len(at); n++ {
			covered = !windows[at[n]].from.After(windows[at[n-1]].to.Add(blindAfter))
		}
		if !covered {
			uncovered = append(uncovered, g)
			continue
		}
		for _, i := range at {
			used[i] = true
		}
	}
	for i, w := range windows {
		if !used[i] {
			stray = append(stray, w)
		}
	}
	return uncovered, stray
}

// mergeGaps returns gaps sorted, each run of overlapping ones merged into
// one: a database failover's outage and the handovers of a source within
// it are one gap for a collector that cannot replay it.
func mergeGaps(gaps [][2]time.Time) [][2]time.Time {
	gaps = slices.Clone(gaps)
	slices.SortFunc(gaps, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	var out [][2]time.Time
	for _, g := range gaps {
		if n := len(out); n > 0 && !g[0].After(out[n-1][1]) {
			if g[1].After(out[n-1][1]) {
				out[n-1][1] = g[1]
			}
			continue
		}
		out = append(out, g)
	}
	return out
}

// check returns an error naming every way the run fell short.
func (k *failoverLoad) check(res *failoverResult) error {
	problems := res.etcd.problems("etcd")
	if kc := res.kube.check; len(kc.diffs) > 0 || kc.matched != res.kube.want.writes {
		problems = append(problems, fmt.Sprintf("kubernetes: %d of %d committed writes recorded once; %d Leases differ: %s",
			kc.matched, res.kube.want.writes, len(kc.diffs), strings.Join(first(kc.diffs, 5), "; ")))
	}
	if w := res.writes; w.missing > 0 || w.duplicated > 0 || w.wrongOutcome > 0 {
		problems = append(problems, fmt.Sprintf("writes: of %d answered 202, %d not stored, %d stored more than once, %d with the wrong outcome", res.acked, w.missing, w.duplicated, w.wrongOutcome))
	}
	if res.acked < res.sent {
		problems = append(problems, fmt.Sprintf("writes: %d of %d reports never answered 202", res.sent-res.acked, res.sent))
	}
	if len(res.cursors.regressions) > 0 {
		problems = append(problems, "cursors: "+strings.Join(first(res.cursors.regressions, 5), "; "))
	}
	for _, name := range []string{etcdSource, kubeSource, "leasewatch"} {
		if n := len(res.blinds[name]); n > 0 {
			problems = append(problems, fmt.Sprintf("%s: %d blind windows, want none: it resumes from its cursor (first: %s)", name, n, res.blinds[name][0].reason))
		}
	}
	uncovered, stray := matchBlinds(res.handovers, res.blinds[redisSource])
	uncovered = slices.DeleteFunc(uncovered, func(g [2]time.Time) bool {
		return slices.ContainsFunc(res.outages, func(o [2]time.Time) bool { return !o[0].After(g[1]) && !o[1].Before(g[0]) })
	})
	if len(uncovered) > 0 || len(stray) > 0 {
		problems = append(problems, fmt.Sprintf("redis: %d handovers without the blind window that covers them (%s), %d blind windows at no handover (%s)",
			len(uncovered), describeGaps(uncovered), len(stray), describeBlinds(stray)))
	}
	all, missing := takeovers(res.disruptions)
	if len(missing) > 0 {
		problems = append(problems, "sources not taken over: "+strings.Join(missing, ", "))
	}
	if p99 := quantiles(all, 0.99)[0]; p99 > k.lease+2*time.Second {
		problems = append(problems, fmt.Sprintf("takeover p99 %s, want at most the lease (%s) + 2s", p99.Round(time.Millisecond), k.lease))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

func describeGaps(gaps [][2]time.Time) string {
	var out []string
	for _, g := range gaps {
		out = append(out, g[0].UTC().Format(time.StampMilli)+" to "+g[1].UTC().Format(time.StampMilli))
	}
	return strings.Join(first(out, 5), ", ")
}

func describeBlinds(ws []blindWindow) string {
	var out []string
	for _, w := range ws {
		out = append(out, w.from.UTC().Format(time.StampMilli)+" to "+w.to.UTC().Format(time.StampMilli)+": "+w.reason)
	}
	return strings.Join(first(out, 5), ", ")
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// write prints the run's figures as a Markdown table.
func (k *failoverLoad) write(out io.Writer, res *failoverResult) {
	all, _ := takeovers(res.disruptions)
	q := quantiles(slices.Clone(all), 0.5, 0.99, 1)
	what := fmt.Sprintf("%d kill -9s of the owner of a source", len(res.disruptions))
	switch {
	case k.rolling:
		what = fmt.Sprintf("a rolling restart of the %d replicas", len(res.disruptions))
	case k.database:
		what = fmt.Sprintf("%d PostgreSQL failovers to its %s standby", len(res.disruptions), map[bool]string{true: "asynchronous", false: "synchronous"}[k.asyncStandby])
	}
	fmt.Fprintf(out, "\nleasewatch-load %s: %d replicas on PostgreSQL, %s, one every %s or so; %d etcd locks handed over every %s, %d Kubernetes Leases renewed every %s, %d Redis locks extended every %s, %d writers reporting every %s; ownership lease %s; %d CPUs, %s\n\n| measure | value |\n|---|---|\n",
		k.scenario(), k.replicas, what, k.every, k.etcdLocks, k.hold, k.leases, k.renewEvery, k.redisLocks, k.extend, k.writers, k.writeEvery, k.lease, runtime.NumCPU(), runtime.Version())
	redisBlind := time.Duration(0)
	for _, w := range res.blinds[redisSource] {
		redisBlind += w.to.Sub(w.from)
	}
	rows := [][2]string{
		{"run", res.wall.Round(time.Second).String()},
		{"takeover p50 / p99 / max", fmt.Sprintf("%s / %s / %s (%d sources moved; from the kill or the stop to up on another process)", ms(q[0]), ms(q[1]), ms(q[2]), len(all))},
		{"etcd grants / releases made", fmt.Sprintf("%d / %d; locks differing %d / %d; %s", res.etcd.madeGrants, res.etcd.madeReleases, res.etcd.grantsDiffer, res.etcd.releasesDiffer, res.etcd.tokens.summary())},
		{"Kubernetes writes committed / recorded once", fmt.Sprintf("%d / %d (%d Leases differ)", res.kube.want.writes, res.kube.check.matched, len(res.kube.check.diffs))},
		{"write reports answered 202 / stored once", fmt.Sprintf("%d / %d (%d missing, %d duplicated; %d sends retried on another replica)", res.acked, res.acked-res.writes.missing-res.writes.duplicated, res.writes.missing, res.writes.duplicated, res.retried)},
		{"cursors sampled / moved back", fmt.Sprintf("%d / %d", res.cursors.samples, len(res.cursors.regressions))},
		{"blind windows: etcd / Kubernetes / leasewatch", fmt.Sprintf("%d / %d / %d", len(res.blinds[etcdSource]), len(res.blinds[kubeSource]), len(res.blinds["leasewatch"]))},
		{"Redis: handovers / blind windows", fmt.Sprintf("%d / %d, %s blind in all", len(res.handovers), len(res.blinds[redisSource]), ms(redisBlind))},
		{"drained after the load", res.drained.Round(time.Millisecond).String()},
	}
	if k.database {
		var outages []time.Duration
		for _, d := range res.disruptions {
			outages = append(outages, d.outage)
		}
		o := quantiles(outages, 0.5, 0.99, 1)
		rows = append(rows, [2]string{"database failover: recording resumed p50 / p99 / max", fmt.Sprintf("%s / %s / %s (from the primary's kill to every source up and every replica ready)", ms(o[0]), ms(o[1]), ms(o[2]))})
	}
	for _, kind := range slices.Sorted(maps.Keys(res.writes.findingsByKind)) {
		rows = append(rows, [2]string{"findings: " + kind, fmt.Sprint(res.writes.findingsByKind[kind])})
	}
	for _, r := range rows {
		fmt.Fprintf(out, "| %s | %s |\n", r[0], r[1])
	}
}

// scenario is the scenario's name on the command line.
func (k *failoverLoad) scenario() string {
	switch {
	case k.rolling:
		return "rolling"
	case k.database:
		return "dbfailover"
	}
	return "failover"
}
