package synth

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/runcodec"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// checkBusiestSealed checks that the busiest lock's renewals read back,
// every one, and that those of the hours closed before the end are sealed
// into runs while the last hour's are rows, as the service leaves them.
func checkBusiestSealed(t *testing.T, store *sqlite.Store, sum Summary) {
	t.Helper()
	ctx := context.Background()
	l, err := store.LockByKey(ctx, sum.Busiest)
	if err != nil {
		t.Fatal(err)
	}
	all := audit.EventFilter{Kind: audit.EventRenew, TimeFilter: audit.TimeFilter{Limit: audit.MaxListLimit}}
	var sealed, rows int
	for {
		page, err := store.Events(ctx, l.ID, all)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			sealedBefore := sum.Spec.End.Add(-audit.SealGrace).Truncate(audit.RunWindow)
			if _, _, run := runcodec.Split(e.ID); run {
				sealed++
				if !e.At.Before(sealedBefore) {
					t.Fatalf("renewal at %v sealed, after the last closed window %v", e.At, sealedBefore)
				}
			} else {
				rows++
			}
		}
		if len(page) < all.Limit {
			break
		}
		all.Before = audit.EventCursor{At: page[0].At, ID: page[0].ID}
	}
	if sealed+rows != sum.BusiestRenewals || sealed == 0 || rows == 0 {
		t.Errorf("busiest lock reads %d sealed and %d row renewals, want %d in all, both kinds", sealed, rows, sum.BusiestRenewals)
	}
}

// The generator writes what it says, in the shapes the dashboard relies on.
func TestGenerateSmall(t *testing.T) {
	ctx := context.Background()
	spec := Small()
	dir := t.TempDir()
	path, sum, err := Cached(ctx, dir, spec)
	if err != nil {
		t.Fatalf("Cached: %v", err)
	}
	if sum.Locks != spec.Locks {
		t.Errorf("locks = %d, want %d", sum.Locks, spec.Locks)
	}
	if sum.Events < spec.Events/2 || sum.Events > spec.Events*2 {
		t.Errorf("events = %d, want about %d", sum.Events, spec.Events)
	}
	if sum.BusiestRenewals < int(float64(spec.Events)*spec.BusyShare/4) {
		t.Errorf("busiest lock %s has %d renewals, want a busy lock", sum.Busiest, sum.BusiestRenewals)
	}

	again, sum2, err := Cached(ctx, dir, spec)
	if err != nil || again != path || sum2.Events != sum.Events {
		t.Fatalf("second Cached = %s, %+v, %v; want the cached %s", again, sum2, err, path)
	}

	store, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer store.Close()

	checkBusiestSealed(t, store, sum)

	counts, err := store.LockCounts(ctx)
	if err != nil {
		t.Fatalf("LockCounts: %v", err)
	}
	byClass := map[audit.Class]int{}
	held := 0
	total := 0
	for _, c := range counts {
		byClass[c.Class] += c.N
		total += c.N
		if c.State == audit.StateHeld {
			held += c.N
		}
	}
	if total != spec.Locks || byClass[audit.ClassHeartbeat] == 0 || byClass[audit.ClassLock] == 0 || held == 0 {
		t.Errorf("lock counts %+v: want %d locks, both classes, some held", counts, spec.Locks)
	}

	busy, err := store.LockByKey(ctx, sum.Busiest)
	if err != nil {
		t.Fatalf("LockByKey(%s): %v", sum.Busiest, err)
	}
	if busy.State != audit.StateHeld || busy.ExpiresAt.Before(spec.End) {
		t.Errorf("busiest lock %+v: want held past the end", busy)
	}
	renewals, err := store.EventTimes(ctx, busy.ID, audit.EventRenew, audit.TimeFilter{From: spec.End.Add(-time.Hour), To: spec.End, Limit: 10_000})
	if err != nil {
		t.Fatalf("EventTimes: %v", err)
	}
	perHour := sum.BusiestRenewals / (spec.Days * 24)
	if len(renewals) < perHour/2 {
		t.Errorf("busiest lock renewed %d times in its last hour, want about %d", len(renewals), perHour)
	}
	tenures, err := store.Tenures(ctx, busy.ID, audit.TimeFilter{From: spec.End.Add(-6 * time.Hour), To: spec.End})
	if err != nil {
		t.Fatalf("Tenures: %v", err)
	}
	if len(tenures) < 10 || !tenures[len(tenures)-1].Held() {
		t.Errorf("busiest lock has %d tenures in 6h, the last %+v; want many, the last held", len(tenures), tenures[len(tenures)-1])
	}

	sev, err := store.FindingCounts(ctx, audit.FindingCountFilter{})
	if err != nil {
		t.Fatalf("FindingCounts: %v", err)
	}
	if sev[audit.SeverityWarning] == 0 || sev[audit.SeverityInfo] == 0 {
		t.Errorf("finding counts %v: want warnings and infos", sev)
	}
	for _, kind := range []audit.FindingKind{audit.FindingLeaseExpired, audit.FindingStaleWrite, audit.FindingExposure, audit.FindingBlindWindow} {
		fs, err := store.Findings(ctx, audit.FindingFilter{Kind: kind, TimeFilter: audit.TimeFilter{Limit: 1}})
		if err != nil || len(fs) == 0 {
			t.Errorf("no %s finding (%v)", kind, err)
		}
	}
	bw, err := store.BlindWindows(ctx, audit.BlindFilter{})
	if err != nil {
		t.Fatalf("BlindWindows: %v", err)
	}
	if len(bw) != len(sources)*len(blinds) {
		t.Errorf("blind windows = %d, want %d (one per source and interval)", len(bw), len(sources)*len(blinds))
	}
	for _, b := range bw {
		if b.Locks == 0 || b.Reason == "" {
			t.Errorf("blind window %+v: want its lock count and reason", b)
		}
	}
	last, err := store.LastEventAt(ctx)
	if err != nil {
		t.Fatalf("LastEventAt: %v", err)
	}
	for _, s := range sum.Sources {
		if last[s].IsZero() || last[s].After(spec.End.Add(time.Minute)) {
			t.Errorf("last event of %s = %v, want by %v", s, last[s], spec.End)
		}
	}
}

