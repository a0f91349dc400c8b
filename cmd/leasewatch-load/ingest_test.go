package main

import (
	"bytes"
	"context"
	"flag"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer collects the log of leasewatch and the load, written from
// several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startLoadTest begins a short load run in a test: a context of 3 minutes,
// the log of leasewatch and the load (shown when the test fails), and
// leasewatch built as the test was (raceFlags).
func startLoadTest(t *testing.T) (context.Context, *syncBuffer, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	log := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of leasewatch and the load:\n%s", log.String())
		}
	})
	bin, err := buildLeasewatch(ctx, t.TempDir(), log, raceFlags()...)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, log, bin
}

// raceFlags are the go build flags that give leasewatch the race detector
// when this test has it: the race-built packages are then the ones the
// other tests' builds cached, and a race in ingest or the pages under
// concurrent load fails the test.
func raceFlags() []string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				return []string{"-race"}
			}
		}
	}
	return nil
}

// A short ingest load against a real leasewatch process and embedded etcd:
// every request succeeds, every page and both ingest shapes were exercised,
// and every report answered 202 is stored exactly once.
func TestIngestLoadStoresEveryAcceptedReportOnce(t *testing.T) {
	ctx, log, bin := startLoadTest(t)

	var k ingestLoad
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	k.flags(fs)
	if err := fs.Parse([]string{"--writers", "20", "--browsers", "5", "--locks", "5", "--hold", "2s",
		"--write-every", "200ms", "--think", "200ms", "--sample", "1s", "--duration", "10s", "--leasewatch", bin}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r, err := k.execute(ctx, log)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	var out bytes.Buffer
	k.write(&out, r)
	t.Logf("load ran in %s:\n%s", time.Since(start).Round(time.Millisecond), out.String())

	if err := k.check(r); err != nil {
		t.Error(err)
	}
	for _, kind := range allKinds() {
		if s := r.stats.get(kind); len(s.latencies) == 0 {
			t.Errorf("%s: no request succeeded (%d failed)", kind, s.errors)
		}
	}
	if r.ackedRejected == 0 || r.findingsByKind["stale_write"] == 0 {
		t.Errorf("%d rejected writes answered 202, %d stale_write findings; want some of each", r.ackedRejected, r.findingsByKind["stale_write"])
	}
	if r.handovers == 0 {
		t.Error("no lock changed hands during the load")
	}
	if strings.Contains(log.String(), "DATA RACE") {
		t.Error("leasewatch reported a data race")
	}
}

// A value the load cannot run with is refused before anything starts, naming
// the flag.
func TestIngestLoadRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--writers", "0"}, "--writers 0"},
		{[]string{"--browsers", "-1"}, "--browsers -1"},
		{[]string{"--locks", "0"}, "--locks 0"},
		{[]string{"--batch", "1"}, "--batch 1"},
		{[]string{"--batchers", "1.5"}, "--batchers 1.5"},
		{[]string{"--rejected", "-0.1"}, "--rejected -0.1"},
		{[]string{"--think", "0s"}, "--think 0s"},
		{[]string{"--duration", "-1s"}, "--duration -1s"},
		{[]string{"--commit-interval", "-1ms"}, "--commit-interval -1ms"},
	} {
		var k ingestLoad
		fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
		k.flags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := k.validate(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one starting %q", tc.args, err, tc.want)
		}
	}
	var k ingestLoad
	k.flags(flag.NewFlagSet("ingest", flag.ContinueOnError))
	if err := k.validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

// The floors by fifth show a climb that levels off, and a span without a
// value says so rather than showing zero.
func TestFloorsByPart(t *testing.T) {
	var samples []ingestSample
	for i, anon := range []int64{10, 12, 30, 28, 40, 41, 40, 39, 42, 40} {
		s := ingestSample{goHeap: -1}
		s.anon = anon << 20
		if i >= 8 {
			s.goHeap = 5 << 20
		}
		samples = append(samples, s)
	}
	if got, want := strings.Join(floorsByPart(samples, anonRSS, 5), ", "), "10.0, 28.0, 40.0, 39.0, 40.0"; got != want {
		t.Errorf("anonymous floors = %s, want %s", got, want)
	}
	if got, want := strings.Join(floorsByPart(samples, goHeap, 5), ", "), "—, —, —, —, 5.0"; got != want {
		t.Errorf("Go heap floors = %s, want %s", got, want)
	}
}
