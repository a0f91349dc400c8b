package audit_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

func openStore(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func startRecorder(t *testing.T, j audit.Journal, opts ...audit.RecorderOption) *audit.Recorder {
	t.Helper()
	rec := audit.NewRecorder(j, audit.TrackerConfig{SourceKinds: map[string]audit.SourceKind{"src": audit.KindEtcd}}, nil, opts...)
	if err := rec.Start(context.Background()); err != nil {
		t.Fatalf("start recorder: %v", err)
	}
	t.Cleanup(rec.Close)
	return rec
}

func grantInput(holder string, token int64, when time.Time, cursor string) audit.Input {
	return audit.Input{Source: "src", Kind: audit.KindEtcd, Cursor: cursor, Observations: []audit.Observation{{
		Lock: audit.LockKey{Source: "src", Name: "orders"}, Kind: audit.EventGrant, At: when,
		Holder: holder, Token: audit.Int64(token), LeaseDuration: 10 * time.Second,
	}}}
}

func eventKinds(t *testing.T, st *sqlite.Store) []audit.EventKind {
	t.Helper()
	ctx := context.Background()
	l, err := st.LockByKey(ctx, audit.LockKey{Source: "src", Name: "orders"})
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	evs, err := st.Events(ctx, l.ID, audit.EventFilter{})
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	var kinds []audit.EventKind
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	return kinds
}

func TestRecorderObserveIsDurableAndResumes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lw.db")
	st := openStore(t, path)
	rec := audit.NewRecorder(st, audit.TrackerConfig{}, nil)
	if err := rec.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := rec.Observe(context.Background(), grantInput("A", 41, at(0), "100")); err != nil {
		t.Fatalf("observe: %v", err)
	}
	if got := eventKinds(t, st); len(got) != 1 || got[0] != audit.EventGrant {
		t.Fatalf("events right after Observe = %v, want [grant]", got)
	}
	rec.Close()
	st.Close()

	// A new process on the same database resumes from the stored cursor and
	// the tracker's saved memory: B's grant supersedes A's tenure.
	st = openStore(t, path)
	rec = startRecorder(t, st)
	if pos, _ := rec.Cursor("src"); pos != "100" {
		t.Fatalf("cursor after restart = %q, want 100", pos)
	}
	if err := rec.Observe(context.Background(), grantInput("B", 42, at(20*time.Second), "101")); err != nil {
		t.Fatal(err)
	}
	l, _ := st.LockByKey(context.Background(), audit.LockKey{Source: "src", Name: "orders"})
	tenures, err := st.Tenures(context.Background(), l.ID, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tenures) != 2 || tenures[0].End != audit.EndSuperseded || tenures[1].Seq != 2 || *tenures[1].Token != 42 {
		t.Fatalf("tenures = %+v, want A superseded then B as seq 2", tenures)
	}
}

