package web

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/review"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/audit/sqlite/synth"
	"github.com/leasewatch/leasewatch/audit/verdict"
	"github.com/leasewatch/leasewatch/web/present"
)

// BenchmarkPages measures the server time of every dashboard page on the
// synthetic database (synth.Default: 50,000 locks, about 11 million events
// over 30 days). The database is generated once into .cache/bench/ at the
// repository root (several minutes) and reused until the generator changes.
// Run with: go test -run '^$' -bench Pages -benchtime 60x ./web/
//
// Each sub-benchmark reports p50 and p95 in milliseconds besides ns/op.
func BenchmarkPages(b *testing.B) {
	spec := synth.Default()
	h, store, sum := benchServer(b, spec)
	for _, p := range defaultPages(b, store, sum, spec) {
		benchPage(b, h, p.name, p.url)
	}
}

// benchURL is one page of a benchmark.
type benchURL struct{ name, url string }

// defaultPages are the pages BenchmarkPages serves from synth.Default's
// database in store, summarized by sum.
func defaultPages(b *testing.B, store audit.Store, sum synth.Summary, spec synth.Spec) []benchURL {
	b.Helper()
	ctx := context.Background()
	busy, err := store.LockByKey(ctx, sum.Busiest)
	if err != nil {
		b.Fatal(err)
	}
	deep, err := store.Locks(ctx, audit.LockFilter{Class: audit.ClassLock, Offset: 20_000, Limit: 1})
	if err != nil || len(deep) == 0 {
		b.Fatalf("deep page cursor: %v", err)
	}
	quiet, err := store.Locks(ctx, audit.LockFilter{Class: audit.ClassLock, State: audit.StateFree, Offset: 5_000, Limit: 1})
	if err != nil || len(quiet) == 0 {
		b.Fatalf("quiet lock: %v", err)
	}
	critical, err := store.Findings(ctx, audit.FindingFilter{Severity: audit.SeverityCritical, TimeFilter: audit.TimeFilter{Limit: 1}})
	if err != nil || len(critical) == 0 {
		b.Fatalf("a critical finding: %v", err)
	}
	// The busiest hour for a review is the last: the generator starts about
	// half the locks' current tenures in it. Over every lock, the review
	// stops at its cap and says so; the largest report it builds names that
	// many locks, here the most recently changed.
	recent, err := store.Locks(ctx, audit.LockFilter{Class: audit.ClassLock, Sort: audit.SortChanged, Limit: review.DefaultMaxLocks})
	if err != nil || len(recent) < review.DefaultMaxLocks {
		b.Fatalf("recently changed locks: %d, %v", len(recent), err)
	}
	busyID, deepID := strconv.FormatInt(busy.ID, 10), strconv.FormatInt(deep[0].ID, 10)
	day := spec.End.Add(-24 * time.Hour).Format(time.RFC3339)
	lastHour := url.Values{"from": {spec.End.Add(-time.Hour).Format(time.RFC3339)}, "to": {spec.End.Format(time.RFC3339)}}
	recentLocks := url.Values{"from": lastHour["from"], "to": lastHour["to"]}
	for _, l := range recent {
		recentLocks.Add("lock", strconv.FormatInt(l.ID, 10))
	}
	busyDay := url.Values{"from": {day}, "to": {spec.End.Format(time.RFC3339)}, "lock": {busyID}}
	return []benchURL{
		{"Overview", "/"},
		{"LocksFirstPage", "/locks"},
		{"LocksDeepPage", "/locks?after=" + deepID},
		{"LocksSearch", "/locks?q=job-0421"},
		{"LocksSearchAll", "/locks?class=all&q=node-4"},
		{"LocksByMargin", "/locks?sort=margin"},
		{"LocksByChange", "/locks?sort=changed&state=expired"},
		{"LocksHolder", "/locks?class=all&holder=" + busy.Holder},
		{"LocksByVerdict", "/locks?verdict=unverified"},
		{"LockBusy1h", "/locks/" + busyID},
		{"LockBusy24h", "/locks/" + busyID + "?window=24h"},
		{"LockBusy7d", "/locks/" + busyID + "?window=7d"},
		{"LockBusyRenewals", "/locks/" + busyID + "?window=15m&kind=renew"},
		{"LockBusyVerdictAll", "/locks/" + busyID + "?verdict=all"},
		{"LockQuiet", fmt.Sprintf("/locks/%d", quiet[0].ID)},
		{"LockFinding", strings.Split(present.FindingTimelineURL(critical[0]), "#")[0]},
		{"Findings", "/findings"},
		{"FindingsHeartbeats", "/findings?class=heartbeat"},
		{"FindingsAllClasses", "/findings?class=all"},
		{"FindingsCritical24h", "/findings?severity=critical&from=" + day},
		{"FindingsSourceKind", "/findings?source=cluster-a&kind=lease_expired"},
		{"FindingsLock", "/findings?lock=" + busyID},
		{"Sources", "/sources"},
		{"ReviewBusiestHour", "/review?" + lastHour.Encode()},
		{"ReviewBusiestHourCapLocks", "/review?" + recentLocks.Encode()},
		{"ReviewBusiestHourCapLocksMarkdown", "/review.md?" + recentLocks.Encode()},
		{"ReviewBusiestHourCapLocksJSON", "/review.json?" + recentLocks.Encode()},
		{"ReviewBusyLock24h", "/review?" + busyDay.Encode()},
		{"ReviewBusyLock24hMarkdown", "/review.md?" + busyDay.Encode()},
		{"ReviewBusyLock24hJSON", "/review.json?" + busyDay.Encode()},
		{"APISources", "/api/v1/sources"},
		{"APILocks", "/api/v1/locks"},
		{"APILocksSearch", "/api/v1/locks?q=job-0421"},
		{"APILocksByMargin", "/api/v1/locks?sort=margin&state=held"},
		{"APILock", "/api/v1/locks/" + busyID},
		{"APIBusyEvents", "/api/v1/locks/" + busyID + "/events"},
		{"APIBusyEventsDay", "/api/v1/locks/" + busyID + "/events?limit=1000&from=" + day},
		{"APIBusyGrants", "/api/v1/locks/" + busyID + "/events?kind=grant"},
		{"APIBusyTenures", "/api/v1/locks/" + busyID + "/tenures"},
		{"APIBusyVerdict", "/api/v1/locks/" + busyID + "/verdict"},
		{"APIBusyAdvice", "/api/v1/locks/" + busyID + "/advice"},
		{"APIFindings", "/api/v1/findings"},
		{"APIFindingsCritical24h", "/api/v1/findings?severity=critical&from=" + day},
		{"APIFindingsLock", "/api/v1/findings?lock=" + url.QueryEscape(busy.Source+"/"+busy.Name)},
	}
}