func TestCachedKeysBySpec(t *testing.T) {
	a := Small()
	a.Locks, a.Events = 10, 500
	b := a
	b.Seed = 2
	dir := t.TempDir()
	pa, _, err := Cached(context.Background(), dir, a)
	if err != nil {
		t.Fatal(err)
	}
	pb, _, err := Cached(context.Background(), dir, b)
	if err != nil {
		t.Fatal(err)
	}
	if pa == pb || filepath.Dir(pa) != dir {
		t.Errorf("Cached paths %s and %s: want one per spec under %s", pa, pb, dir)
	}
}

// Write-heavy locks carry what their summary says: every write, one stale
// write finding per rejected write, and a lock still held at the end.
func TestGenerateWriteLocks(t *testing.T) {
	ctx := context.Background()
	spec := Spec{Locks: 20, Days: 1, End: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC), Events: 2_000,
		BusyLocks: 1, BusyShare: 0.3, Seed: 1, WriteLocks: 2, WriteResources: 3}
	store, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "w.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sum, err := Generate(ctx, store, spec)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if len(sum.Written) != 2 || sum.Locks != 22 {
		t.Fatalf("written locks %v of %d locks, want 2 of 22", sum.Written, sum.Locks)
	}
	l, err := store.LockByKey(ctx, sum.Written[0])
	if err != nil {
		t.Fatal(err)
	}
	if l.State != audit.StateHeld {
		t.Errorf("write-heavy lock %s is %s, want held at the end", l.Key(), l.State)
	}
	hour := audit.TimeFilter{From: spec.End.Add(-time.Hour), To: spec.End, Limit: 10_000}
	accepted, err := store.EventTimes(ctx, l.ID, audit.EventWriteAccepted, hour)
	if err != nil {
		t.Fatal(err)
	}
	rejected, err := store.EventTimes(ctx, l.ID, audit.EventWriteRejected, hour)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := store.Findings(ctx, audit.FindingFilter{LockID: l.ID, Kind: audit.FindingStaleWrite, TimeFilter: hour})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(accepted) + len(rejected); got != sum.WrittenWrites || got < 1000 {
		t.Errorf("writes in the last hour = %d, summary says %d; want over 1000", got, sum.WrittenWrites)
	}
	if len(stale) != len(rejected) || len(stale) != sum.WrittenStale || len(stale) < 100 {
		t.Errorf("stale_write findings = %d, rejected writes %d, summary %d; want them equal and over 100", len(stale), len(rejected), sum.WrittenStale)
	}
}
