package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// soak is the retention soak: a steady Redis load for a long time with short
// retention, sampling the database's size, which must level off once
// retention has begun to prune, while pruned renewals stay summarised.
type soak struct {
	load         redisLoad
	renewals     time.Duration // retention of renew events
	events       time.Duration // retention of every other event
	sampleEvery  time.Duration
	pruneCadence time.Duration // leasewatch's retention pass interval, for the settling estimate
	postgres     bool          // leasewatch's database on PostgreSQL rather than SQLite
}

// sizeSample is the database at one moment of the soak.
type sizeSample struct {
	at            time.Duration // since the load started
	recorded      float64       // events recorded so far
	pruned        float64       // events pruned so far
	inUse, onDisk int64         // bytes: pages in use; the files (database and WAL)
}

func (s *soak) run(ctx context.Context, out, log io.Writer) error {
	config := fmt.Sprintf("retention:\n  events: %s\n  kinds:\n    renew: %s\n", s.events, s.renewals)
	rig, err := startRedisRig(ctx, s.load.leasewatch, s.load.keep, s.postgres, config, log)
	if err != nil {
		return err
	}
	defer rig.close()
	k := &s.load
	rate := float64(k.locks) / k.every.Seconds()
	fmt.Fprintf(log, "soak: %d locks extended every %s (%.0f events/s) for %s; renewals kept %s, other events %s\n",
		k.locks, k.every, rate, k.duration, s.renewals, s.events)

	loadCtx, stopLoad := context.WithTimeout(ctx, k.duration)
	defer stopLoad()
	done := make(chan *tally, 1)
	go func() { done <- k.drive(loadCtx, rig) }()

	var samples []sizeSample
	start := time.Now()
	tick := time.NewTicker(s.sampleEvery)
	defer tick.Stop()
	for loadCtx.Err() == nil {
		select {
		case <-loadCtx.Done():
		case <-tick.C:
			smp, err := sampleSize(ctx, rig, time.Since(start))
			if err != nil {
				return err
			}
			samples = append(samples, smp)
			fmt.Fprintf(log, "%8s  recorded %10.0f  pruned %10.0f  in use %7.1f MiB  on disk %7.1f MiB\n",
				smp.at.Round(time.Second), smp.recorded, smp.pruned, mib(smp.inUse), mib(smp.onDisk))
		}
	}
	t := <-done
	if ctx.Err() != nil {
		return ctx.Err()
	}

	summary, err := prunedSummary(ctx, rig.lw.url, "lock:0")
	if err != nil {
		return err
	}

	// The size should level off once renewals older than their retention
	// go, a pass interval later; compare the settled part's ends.
	settle := s.renewals + 2*s.pruneCadence
	var settled []sizeSample
	for _, smp := range samples {
		if smp.at >= settle {
			settled = append(settled, smp)
		}
	}
	fmt.Fprintf(out, "\nleasewatch-load soak: %d Redis locks extended every %s (%.0f events/s offered) for %s; retention: renewals %s, other events %s\n\n",
		k.locks, k.every, rate, k.duration, s.renewals, s.events)
	fmt.Fprintf(out, "| minute | events recorded | events pruned | database in use | files on disk |\n|---|---|---|---|---|\n")
	for _, smp := range samples {
		if smp.at%time.Minute < s.sampleEvery || smp == samples[len(samples)-1] {
			fmt.Fprintf(out, "| %.1f | %.0f | %.0f | %.1f MiB | %.1f MiB |\n", smp.at.Minutes(), smp.recorded, smp.pruned, mib(smp.inUse), mib(smp.onDisk))
		}
	}
	fmt.Fprintf(out, "\nextensions achieved: %.0f/s (%d skipped, %d lost to expiry, %d unanswered)\n",
		float64(t.renewals.Load())/k.duration.Seconds(), t.skipped.Load(), t.lost.Load(), t.failed.Load())
	fmt.Fprintf(out, "lock:0's first tenure, pruned renewals: %s\n", summary)
	if len(settled) < 2 {
		return fmt.Errorf("the soak ended before retention settled (%s): run it longer", settle)
	}
	first, last := settled[0], settled[len(settled)-1]
	var peak int64
	for _, smp := range settled {
		peak = max(peak, smp.onDisk)
	}
	fmt.Fprintf(out, "after %s: files on disk %.1f → %.1f MiB (peak %.1f), in use %.1f → %.1f MiB, over %.0f events recorded\n",
		settle, mib(first.onDisk), mib(last.onDisk), mib(peak), mib(first.inUse), mib(last.inUse), last.recorded-first.recorded)
	if summary == "none" {
		return fmt.Errorf("no pruned-renewal summary on lock:0")
	}
	return nil
}