// BenchmarkPagesWrites measures the lock page, the findings and the incident
// review on locks that resources write to thousands of times an hour, as the
// ingest load leaves them (synth.Writes: 20 such locks, each with about 6,500
// write reports and 800 stale_write findings in the last hour, on top of a
// week of ordinary history). Run with:
// go test -run '^$' -bench PagesWrites -benchtime 30x ./web/
func BenchmarkPagesWrites(b *testing.B) {
	ctx := context.Background()
	spec := synth.Writes()
	h, store, sum := benchServer(b, spec)
	hot, err := store.LockByKey(ctx, sum.Written[0])
	if err != nil {
		b.Fatal(err)
	}
	hotID := strconv.FormatInt(hot.ID, 10)
	end := spec.End.Format(time.RFC3339)
	hour := url.Values{"from": {spec.End.Add(-time.Hour).Format(time.RFC3339)}, "to": {end}}
	hotHour := url.Values{"from": hour["from"], "to": hour["to"], "lock": {hotID}}
	hot15m := url.Values{"from": {spec.End.Add(-15 * time.Minute).Format(time.RFC3339)}, "to": {end}, "lock": {hotID}}
	written := url.Values{"from": hour["from"], "to": hour["to"]}
	for _, k := range sum.Written {
		written.Add("lock", k.String())
	}
	for _, p := range []struct{ name, url string }{
		{"Lock1h", "/locks/" + hotID},
		{"Lock15m", "/locks/" + hotID + "?window=15m"},
		{"Lock6h", "/locks/" + hotID + "?window=6h"},
		{"LockWrites", "/locks/" + hotID + "?kind=write_rejected"},
		{"FindingsLock", "/findings?lock=" + hotID},
		{"FindingsStale", "/findings?kind=stale_write"},
		{"Review1h", "/review?" + hotHour.Encode()},
		{"Review15m", "/review?" + hot15m.Encode()},
		{"Review1hMarkdown", "/review.md?" + hotHour.Encode()},
		{"Review1hJSON", "/review.json?" + hotHour.Encode()},
		{"ReviewAllWritten1h", "/review?" + written.Encode()},
		{"ReviewLastHour", "/review?" + hour.Encode()},
		{"APIEvents", "/api/v1/locks/" + hotID + "/events"},
		{"APIFindingsLock", "/api/v1/findings?lock=" + url.QueryEscape(sum.Written[0].String())},
	} {
		benchPage(b, h, p.name, p.url)
	}
}

// benchServer serves spec's cached database (generated into .cache/bench/ at
// the repository root on first use) through the recorder's overlay, as in
// leasewatch serve, with the clock at the data's end.
func benchServer(b *testing.B, spec synth.Spec) (http.Handler, *sqlite.Store, synth.Summary) {
	b.Helper()
	ctx := context.Background()
	root, err := repoRoot()
	if err != nil {
		b.Fatal(err)
	}
	path, sum, err := synth.Cached(ctx, filepath.Join(root, ".cache", "bench"), spec)
	if err != nil {
		b.Fatalf("generate benchmark database: %v", err)
	}
	store, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	return benchHandler(b, store, sum.Sources, spec.End), store, sum
}

