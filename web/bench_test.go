package web

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/audit/sqlite/synth"
)

// BenchmarkPages measures the server time of every dashboard page on the
// synthetic database (synth.Default: 50,000 locks, about 11 million events
// over 30 days). The database is generated once into .cache/bench/ at the
// repository root (several minutes) and reused until the generator changes.
// Run with: go test -run '^$' -bench Pages -benchtime 50x ./web/
//
// Each sub-benchmark reports p50 and p95 in milliseconds besides ns/op.
func BenchmarkPages(b *testing.B) {
	ctx := context.Background()
	root, err := repoRoot()
	if err != nil {
		b.Fatal(err)
	}
	spec := synth.Default()
	path, sum, err := synth.Cached(ctx, filepath.Join(root, ".cache", "bench"), spec)
	if err != nil {
		b.Fatalf("generate benchmark database: %v", err)
	}
	store, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	srv, err := New(Config{
		Store: store,
		Sources: func() []audit.Source {
			var out []audit.Source
			for _, s := range sum.Sources {
				out = append(out, audit.Source{Name: s, State: audit.SourceUp})
			}
			return out
		},
		Logger:           slog.New(slog.DiscardHandler),
		Now:              func() time.Time { return spec.End },
		RenewMarginRatio: 0.25,
	})
	if err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()

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
	busyID, deepID := strconv.FormatInt(busy.ID, 10), strconv.FormatInt(deep[0].ID, 10)
	day := spec.End.Add(-24 * time.Hour).Format(time.RFC3339)
	for _, p := range []struct{ name, url string }{
		{"Overview", "/"},
		{"LocksFirstPage", "/locks"},
		{"LocksDeepPage", "/locks?after=" + deepID},
		{"LocksSearch", "/locks?q=job-0421"},
		{"LocksSearchAll", "/locks?class=all&q=node-4"},
		{"LocksByMargin", "/locks?sort=margin"},
		{"LocksByChange", "/locks?sort=changed&state=expired"},
		{"LocksHolder", "/locks?class=all&holder=" + busy.Holder},
		{"LockBusy1h", "/locks/" + busyID},
		{"LockBusy24h", "/locks/" + busyID + "?window=24h"},
		{"LockBusy7d", "/locks/" + busyID + "?window=7d"},
		{"LockBusyRenewals", "/locks/" + busyID + "?window=15m&kind=renew"},
		{"LockQuiet", fmt.Sprintf("/locks/%d", quiet[0].ID)},
		{"LockFinding", strings.Split(findingRow(critical[0], time.UTC).TimelineURL, "#")[0]},
		{"Findings", "/findings"},
		{"FindingsCritical24h", "/findings?severity=critical&from=" + day},
		{"FindingsSourceKind", "/findings?source=cluster-a&kind=lease_expired"},
		{"FindingsLock", "/findings?lock=" + busyID},
		{"Sources", "/sources"},
	} {
		b.Run(p.name, func(b *testing.B) {
			var times []time.Duration
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, p.url, nil)
				rec := httptest.NewRecorder()
				start := time.Now()
				h.ServeHTTP(rec, req)
				times = append(times, time.Since(start))
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s = %d: %s", p.url, rec.Code, rec.Body.String())
				}
			}
			slices.Sort(times)
			b.ReportMetric(ms(percentile(times, 0.50)), "p50-ms")
			b.ReportMetric(ms(percentile(times, 0.95)), "p95-ms")
		})
	}
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
