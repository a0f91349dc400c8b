package verdict_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// The keeper over a real store: a sweep judges every lock of class lock
// (not the heartbeat, which no commit touches either, nor a source it does
// not own); a write that lands unfenced, once committed, touches its lock,
// and the next round makes it unsafe; locks of a purpose of efficiency are
// kept as such.
func TestKeeper(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "leasewatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tr := audit.NewTracker(audit.TrackerConfig{RenewMarginRatio: 0.25})
	var touched []audit.LockKey
	apply := func(b audit.Batch) {
		t.Helper()
		if err := st.Apply(ctx, b); err != nil {
			t.Fatal(err)
		}
		touched = append(touched, verdict.Touched(&b)...)
	}
	observe := func(source, name string, class audit.Class, holder string, token int64, when time.Duration) {
		ob := audit.Observation{Lock: audit.LockKey{Source: source, Name: name}, Kind: audit.EventGrant, At: at(when),
			Holder: holder, Token: audit.Int64(token), LeaseDuration: lease, Class: class}
		apply(tr.Step(audit.Input{Source: source, Kind: audit.KindEtcd, Observations: []audit.Observation{ob}}))
	}
	write := func(name string, token int64, outcome audit.WriteOutcome, when time.Duration) {
		apply(tr.ReportWrite(audit.WriteReport{Source: "src", Lock: name, Resource: "db", Token: audit.Int64(token), Outcome: outcome, At: at(when)}))
	}
	observe("src", "orders", audit.ClassLock, "a", 1, 0)
	write("orders", 1, audit.WriteAccepted, time.Second)
	observe("src", "cache", audit.ClassLock, "a", 1, 0)
	observe("src", "node-1", audit.ClassHeartbeat, "node-1", 1, 0)
	observe("other", "jobs", audit.ClassLock, "j", 1, 0)
	// Heartbeats are not judged: a round would read them only to skip them.
	for _, key := range touched {
		if key.Name == "node-1" {
			t.Errorf("the heartbeat's grant touched %s", key)
		}
	}

	now := at(time.Hour)
	k := &verdict.Keeper{Store: st, Put: st.PutVerdicts, Now: func() time.Time { return now },
		Purposes: verdict.Purposes{{Selector: audit.Selector{Lock: "cache"}, Purpose: verdict.PurposeEfficiency}},
		Owns:     func(source string) bool { return source == "src" }}
	kept := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, name := range []string{"src/orders", "src/cache", "src/node-1", "other/jobs"} {
			key, _ := audit.ParseLockKey(name)
			l, err := st.LockByKey(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			vs, err := st.Verdicts(ctx, []int64{l.ID})
			if err != nil {
				t.Fatal(err)
			}
			if v, ok := vs[l.ID]; ok {
				out[name] = v.Verdict
				if !v.JudgedAt.Equal(now) {
					t.Errorf("%s judged at %v, want %v", name, v.JudgedAt, now)
				}
			}
		}
		return out
	}
	if err := k.SweepOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := kept(), map[string]string{"src/orders": "fenced", "src/cache": "efficiency"}; !maps.Equal(got, want) {
		t.Fatalf("after a sweep: %v, want %v", got, want)
	}

	// b takes orders over; a's late write gets through.
	touched = nil
	observe("src", "orders", audit.ClassLock, "b", 2, 2*time.Second)
	write("orders", 1, audit.WriteAccepted, 3*time.Second)
	k.Touch(touched...)
	if err := k.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := kept()["src/orders"]; got != "unsafe" {
		t.Fatalf("after the unfenced write: orders kept %q, want unsafe", got)
	}
}

// pagesOfLocks is three pages of locks, of a sweep or a round.
const pagesOfLocks = 1200

// grantPagesOfLocks stores pagesOfLocks granted locks and returns the
// store and the commit's batch.
func grantPagesOfLocks(t *testing.T, ctx context.Context) (*sqlite.Store, audit.Batch) {
	t.Helper()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "leasewatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	obs := make([]audit.Observation, pagesOfLocks)
	for i := range obs {
		obs[i] = audit.Observation{Lock: audit.LockKey{Source: "src", Name: fmt.Sprintf("lock-%04d", i)}, Kind: audit.EventGrant,
			At: at(0), Holder: "a", Token: audit.Int64(1), LeaseDuration: lease}
	}
	tr := audit.NewTracker(audit.TrackerConfig{})
	b := tr.Step(audit.Input{Source: "src", Kind: audit.KindEtcd, Observations: obs})
	if err := st.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	return st, b
}

// A round after a commit of more locks than a page judges them a page at
// a time, every one.
func TestKeeperRoundJudgesEveryPage(t *testing.T) {
	ctx := context.Background()
	st, b := grantPagesOfLocks(t, ctx)
	k := &verdict.Keeper{Store: st, Put: st.PutVerdicts, Now: func() time.Time { return at(time.Hour) }}
	k.Committed(audit.Commit{Batch: &b})
	if err := k.Round(ctx); err != nil {
		t.Fatal(err)
	}
	counts, err := st.VerdictCounts(ctx, audit.ClassLock)
	if err != nil {
		t.Fatal(err)
	}
	if counts["unverified"] != pagesOfLocks {
		t.Errorf("kept verdicts %v after a round, want all %d locks unverified (no writes)", counts, pagesOfLocks)
	}
}

// Run's sweeps yield between pages; every page is still judged.
func TestKeeperRunSweepsEveryPage(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, _ := grantPagesOfLocks(t, ctx)
	const locks = pagesOfLocks
	k := &verdict.Keeper{Store: st, Put: st.PutVerdicts, Now: func() time.Time { return at(time.Hour) },
		Every: time.Millisecond, Sweep: time.Hour, Log: slog.New(slog.DiscardHandler)}
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	// A bound on liveness, not on speed: under the race detector on a
	// busy machine, a sweep of 1,200 locks has taken over 30 s.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		counts, err := st.VerdictCounts(ctx, audit.ClassLock)
		if err != nil {
			t.Fatal(err)
		}
		if counts["unverified"] == locks {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kept verdicts %v, want all %d locks unverified (no writes)", counts, locks)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