// sampleSize reads the database's size: pages in use from leasewatch's
// metric, and the files as they are on disk.
func sampleSize(ctx context.Context, rig *redisRig, at time.Duration) (sizeSample, error) {
	mfs, err := scrape(ctx, rig.lw.url)
	if err != nil {
		return sizeSample{}, err
	}
	smp := sizeSample{at: at,
		recorded: counterSum(mfs, "leasewatch_events_recorded_total", map[string]string{"source": loadSource}),
		pruned:   counterSum(mfs, "leasewatch_retention_pruned_total", map[string]string{"table": "events"}),
	}
	if g := labelled(mfs, "leasewatch_database_bytes", nil); len(g) > 0 {
		smp.inUse = int64(g[0].GetGauge().GetValue())
	}
	if rig.pg != nil {
		// The whole cluster: tables, indexes and the write-ahead log.
		err = filepath.WalkDir(rig.pg.DataDir, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					smp.onDisk += fi.Size()
				}
			}
			return nil
		})
		return smp, err
	}
	for _, name := range []string{"leasewatch.db", "leasewatch.db-wal"} {
		if fi, err := os.Stat(filepath.Join(rig.dir, name)); err == nil {
			smp.onDisk += fi.Size()
		}
	}
	return smp, nil
}

// prunedSummary describes the pruned renewals of the lock's first tenure, as
// the API reports them: retention must leave them queryable.
func prunedSummary(ctx context.Context, base, lock string) (string, error) {
	var locks struct {
		Locks []struct {
			ID int64 `json:"id"`
		} `json:"locks"`
	}
	if err := getJSON(ctx, base+"/api/v1/locks?name="+url.QueryEscape(lock), &locks); err != nil {
		return "", err
	}
	if len(locks.Locks) != 1 {
		return "", fmt.Errorf("lock %s: found %d", lock, len(locks.Locks))
	}
	var tenures struct {
		Tenures []struct {
			Renewals int64           `json:"renewals"`
			Pruned   json.RawMessage `json:"pruned_renewals"`
		} `json:"tenures"`
	}
	if err := getJSON(ctx, fmt.Sprintf("%s/api/v1/locks/%d/tenures", base, locks.Locks[0].ID), &tenures); err != nil {
		return "", err
	}
	if len(tenures.Tenures) == 0 || string(tenures.Tenures[0].Pruned) == "null" {
		return "none", nil
	}
	return fmt.Sprintf("%s of %d renewals", tenures.Tenures[0].Pruned, tenures.Tenures[0].Renewals), nil
}

func getJSON(ctx context.Context, u string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// flags declares the soak's flags on fs.
func (s *soak) flags(fs *flag.FlagSet) {
	fs.IntVar(&s.load.locks, "locks", 1000, "string locks")
	fs.DurationVar(&s.load.ttl, "ttl", 2*time.Second, "lock TTL")
	fs.DurationVar(&s.load.every, "every", 500*time.Millisecond, "extension period of each lock")
	fs.DurationVar(&s.load.duration, "duration", 30*time.Minute, "how long the load runs")
	fs.DurationVar(&s.renewals, "renewals", 2*time.Minute, "retention of renew events")
	fs.DurationVar(&s.events, "events", 5*time.Minute, "retention of every other event")
	fs.DurationVar(&s.sampleEvery, "sample", 10*time.Second, "time between size samples")
	fs.StringVar(&s.load.leasewatch, "leasewatch", "", "leasewatch binary (default: go build ./cmd/leasewatch)")
	fs.BoolVar(&s.load.keep, "keep", false, "keep the run's folder (leasewatch's database and config) and say where")
	fs.BoolVar(&s.postgres, "postgres", false, "leasewatch's database on a PostgreSQL server of the run's own instead of a SQLite file")
}