// benchStore is what a page benchmark serves from: either store.
type benchStore interface {
	audit.Store
	audit.Journal
}

// benchHandler serves store through the recorder's overlay, as in
// leasewatch serve, with sources up and the clock at now. The recorder is
// not started, so nothing writes to the store; a synced store has no
// renewal waiting to be laid over its rows.
func benchHandler(b *testing.B, store benchStore, sources []string, now time.Time) http.Handler {
	b.Helper()
	const renewMargin = 0.25
	rec := audit.NewRecorder(store, audit.TrackerConfig{RenewMarginRatio: renewMargin}, nil)
	srv, err := New(Config{
		Store: rec.Fresh(store),
		Sources: func() []audit.Source {
			var out []audit.Source
			for _, s := range sources {
				out = append(out, audit.Source{Name: s, State: audit.SourceUp})
			}
			return out
		},
		Logger:           slog.New(slog.DiscardHandler),
		Now:              func() time.Time { return now },
		RenewMarginRatio: renewMargin,
	})
	if err != nil {
		b.Fatal(err)
	}
	return srv.Handler()
}

// BenchmarkLockPageWriteStrip measures the lock page (its default hour) of
// one lock that took n write reports in that hour, one in ten rejected, for
// n from a thousand to 400,000: the ingest load leaves about 120,000 an hour
// on each of its locks. Memory per page should not grow with n. Run with:
// go test -run '^$' -bench LockPageWriteStrip -benchmem -benchtime 20x ./web/
func BenchmarkLockPageWriteStrip(b *testing.B) {
	ctx := context.Background()
	store, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "leasewatch.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	end := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	key := audit.LockKey{Source: "prod-etcd", Name: "/locks/ingest/orders-00"}
	grant := audit.Event{Lock: key, Kind: audit.EventGrant, At: end.Add(-2 * time.Hour), Holder: "worker-1",
		Token: audit.Int64(7), TTL: 10 * time.Second}
	if err := store.Apply(ctx, audit.Batch{Events: []audit.Event{grant}}); err != nil {
		b.Fatal(err)
	}
	l, err := store.LockByKey(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	h := benchHandler(b, store, []string{key.Source}, end)
	const gap = 7 * time.Millisecond // 400,000 writes fill 47 minutes
	written := 0
	for _, n := range []int{1_000, 10_000, 100_000, 400_000} {
		for written < n {
			var batch audit.Batch
			for ; written < n && len(batch.Events) < 10_000; written++ {
				e := audit.Event{Lock: key, Kind: audit.EventWriteAccepted, At: end.Add(-time.Duration(written+1) * gap),
					Holder: "worker-1", Token: audit.Int64(7), Resource: fmt.Sprintf("shard-%d", written%200)}
				if written%10 == 0 {
					e.Kind, e.Token = audit.EventWriteRejected, audit.Int64(6)
				}
				batch.Events = append(batch.Events, e)
			}
			if err := store.Apply(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
		benchPage(b, h, fmt.Sprintf("Writes%d", n), "/locks/"+strconv.FormatInt(l.ID, 10))
	}
}

// benchPage runs GET url as sub-benchmark name and reports its p50 and p95
// server time in milliseconds besides ns/op.
func benchPage(b *testing.B, h http.Handler, name, url string) {
	b.Run(name, func(b *testing.B) {
		var times []time.Duration
		for b.Loop() {
			req := httptest.NewRequest(http.MethodGet, url, nil)
			rec := httptest.NewRecorder()
			start := time.Now()
			h.ServeHTTP(rec, req)
			times = append(times, time.Since(start))
			if rec.Code != http.StatusOK {
				b.Fatalf("GET %s = %d: %s", url, rec.Code, rec.Body.String())
			}
		}
		slices.Sort(times)
		b.ReportMetric(ms(percentile(times, 0.50)), "p50-ms")
		b.ReportMetric(ms(percentile(times, 0.95)), "p95-ms")
	})
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1)*p + 0.5)
	return sorted[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// repoRoot finds the module root from the test's working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
		dir = parent
	}
}

// BenchmarkKeeperSweep is one sweep of the verdict keeper over every lock of
// class lock of the benchmark database, as serve runs it every 10 minutes:
// each lock's verdict over the last 24 hours, judged and kept. It reports
// the time per lock judged. The kept verdicts stay in the database, for
// the locks list's verdict filter (LocksByVerdict in BenchmarkPages).
func BenchmarkKeeperSweep(b *testing.B) {
	spec := synth.Default()
	_, store, _ := benchServer(b, spec)
	k := &verdict.Keeper{Store: store, Put: store.PutVerdicts, Now: func() time.Time { return spec.End }}
	ctx := context.Background()
	n, err := store.CountLocks(ctx, audit.LockFilter{Class: audit.ClassLock})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if err := k.SweepOnce(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n)/1e6, "ms/lock")
	b.ReportMetric(float64(n), "locks")
}