func TestRecorderWriteReportsAreIdempotent(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
	rec := startRecorder(t, st)
	ctx := context.Background()
	if err := rec.Observe(ctx, grantInput("A", 41, at(0), "")); err != nil {
		t.Fatal(err)
	}
	w := audit.WriteReport{Source: "src", Lock: "orders", Resource: "db", Token: audit.Int64(41), Outcome: audit.WriteAccepted, At: at(time.Second), RequestID: "r-1"}
	// The same request twice in one call, then retried in another.
	if err := rec.ReportWrites(ctx, []audit.WriteReport{w, w}); err != nil {
		t.Fatal(err)
	}
	if err := rec.ReportWrites(ctx, []audit.WriteReport{w}); err != nil {
		t.Fatal(err)
	}
	// Concurrent retries race through one group commit.
	w.RequestID = "r-2"
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rec.ReportWrites(ctx, []audit.WriteReport{w}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	writes := 0
	for _, k := range eventKinds(t, st) {
		if k == audit.EventWriteAccepted {
			writes++
		}
	}
	if writes != 2 {
		t.Fatalf("stored %d write events, want 2 (r-1 and r-2 once each)", writes)
	}
}

// failingJournal fails chosen Apply calls of a real store, like a full disk.
type failingJournal struct {
	*sqlite.Store
	fail atomic.Bool
}

func (f *failingJournal) Apply(ctx context.Context, b audit.Batch) error {
	if f.fail.Load() {
		return errors.New("disk full")
	}
	return f.Store.Apply(ctx, b)
}

func TestRecorderFailedCommitLosesNothingAcknowledged(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
	j := &failingJournal{Store: st}
	var clock atomic.Int64 // seconds past at(0)
	rec := startRecorder(t, j, audit.WithClock(func() time.Time { return at(time.Duration(clock.Load()) * time.Second) }))
	ctx := context.Background()
	if err := rec.Observe(ctx, grantInput("A", 41, at(0), "10")); err != nil {
		t.Fatal(err)
	}

	j.fail.Store(true)
	err := rec.Observe(ctx, grantInput("B", 42, at(time.Second), "11"))
	if audit.ErrorCode(err) != audit.EUNAVAILABLE {
		t.Fatalf("observe during failure: %v, want an unavailable error", err)
	}
	if rec.Ready(ctx) == nil {
		t.Fatal("Ready = nil after a failed commit, want an error")
	}
	if pos, _ := rec.Cursor("src"); pos != "10" {
		t.Fatalf("cursor = %q after a failed commit, want 10", pos)
	}

	// The collector retries from its cursor: B's grant is recorded once, as
	// if the failed attempt never happened.
	j.fail.Store(false)
	if err := rec.Observe(ctx, grantInput("B", 42, at(time.Second), "11")); err != nil {
		t.Fatal(err)
	}
	if got := eventKinds(t, st); len(got) != 2 || got[1] != audit.EventGrant {
		t.Fatalf("events = %v, want [grant grant]", got)
	}
	if rec.Ready(ctx) == nil {
		t.Fatal("Ready = nil just after a commit failed, want an error until writes have worked a while")
	}
	clock.Store(10)
	if err := rec.Ready(ctx); err != nil {
		t.Fatalf("Ready 10s after the failure: %v", err)
	}
}

// downJournal is a real store whose server can go away: while down, every
// call fails as a database that cannot be reached does, reads included.
type downJournal struct {
	*sqlite.Store
	down atomic.Bool
}

var errServerDown = audit.Errorf(audit.EUNAVAILABLE, "the database server cannot be reached")

func (d *downJournal) Apply(ctx context.Context, b audit.Batch) error {
	if d.down.Load() {
		return errServerDown
	}
	return d.Store.Apply(ctx, b)
}

func (d *downJournal) Restore(ctx context.Context) ([]audit.TrackState, []audit.Cursor, error) {
	if d.down.Load() {
		return nil, nil, errServerDown
	}
	return d.Store.Restore(ctx)
}

func (d *downJournal) Unsynced(ctx context.Context) ([]audit.Event, error) {
	if d.down.Load() {
		return nil, errServerDown
	}
	return d.Store.Unsynced(ctx)
}

func (d *downJournal) StoredWrites(ctx context.Context, ids []string) ([]audit.Event, error) {
	if d.down.Load() {
		return nil, errServerDown
	}
	return d.Store.StoredWrites(ctx, ids)
}

// A commit fails because the database went away, and so does the reload of
// the tracker's state that follows. Once the database is back, the step the
// failed commit took is taken again from the stored state: the collector's
// retry of the release is recorded, not found already taken.
func TestRecorderReloadsAfterTheDatabaseReturns(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
	j := &downJournal{Store: st}
	rec := startRecorder(t, j)
	ctx := context.Background()
	if err := rec.Observe(ctx, grantInput("A", 41, at(0), "10")); err != nil {
		t.Fatal(err)
	}
	release := grantInput("A", 41, at(time.Second), "11")
	release.Observations[0].Kind = audit.EventRelease

	j.down.Store(true)
	if err := rec.Observe(ctx, release); audit.ErrorCode(err) != audit.EUNAVAILABLE {
		t.Fatalf("observe while the database is down: %v, want an unavailable error", err)
	}
	if err := rec.ReportWrites(ctx, []audit.WriteReport{{Source: "src", Lock: "orders", Resource: "r",
		Token: audit.Int64(41), Outcome: audit.WriteAccepted, RequestID: "w-1"}}); audit.ErrorCode(err) != audit.EUNAVAILABLE {
		t.Fatalf("write report while the database is down: %v, want an unavailable error", err)
	}
	j.down.Store(false)
	if pos, _ := rec.Cursor("src"); pos != "10" {
		t.Fatalf("cursor = %q, want 10, the stored one", pos)
	}
	// The first input after the return may be refused while the recorder
	// reloads; the collector retries it from the stored cursor.
	err := rec.Observe(ctx, release)
	if audit.ErrorCode(err) == audit.EUNAVAILABLE {
		err = rec.Observe(ctx, release)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := eventKinds(t, st); len(got) != 2 || got[1] != audit.EventRelease {
		t.Fatalf("events = %v, want [grant release]", got)
	}
}

func TestRecorderExpiresByClock(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
	var now atomic.Int64
	now.Store(at(0).UnixNano())
	rec := startRecorder(t, st, audit.WithClock(func() time.Time { return time.Unix(0, now.Load()) }), audit.WithTickInterval(5*time.Millisecond))
	in := grantInput("A", 1, at(0), "")
	in.ExpireByClock = true
	if err := rec.Observe(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	now.Store(at(11 * time.Second).UnixNano())
	// The collector vouches that it has seen everything up to 11 s.
	if err := rec.Observe(context.Background(), audit.Input{Source: "src", Kind: audit.KindEtcd, At: at(11 * time.Second), Live: true}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		kinds := eventKinds(t, st)
		if len(kinds) == 2 && kinds[1] == audit.EventExpire {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events = %v, want the clock to expire the lease", kinds)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRecorderAfterCloseAnswersUnavailable(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
	rec := startRecorder(t, st)
	rec.Close()
	for i := 0; i < 100; i++ { // some of these reach the channel before seeing stop
		err := rec.ReportWrites(context.Background(), []audit.WriteReport{{Source: "src", Lock: "orders", Resource: "db", Outcome: audit.WriteAccepted, At: at(0)}})
		if audit.ErrorCode(err) != audit.EUNAVAILABLE {
			t.Fatalf("ReportWrites after Close = %v, want unavailable", err)
		}
	}
	if rec.Ready(context.Background()) == nil {
		t.Fatal("Ready after Close = nil, want an error")
	}
}

// crashingJournal stops writing anything once dead, as a killed process does.
type crashingJournal struct {
	*sqlite.Store
	dead atomic.Bool
}

func (c *crashingJournal) Apply(ctx context.Context, b audit.Batch) error {
	if c.dead.Load() {
		return errors.New("process killed")
	}
	return c.Store.Apply(ctx, b)
}

// TestRecorderRenewalsSurviveACrashBetweenSyncs renews a lock many times with
// no sync in between, so the lock and tenure rows lag; readers through Fresh
// see every renewal anyway, and after a crash the restarted recorder replays
// them from the renew events.
func TestRecorderRenewalsSurviveACrashBetweenSyncs(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lw.db")
	st := openStore(t, path)
	j := &crashingJournal{Store: st}
	rec := startRecorder(t, j, audit.WithSyncInterval(time.Hour))
	key := audit.LockKey{Source: "src", Name: "orders"}
	renew := func(rec *audit.Recorder, when time.Time) {
		t.Helper()
		in := audit.Input{Source: "src", Kind: audit.KindEtcd, Observations: []audit.Observation{
			{Lock: key, Kind: audit.EventRenew, At: when, Holder: "A", Token: audit.Int64(41), LeaseDuration: 10 * time.Second}}}
		if err := rec.Observe(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if err := rec.Observe(ctx, grantInput("A", 41, at(0), "")); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		renew(rec, at(time.Duration(i)*time.Second))
	}

	// The rows still hold the grant; Fresh shows the last renewal.
	check := func(what string, s audit.Store, renewals int64, last time.Time) {
		t.Helper()
		l, err := s.LockByKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		tenures, err := s.Tenures(ctx, l.ID, audit.TimeFilter{})
		if err != nil {
			t.Fatal(err)
		}
		cur := tenures[len(tenures)-1]
		if !l.RenewedAt.Equal(last) || !l.ExpiresAt.Equal(last.Add(10*time.Second)) || cur.Renewals != renewals || !cur.LastRenewedAt.Equal(last) {
			t.Errorf("%s: lock renewed at %s expiring %s, tenure with %d renewals, last %s; want %d renewals, the last at %s",
				what, l.RenewedAt, l.ExpiresAt, cur.Renewals, cur.LastRenewedAt, renewals, last)
		}
	}
	check("rows before a sync", st, 0, at(0))
	check("fresh reads", rec.Fresh(st), 3, at(3*time.Second))
	near, err := rec.Fresh(st).Locks(ctx, audit.LockFilter{ExpiringBy: 0.5, ExpiringAt: at(8 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if len(near) != 0 {
		t.Errorf("near-expiry locks at 8s = %+v, want none: the lock renewed at 3s", near)
	}
	if n, err := rec.Fresh(st).CountLocks(ctx, audit.LockFilter{ExpiringBy: 0.5, ExpiringAt: at(8 * time.Second)}); err != nil || n != 0 {
		t.Errorf("near-expiry count at 8s = %d, %v; want 0", n, err)
	}
	if n, err := st.CountLocks(ctx, audit.LockFilter{ExpiringBy: 0.5, ExpiringAt: at(8 * time.Second)}); err != nil || n != 1 {
		t.Errorf("near-expiry count of the rows at 8s = %d, %v; want 1, from the grant", n, err)
	}

	// Killed before any sync: Close's final sync never reaches the disk.
	j.dead.Store(true)
	rec.Close()
	st.Close()

	st = openStore(t, path)
	rec = startRecorder(t, st, audit.WithSyncInterval(time.Hour))
	check("fresh reads after the restart", rec.Fresh(st), 3, at(3*time.Second))
	renew(rec, at(4*time.Second))
	rec.Close() // a clean stop syncs
	check("rows after a clean stop", st, 4, at(4*time.Second))
	if evs, err := st.Unsynced(ctx); err != nil || len(evs) != 0 {
		t.Errorf("Unsynced after a clean stop = %d events, %v; want none", len(evs), err)
	}
}

// TestRecorderCommitsCarryTheirRenewals: a subscriber to commits sees each
// renewal with the commit that recorded it, although the lock rows get it
// only at the next sync.
func TestRecorderCommitsCarryTheirRenewals(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
	var mu sync.Mutex
	var renewals []audit.Renewal
	rec := startRecorder(t, st, audit.WithSyncInterval(time.Hour), audit.WithCommitHook(func(c audit.Commit) {
		mu.Lock()
		defer mu.Unlock()
		renewals = append(renewals, c.Renewals...)
	}))
	ctx := context.Background()
	t0 := time.Now().Add(-time.Minute)
	if err := rec.Observe(ctx, grantInput("a", 7, t0, "1")); err != nil {
		t.Fatal(err)
	}
	renew := audit.Input{Source: "src", Kind: audit.KindEtcd, Cursor: "2", Observations: []audit.Observation{{
		Lock: audit.LockKey{Source: "src", Name: "orders"}, Kind: audit.EventRenew, At: t0.Add(3 * time.Second),
		Holder: "a", Token: audit.Int64(7), LeaseDuration: 10 * time.Second,
	}}}
	if err := rec.Observe(ctx, renew); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := audit.Renewal{Lock: audit.LockKey{Source: "src", Name: "orders"}, Seq: 1, Renewals: 1,
		RenewedAt: t0.Add(3 * time.Second), ExpiresAt: t0.Add(13 * time.Second), LeaseDuration: 10 * time.Second}
	if len(renewals) != 1 || renewals[0].Lock != want.Lock || renewals[0].Renewals != 1 ||
		!renewals[0].RenewedAt.Equal(want.RenewedAt) || !renewals[0].ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("commits' renewals = %+v, want %+v", renewals, want)
	}
	if l, err := st.LockByKey(ctx, want.Lock); err != nil || l.RenewedAt.Equal(want.RenewedAt) {
		t.Fatalf("lock row = %+v, %v; want it still without the renewal, which waits for a sync", l, err)
	}
}

// syncingJournal reports the batches that sync renewals, and can die after
// the first batch that starts a sync round.
type syncingJournal struct {
	*sqlite.Store
	mu        sync.Mutex
	syncs     []audit.Batch // Renewed and the sync flags only
	dieAfter  bool          // die once a SyncMark batch is stored
	dead      bool
	deadAfter chan struct{}
}

func (j *syncingJournal) Apply(ctx context.Context, b audit.Batch) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.dead {
		return errors.New("process killed")
	}
	if err := j.Store.Apply(ctx, b); err != nil {
		return err
	}
	if len(b.Renewed) > 0 || b.SyncMark || b.SyncedToMark || b.Synced {
		j.syncs = append(j.syncs, audit.Batch{Renewed: b.Renewed, Synced: b.Synced, SyncMark: b.SyncMark, SyncedToMark: b.SyncedToMark})
	}
	if j.dieAfter && b.SyncMark {
		j.dead = true
		close(j.deadAfter)
	}
	return nil
}

// manyLocks grants n locks at 0 and renews each at 1s, through rec.
func manyLocks(t *testing.T, rec *audit.Recorder, n int) []audit.LockKey {
	t.Helper()
	ctx := context.Background()
	keys := make([]audit.LockKey, n)
	grants := audit.Input{Source: "src", Kind: audit.KindEtcd}
	renewals := audit.Input{Source: "src", Kind: audit.KindEtcd}
	for i := range keys {
		keys[i] = audit.LockKey{Source: "src", Name: fmt.Sprintf("lock-%05d", i)}
		ob := audit.Observation{Lock: keys[i], Kind: audit.EventGrant, At: at(0), Holder: "h", Token: audit.Int64(int64(i + 1)), LeaseDuration: 10 * time.Second}
		grants.Observations = append(grants.Observations, ob)
		ob.Kind, ob.At = audit.EventRenew, at(time.Second)
		renewals.Observations = append(renewals.Observations, ob)
	}
	for _, in := range []audit.Input{grants, renewals} {
		if err := rec.Observe(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// A sync of many locks is spread over commits of at most 1,000 locks each,
// and only its last says the rows hold every event.
func TestRecorderSpreadsASyncOverCommits(t *testing.T) {
	const n = 2500
	st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
	j := &syncingJournal{Store: st}
	var clock atomic.Int64 // hours past at(0)
	rec := startRecorder(t, j, audit.WithSyncInterval(time.Hour), audit.WithTickInterval(5*time.Millisecond),
		audit.WithClock(func() time.Time { return at(time.Duration(clock.Load()) * time.Hour) }))
	keys := manyLocks(t, rec, n)
	clock.Store(2) // a sync is due

	ctx := context.Background()
	waitUntil(t, "the renewals to reach the rows", func() bool {
		evs, err := st.Unsynced(ctx)
		return err == nil && len(evs) == 0
	})
	j.mu.Lock()
	syncs := append([]audit.Batch(nil), j.syncs...)
	j.mu.Unlock()
	var chunks, synced int
	marked := false
	for i, b := range syncs {
		if chunks == 0 && len(b.Renewed) > 0 {
			marked = b.SyncMark // the round's first chunk
		}
		if len(b.Renewed) > 1000 {
			t.Errorf("sync batch %d writes %d locks, want at most 1,000", i, len(b.Renewed))
		}
		if len(b.Renewed) > 0 {
			chunks++
			synced += len(b.Renewed)
		}
		if b.SyncedToMark && len(b.Renewed) > 0 && i != len(syncs)-1 && len(syncs[i+1].Renewed) > 0 {
			t.Errorf("sync batch %d says the rows are synced before the round's last chunk", i)
		}
	}
	if chunks < 3 || synced != n || !marked {
		t.Errorf("sync round: %d chunks writing %d locks, first marked %v; want 3 or more writing %d, the first marked",
			chunks, synced, marked, n)
	}
	for _, k := range []audit.LockKey{keys[0], keys[n/2], keys[n-1]} {
		l, err := st.LockByKey(ctx, k)
		if err != nil || !l.RenewedAt.Equal(at(time.Second)) {
			t.Errorf("row of %s: renewed at %s, %v; want the renewal at 1s", k.Name, l.RenewedAt, err)
		}
	}
}

// Killed in the middle of a sync round, the restarted recorder still has
// every renewal: the journal's mark had not moved.
func TestRecorderRenewalsSurviveACrashInASyncRound(t *testing.T) {
	const n = 2500
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lw.db")
	st := openStore(t, path)
	j := &syncingJournal{Store: st, dieAfter: true, deadAfter: make(chan struct{})}
	var clock atomic.Int64
	rec := startRecorder(t, j, audit.WithSyncInterval(time.Hour), audit.WithTickInterval(5*time.Millisecond),
		audit.WithClock(func() time.Time { return at(time.Duration(clock.Load()) * time.Hour) }))
	keys := manyLocks(t, rec, n)
	clock.Store(2)
	<-j.deadAfter
	rec.Close()
	st.Close()

	st = openStore(t, path)
	evs, err := st.Unsynced(ctx)
	if err != nil || len(evs) != n {
		t.Fatalf("renewals to replay after the crash = %d, %v; want all %d: the round never finished", len(evs), err, n)
	}
	rec = startRecorder(t, st, audit.WithSyncInterval(time.Hour))
	fresh := rec.Fresh(st)
	for _, k := range keys {
		l, err := fresh.LockByKey(ctx, k)
		if err != nil || !l.RenewedAt.Equal(at(time.Second)) {
			t.Fatalf("%s after the restart: renewed at %s, %v; want the renewal at 1s", k.Name, l.RenewedAt, err)
		}
	}
}

// waitUntil polls cond until it holds, failing after 10 seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
