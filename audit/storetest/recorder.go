package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// The cases below run the recorder over the store: what a restart, a failed
// commit and the fresh overlay of unsynced renewals rely on is the store's
// part as much as the recorder's (restore, Unsynced after the sync marks,
// request ids found again), so each store must pass them.

// orders is the lock the recorder cases grant.
var orders = audit.LockKey{Source: "src", Name: "orders"}

// StartRecorder starts a recorder of source "src" (etcd) writing to j,
// closed at the test's end.
func StartRecorder(t *testing.T, j audit.Journal, opts ...audit.RecorderOption) *audit.Recorder {
	t.Helper()
	rec := audit.NewRecorder(j, audit.TrackerConfig{SourceKinds: map[string]audit.SourceKind{"src": audit.KindEtcd}}, nil, opts...)
	if err := rec.Start(context.Background()); err != nil {
		t.Fatalf("start recorder: %v", err)
	}
	t.Cleanup(rec.Close)
	return rec
}

// GrantInput is a collector input granting src/orders to holder with token
// and a 10 s lease, at cursor.
func GrantInput(holder string, token int64, when time.Time, cursor string) audit.Input {
	return audit.Input{Source: "src", Kind: audit.KindEtcd, Cursor: cursor, Observations: []audit.Observation{{
		Lock: orders, Kind: audit.EventGrant, At: when, Holder: holder, Token: audit.Int64(token), LeaseDuration: 10 * time.Second,
	}}}
}

// EventKinds returns the kinds of src/orders' stored events, in order.
func EventKinds(t *testing.T, s audit.Store) []audit.EventKind {
	t.Helper()
	evs, ok := lockEvents(t, s, orders)
	if !ok {
		t.Fatalf("lock %s not stored", orders)
	}
	var kinds []audit.EventKind
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	return kinds
}

// WritesByRequest returns the stored write events of src/lock by request
// id; nil if the lock is not stored.
func WritesByRequest(t *testing.T, s audit.Store, lock string) map[string][]audit.Event {
	t.Helper()
	evs, ok := lockEvents(t, s, audit.LockKey{Source: "src", Name: lock})
	if !ok {
		return nil
	}
	out := make(map[string][]audit.Event)
	for _, e := range evs {
		if _, ok := audit.WriteEventOf(e); ok {
			out[e.RequestID] = append(out[e.RequestID], e)
		}
	}
	return out
}

// lockEvents returns every stored event of key, and false if the lock is
// not stored.
func lockEvents(t *testing.T, s audit.Store, key audit.LockKey) ([]audit.Event, bool) {
	t.Helper()
	ctx := context.Background()
	l, err := s.LockByKey(ctx, key)
	if audit.ErrorCode(err) == audit.ENOTFOUND {
		return nil, false
	}
	if err != nil {
		t.Fatalf("lock %s: %v", key, err)
	}
	evs, err := s.Events(ctx, l.ID, audit.EventFilter{})
	if err != nil {
		t.Fatalf("events of %s: %v", key, err)
	}
	return evs, true
}

// failingJournal is a store whose Apply fails while fail is set, with
// nothing of the batch stored: a full disk, or a process killed before it
// could write.
type failingJournal struct {
	Store
	fail atomic.Bool
}

func (f *failingJournal) Apply(ctx context.Context, b audit.Batch) error {
	if f.fail.Load() {
		return errors.New("disk full")
	}
	return f.Store.Apply(ctx, b)
}

// downJournal is a store whose server can go away: while down, every call
// the recorder makes fails as a database that cannot be reached does, reads
// included.
type downJournal struct {
	Store
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

// lostReplyJournal is a store whose Apply, while lose is set, commits the
// batch and then fails, as a connection lost after the server committed but
// before its reply arrived.
type lostReplyJournal struct {
	Store
	lose atomic.Bool
}

func (l *lostReplyJournal) Apply(ctx context.Context, b audit.Batch) error {
	if err := l.Store.Apply(ctx, b); err != nil {
		return err
	}
	if l.lose.Load() {
		return errServerDown
	}
	return nil
}

// syncingJournal keeps the batches that sync renewals, and with dieAfter
// fails every Apply after the first batch that starts a sync round.
type syncingJournal struct {
	Store
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

// manyLocks grants n locks at 0 and renews each at 1 s, through rec.
func manyLocks(t *testing.T, rec *audit.Recorder, n int) []audit.LockKey {
	t.Helper()
	ctx := context.Background()
	keys := make([]audit.LockKey, n)
	grants := audit.Input{Source: "src", Kind: audit.KindEtcd}
	renewals := audit.Input{Source: "src", Kind: audit.KindEtcd}
	for i := range keys {
		keys[i] = audit.LockKey{Source: "src", Name: fmt.Sprintf("lock-%05d", i)}
		ob := audit.Observation{Lock: keys[i], Kind: audit.EventGrant, At: At(0), Holder: "h", Token: audit.Int64(int64(i + 1)), LeaseDuration: 10 * time.Second}
		grants.Observations = append(grants.Observations, ob)
		ob.Kind, ob.At = audit.EventRenew, At(1)
		renewals.Observations = append(renewals.Observations, ob)
	}
	for _, in := range []audit.Input{grants, renewals} {
		if err := rec.Record(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// hourClock is a recorder clock at At(0) plus a number of hours the test
// moves.
func hourClock(hours *atomic.Int64) audit.RecorderOption {
	return audit.WithClock(func() time.Time { return At(0).Add(time.Duration(hours.Load()) * time.Hour) })
}

// waitUntil polls cond until it holds, failing after 30 seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testRecorderObserveIsDurableAndResumes(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	rec := StartRecorder(t, s)
	if err := rec.Record(ctx, GrantInput("A", 41, At(0), "100")); err != nil {
		t.Fatalf("observe: %v", err)
	}
	if got := EventKinds(t, s); len(got) != 1 || got[0] != audit.EventGrant {
		t.Fatalf("events right after Record = %v, want [grant]", got)
	}
	rec.Close()

	// A new process on the same database resumes from the stored cursor and
	// the tracker's saved memory: B's grant supersedes A's tenure.
	s = h.Reopen(t, s)
	rec = StartRecorder(t, s)
	if pos, _ := rec.Cursor("src"); pos != "100" {
		t.Fatalf("cursor after restart = %q, want 100", pos)
	}
	if err := rec.Record(ctx, GrantInput("B", 42, At(20), "101")); err != nil {
		t.Fatal(err)
	}
	tenures, err := s.Tenures(ctx, LockByKey(t, s, orders).ID, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tenures) != 2 || tenures[0].End != audit.EndSuperseded || tenures[1].Seq != 2 || *tenures[1].Token != 42 {
		t.Fatalf("tenures = %s, want A superseded then B as seq 2", Show(tenures))
	}
}

func testRecorderWriteReportsAreIdempotent(t *testing.T, h Harness) {
	s := h.Open(t)
	rec := StartRecorder(t, s)
	ctx := context.Background()
	if err := rec.Record(ctx, GrantInput("A", 41, At(0), "")); err != nil {
		t.Fatal(err)
	}
	w := audit.WriteReport{Source: "src", Lock: "orders", Resource: "db", Token: audit.Int64(41), Outcome: audit.WriteAccepted, At: At(1), RequestID: "r-1"}
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
	for range 8 {
		wg.Go(func() {
			if err := rec.ReportWrites(ctx, []audit.WriteReport{w}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// And after a restart, which knows the ids only from the store.
	rec.Close()
	s = h.Reopen(t, s)
	rec = StartRecorder(t, s)
	if err := rec.ReportWrites(ctx, []audit.WriteReport{w}); err != nil {
		t.Fatalf("retry after a restart: %v", err)
	}
	writes := 0
	for _, k := range EventKinds(t, s) {
		if k == audit.EventWriteAccepted {
			writes++
		}
	}
	if writes != 2 {
		t.Fatalf("stored %d write events, want 2 (r-1 and r-2 once each)", writes)
	}
}

func testRecorderRequestIDsAreScopedToLockAndResource(t *testing.T, h Harness) {
	s := h.Open(t)
	rec := StartRecorder(t, s)
	ctx := context.Background()
	if err := rec.Record(ctx, GrantInput("A", 41, At(0), "")); err != nil {
		t.Fatal(err)
	}
	w := audit.WriteReport{Source: "src", Lock: "orders", Resource: "db-1", Token: audit.Int64(41),
		Outcome: audit.WriteAccepted, At: At(1), RequestID: "1"}

	t.Run("OtherResourceSameID", func(t *testing.T) {
		// Two resources that each number their requests from 1.
		other := w
		other.Resource, other.Outcome, other.Token, other.HighestToken = "db-2", audit.WriteRejected, audit.Int64(40), audit.Int64(41)
		if err := rec.ReportWrites(ctx, []audit.WriteReport{w}); err != nil {
			t.Fatal(err)
		}
		if err := rec.ReportWrites(ctx, []audit.WriteReport{other}); err != nil {
			t.Fatalf("same id from another resource: %v", err)
		}
		got := WritesByRequest(t, s, "orders")["1"]
		if len(got) != 2 || got[0].Resource == got[1].Resource {
			t.Fatalf("stored under request 1: %s, want one write of db-1 and one of db-2", Show(got))
		}
	})

	t.Run("OtherLockSameID", func(t *testing.T) {
		other := w
		other.Lock = "carts"
		if err := rec.ReportWrites(ctx, []audit.WriteReport{other}); err != nil {
			t.Fatalf("same id for another lock: %v", err)
		}
		if got := WritesByRequest(t, s, "carts")["1"]; len(got) != 1 {
			t.Fatalf("stored under carts request 1: %d writes, want 1", len(got))
		}
	})

	t.Run("IdenticalRetryStoredOnce", func(t *testing.T) {
		if err := rec.ReportWrites(ctx, []audit.WriteReport{w, w}); err != nil {
			t.Fatalf("retry: %v", err)
		}
		if got := WritesByRequest(t, s, "orders")["1"]; len(got) != 2 {
			t.Fatalf("after retries, %d writes under request 1, want 2 (db-1 and db-2 once each)", len(got))
		}
	})

	t.Run("RetryWithoutItsTimeStoredOnce", func(t *testing.T) {
		// A report without at gets the time of receipt, which a retry
		// cannot repeat.
		retry := w
		retry.At, retry.AtDefaulted = At(60), true
		if err := rec.ReportWrites(ctx, []audit.WriteReport{retry}); err != nil {
			t.Fatalf("retry without at: %v", err)
		}
		if got := WritesByRequest(t, s, "orders")["1"]; len(got) != 2 {
			t.Fatalf("%d writes under request 1, want 2", len(got))
		}
	})

	// Request 1 now holds one write of db-1 and one of db-2.
	checkReusedRequestIDsRefused(t, rec, s, w)
}

// checkReusedRequestIDsRefused checks that w's request id, stored with w and
// one other write, is refused with anything of w changed, storing nothing;
// and that a conflict within one request stores none of it.
func checkReusedRequestIDsRefused(t *testing.T, rec *audit.Recorder, s Store, w audit.WriteReport) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		change func(*audit.WriteReport)
	}{
		{"Outcome", func(w *audit.WriteReport) { w.Outcome, w.HighestToken = audit.WriteRejected, audit.Int64(42) }},
		{"Token", func(w *audit.WriteReport) { w.Token = audit.Int64(40) }},
		{"NoToken", func(w *audit.WriteReport) { w.Token = nil }},
		{"HighestToken", func(w *audit.WriteReport) { w.HighestToken = audit.Int64(41) }},
		{"Holder", func(w *audit.WriteReport) { w.Holder = "B" }},
		{"At", func(w *audit.WriteReport) { w.At = w.At.Add(time.Nanosecond) }},
	} {
		t.Run("Different"+tc.name+"Refused", func(t *testing.T) {
			changed := w
			tc.change(&changed)
			err := rec.ReportWrites(ctx, []audit.WriteReport{changed})
			if audit.ErrorCode(err) != audit.ECONFLICT || !strings.HasPrefix(audit.ErrorMessage(err), "request_id: ") {
				t.Fatalf("reused id with another %s: err = %v (%s), want %s naming request_id", tc.name, err, audit.ErrorCode(err), audit.ECONFLICT)
			}
			if got := WritesByRequest(t, s, "orders")["1"]; len(got) != 2 {
				t.Fatalf("%d writes under request 1, want 2: the refused one stored", len(got))
			}
		})
	}

	t.Run("ConflictInOneRequestStoresNoneOfIt", func(t *testing.T) {
		a := w
		a.RequestID = "batch-1"
		b := a
		b.Holder = "someone else"
		fresh := w
		fresh.RequestID = "batch-2"
		err := rec.ReportWrites(ctx, []audit.WriteReport{fresh, a, b})
		if audit.ErrorCode(err) != audit.ECONFLICT || !strings.HasPrefix(audit.ErrorMessage(err), "writes[2].request_id: ") {
			t.Fatalf("err = %v (%s), want %s naming writes[2].request_id", err, audit.ErrorCode(err), audit.ECONFLICT)
		}
		got := WritesByRequest(t, s, "orders")
		if len(got["batch-1"]) != 0 || len(got["batch-2"]) != 0 {
			t.Fatalf("a refused request stored %d and %d of its writes, want none", len(got["batch-1"]), len(got["batch-2"]))
		}
	})
}

// A conflict refuses exactly the request it is in: the other requests of
// its group commit are stored and acknowledged.
func testRecorderConflictRefusesOnlyItsRequest(t *testing.T, h Harness) {
	s := h.Open(t)
	rec := StartRecorder(t, s)
	ctx := context.Background()
	if err := rec.Record(ctx, GrantInput("A", 41, At(0), "")); err != nil {
		t.Fatal(err)
	}
	w := audit.WriteReport{Source: "src", Lock: "orders", Resource: "db", Token: audit.Int64(41),
		Outcome: audit.WriteAccepted, At: At(1), RequestID: "taken"}
	if err := rec.ReportWrites(ctx, []audit.WriteReport{w}); err != nil {
		t.Fatal(err)
	}
	conflicting := w
	conflicting.Outcome, conflicting.HighestToken = audit.WriteRejected, audit.Int64(42)

	const rounds, others = 20, 8
	for round := range rounds {
		errs := make([]error, others+1)
		var wg sync.WaitGroup
		for i := range others + 1 {
			wg.Go(func() {
				r := w
				if i < others {
					r.RequestID = fmt.Sprintf("r%d-%d", round, i)
				} else {
					r = conflicting
				}
				errs[i] = rec.ReportWrites(ctx, []audit.WriteReport{r})
			})
		}
		wg.Wait()
		for i, err := range errs[:others] {
			if err != nil {
				t.Fatalf("round %d: request %d, beside a conflicting one: %v", round, i, err)
			}
		}
		if audit.ErrorCode(errs[others]) != audit.ECONFLICT {
			t.Fatalf("round %d: conflicting request: err = %v, want %s", round, errs[others], audit.ECONFLICT)
		}
	}
	got := WritesByRequest(t, s, "orders")
	for round := range rounds {
		for i := range others {
			if id := fmt.Sprintf("r%d-%d", round, i); len(got[id]) != 1 {
				t.Fatalf("request %s stored %d times, want 1", id, len(got[id]))
			}
		}
	}
	if ev := got["taken"]; len(ev) != 1 || ev[0].Kind != audit.EventWriteAccepted {
		t.Fatalf("under the taken id: %s, want the first, accepted, write alone", Show(ev))
	}
	if err := rec.Ready(ctx); err != nil {
		t.Fatalf("a refused request made the recorder unready: %v", err)
	}
}

// Write reports create lock rows under any name; the locks no collector has
// granted are bounded per source, across restarts: the restarted recorder
// counts them from what the store restores.
func testRecorderBoundsWriteOnlyLocksAcrossRestarts(t *testing.T, h Harness) {
	s := h.Open(t)
	rec := StartRecorder(t, s, audit.WithWriteOnlyLocks(3))
	ctx := context.Background()
	if err := rec.Record(ctx, GrantInput("A", 41, At(0), "")); err != nil {
		t.Fatal(err)
	}
	write := func(source, lock string) audit.WriteReport {
		return audit.WriteReport{Source: source, Lock: lock, Resource: "db", Token: audit.Int64(41), Outcome: audit.WriteAccepted, At: At(1)}
	}
	report := func(rec *audit.Recorder, ws ...audit.WriteReport) error { return rec.ReportWrites(ctx, ws) }
	refused := func(err error, field string) {
		t.Helper()
		if audit.ErrorCode(err) != audit.EINVALID || !strings.HasPrefix(audit.ErrorMessage(err), field+": ") {
			t.Fatalf("err = %v (%s), want %s naming %s", err, audit.ErrorCode(err), audit.EINVALID, field)
		}
	}
	exists := func(lock string) bool {
		_, err := s.LockByKey(ctx, audit.LockKey{Source: "src", Name: lock})
		return err == nil
	}

	if err := report(rec, write("src", "x1"), write("src", "x2"), write("src", "x1"), write("src", "x3")); err != nil {
		t.Fatalf("three unknown locks: %v", err)
	}
	refused(report(rec, write("src", "x4")), "lock")
	refused(report(rec, write("src", "orders"), write("src", "x4")), "writes[1].lock")
	if exists("x4") || len(WritesByRequest(t, s, "orders")) != 0 {
		t.Fatal("a refused request stored some of its writes")
	}
	for _, w := range []audit.WriteReport{write("src", "orders"), write("src", "x1"), write("other", "y1")} {
		if err := report(rec, w); err != nil {
			t.Fatalf("write to %s (a granted lock, a known one, another source's): %v", w.Key(), err)
		}
	}

	// A grant makes x1 the collector's: room for one more.
	in := GrantInput("B", 7, At(2), "")
	in.Observations[0].Lock.Name = "x1"
	if err := rec.Record(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := report(rec, write("src", "x4")); err != nil {
		t.Fatalf("after x1's grant: %v", err)
	}
	refused(report(rec, write("src", "x5")), "lock")

	rec.Close()
	s = h.Reopen(t, s)
	rec = StartRecorder(t, s, audit.WithWriteOnlyLocks(3))
	refused(report(rec, write("src", "x5")), "lock")
	if err := report(rec, write("src", "x2")); err != nil {
		t.Fatalf("after a restart, a known lock: %v", err)
	}
	if exists("x5") {
		t.Fatal("x5 stored")
	}
}

// A failed commit reloads the tracker from the store, so the retry records
// what failed once, as if the failed attempt never happened.
func testRecorderFailedCommitLosesNothingAcknowledged(t *testing.T, h Harness) {
	j := &failingJournal{Store: h.Open(t)}
	var clock atomic.Int64 // seconds past At(0)
	rec := StartRecorder(t, j, audit.WithClock(func() time.Time { return At(int(clock.Load())) }))
	ctx := context.Background()
	if err := rec.Record(ctx, GrantInput("A", 41, At(0), "10")); err != nil {
		t.Fatal(err)
	}

	j.fail.Store(true)
	err := rec.Record(ctx, GrantInput("B", 42, At(1), "11"))
	if audit.ErrorCode(err) != audit.EUNAVAILABLE {
		t.Fatalf("observe during failure: %v, want an unavailable error", err)
	}
	if rec.Ready(ctx) == nil {
		t.Fatal("Ready = nil after a failed commit, want an error")
	}
	if pos, _ := rec.Cursor("src"); pos != "10" {
		t.Fatalf("cursor = %q after a failed commit, want 10", pos)
	}

	// The collector retries from its cursor: B's grant is recorded once, and
	// supersedes A's tenure as the second.
	j.fail.Store(false)
	if err := rec.Record(ctx, GrantInput("B", 42, At(1), "11")); err != nil {
		t.Fatal(err)
	}
	if got := EventKinds(t, j); len(got) != 2 || got[1] != audit.EventGrant {
		t.Fatalf("events = %v, want [grant grant]", got)
	}
	tenures, err := j.Tenures(ctx, LockByKey(t, j, orders).ID, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tenures) != 2 || tenures[0].End != audit.EndSuperseded || tenures[1].Seq != 2 {
		t.Fatalf("tenures = %s, want A superseded then B as seq 2", Show(tenures))
	}
	if rec.Ready(ctx) == nil {
		t.Fatal("Ready = nil just after a commit failed, want an error until writes have worked a while")
	}
	clock.Store(10)
	if err := rec.Ready(ctx); err != nil {
		t.Fatalf("Ready 10s after the failure: %v", err)
	}
}

// A lock renewed many times with no sync in between has lock and tenure
// rows that lag; readers through Fresh see every renewal anyway, and after
// a crash the restarted recorder replays them from the renew events.
func testRecorderRenewalsSurviveACrashBetweenSyncs(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	j := &failingJournal{Store: s}
	rec := StartRecorder(t, j, audit.WithSyncInterval(time.Hour))
	renew := func(rec *audit.Recorder, sec int) {
		t.Helper()
		in := audit.Input{Source: "src", Kind: audit.KindEtcd, Observations: []audit.Observation{
			{Lock: orders, Kind: audit.EventRenew, At: At(sec), Holder: "A", Token: audit.Int64(41), LeaseDuration: 10 * time.Second}}}
		if err := rec.Record(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if err := rec.Record(ctx, GrantInput("A", 41, At(0), "")); err != nil {
		t.Fatal(err)
	}
	for sec := 1; sec <= 3; sec++ {
		renew(rec, sec)
	}

	// The rows still hold the grant; Fresh shows the last renewal.
	check := func(what string, s audit.Store, renewals int64, last time.Time) {
		t.Helper()
		l, err := s.LockByKey(ctx, orders)
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
	check("rows before a sync", s, 0, At(0))
	check("fresh reads", rec.Fresh(s), 3, At(3))
	nearExpiry := audit.LockFilter{ExpiringBy: 0.5, ExpiringAt: At(8)}
	near, err := rec.Fresh(s).Locks(ctx, nearExpiry)
	if err != nil {
		t.Fatal(err)
	}
	if len(near) != 0 {
		t.Errorf("near-expiry locks at 8s = %s, want none: the lock renewed at 3s", Show(near))
	}
	if n, err := rec.Fresh(s).CountLocks(ctx, nearExpiry); err != nil || n != 0 {
		t.Errorf("near-expiry count at 8s = %d, %v; want 0", n, err)
	}
	if n, err := s.CountLocks(ctx, nearExpiry); err != nil || n != 1 {
		t.Errorf("near-expiry count of the rows at 8s = %d, %v; want 1, from the grant", n, err)
	}

	// Killed before any sync: Close's final sync never reaches the store.
	j.fail.Store(true)
	rec.Close()

	s = h.Reopen(t, s)
	rec = StartRecorder(t, s, audit.WithSyncInterval(time.Hour))
	check("fresh reads after the restart", rec.Fresh(s), 3, At(3))
	renew(rec, 4)
	rec.Close() // a clean stop syncs
	check("rows after a clean stop", s, 4, At(4))
	if evs, err := s.Unsynced(ctx); err != nil || len(evs) != 0 {
		t.Errorf("Unsynced after a clean stop = %d events, %v; want none", len(evs), err)
	}
}

// A subscriber to commits sees each renewal with the commit that recorded
// it, although the lock rows get it only at the next sync.
func testRecorderCommitsCarryTheirRenewals(t *testing.T, h Harness) {
	s := h.Open(t)
	var mu sync.Mutex
	var renewals []audit.Renewal
	rec := StartRecorder(t, s, audit.WithSyncInterval(time.Hour), audit.WithSubscribers(audit.CommitFunc(func(c audit.Commit) {
		mu.Lock()
		defer mu.Unlock()
		renewals = append(renewals, c.Renewals...)
	})))
	ctx := context.Background()
	// Recent, so the recorder's own clock expires nothing.
	t0 := time.Now().Add(-time.Minute)
	if err := rec.Record(ctx, GrantInput("a", 7, t0, "1")); err != nil {
		t.Fatal(err)
	}
	renew := audit.Input{Source: "src", Kind: audit.KindEtcd, Cursor: "2", Observations: []audit.Observation{{
		Lock: orders, Kind: audit.EventRenew, At: t0.Add(3 * time.Second),
		Holder: "a", Token: audit.Int64(7), LeaseDuration: 10 * time.Second,
	}}}
	if err := rec.Record(ctx, renew); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := audit.Renewal{Lock: orders, Seq: 1, Renewals: 1,
		RenewedAt: t0.Add(3 * time.Second), ExpiresAt: t0.Add(13 * time.Second), LeaseDuration: 10 * time.Second}
	if len(renewals) != 1 || renewals[0].Lock != want.Lock || renewals[0].Renewals != 1 ||
		!renewals[0].RenewedAt.Equal(want.RenewedAt) || !renewals[0].ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("commits' renewals = %s, want %s", Show(renewals), Show(want))
	}
	if l, err := s.LockByKey(ctx, want.Lock); err != nil || l.RenewedAt.Equal(want.RenewedAt) {
		t.Fatalf("lock row = %s, %v; want it still without the renewal, which waits for a sync", Show(l), err)
	}
}

// A sync of many locks is spread over commits of at most 1,000 locks each,
// and only its last says the rows hold every event.
func testRecorderSpreadsASyncOverCommits(t *testing.T, h Harness) {
	const n = 2500
	s := h.Open(t)
	j := &syncingJournal{Store: s}
	var hours atomic.Int64
	rec := StartRecorder(t, j, audit.WithSyncInterval(time.Hour), audit.WithTickInterval(5*time.Millisecond), hourClock(&hours))
	keys := manyLocks(t, rec, n)
	hours.Store(2) // a sync is due

	ctx := context.Background()
	waitUntil(t, "the renewals to reach the rows", func() bool {
		evs, err := s.Unsynced(ctx)
		return err == nil && len(evs) == 0
	})
	j.mu.Lock()
	syncs := append([]audit.Batch(nil), j.syncs...)
	j.mu.Unlock()
	var chunks, synced int
	marked := false
	var order []audit.LockKey // the locks in the order the round wrote them
	for i, b := range syncs {
		for _, rn := range b.Renewed {
			order = append(order, rn.Lock)
		}
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
	// In the locks' order, created here in name order: a chunk's rows are
	// neighbours, so it writes few pages.
	if !slices.Equal(order, keys) {
		t.Errorf("sync round wrote the locks in the order %v ... , want their order %v ...", order[:min(5, len(order))], keys[:5])
	}
	for _, k := range []audit.LockKey{keys[0], keys[n/2], keys[n-1]} {
		l, err := s.LockByKey(ctx, k)
		if err != nil || !l.RenewedAt.Equal(At(1)) {
			t.Errorf("row of %s: renewed at %s, %v; want the renewal at 1s", k.Name, l.RenewedAt, err)
		}
	}
}

// A sync round at the sync interval writes the renewals of locks but not of
// heartbeats, and marks nothing: the renew events of both stay to be
// replayed. The round at the heartbeat sync interval writes the heartbeats'
// too, and marks the rows complete.
func testRecorderSyncsHeartbeatsLessOften(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	j := &syncingJournal{Store: s}
	var secs atomic.Int64
	rec := StartRecorder(t, j, audit.WithSyncInterval(5*time.Second), audit.WithHeartbeatSyncInterval(30*time.Second),
		audit.WithTickInterval(5*time.Millisecond), audit.WithClock(func() time.Time { return At(int(secs.Load())) }))
	election := audit.LockKey{Source: "src", Name: "kube-system/scheduler"}
	node := audit.LockKey{Source: "src", Name: "kube-node-lease/node-1"}
	for _, kind := range []audit.EventKind{audit.EventGrant, audit.EventRenew} {
		in := audit.Input{Source: "src", Kind: audit.KindKubernetes}
		for _, l := range []struct {
			key   audit.LockKey
			class audit.Class
		}{{election, audit.ClassLock}, {node, audit.ClassHeartbeat}} {
			ob := audit.Observation{Lock: l.key, Kind: kind, At: At(0), Holder: "h", Token: audit.Int64(1), LeaseDuration: 40 * time.Second, Class: l.class}
			if kind == audit.EventRenew {
				ob.At = At(1)
			}
			in.Observations = append(in.Observations, ob)
		}
		if err := rec.Record(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	renewedAt := func(k audit.LockKey) time.Time {
		l, err := s.LockByKey(ctx, k)
		if err != nil {
			t.Fatalf("row of %s: %v", k.Name, err)
		}
		return l.RenewedAt
	}

	secs.Store(6) // a sync is due, and the heartbeats' is not
	waitUntil(t, "the election's renewal to reach its row", func() bool { return renewedAt(election).Equal(At(1)) })
	if got := renewedAt(node); got.Equal(At(1)) {
		t.Fatalf("heartbeat's row renewed at %s after 6s, want it to wait for the heartbeat sync at 30s", got)
	}
	j.mu.Lock()
	for i, b := range j.syncs {
		if b.SyncMark || b.SyncedToMark {
			t.Errorf("batch %d of the round without the heartbeats marks the rows (SyncMark %v, SyncedToMark %v)", i, b.SyncMark, b.SyncedToMark)
		}
	}
	j.mu.Unlock()
	if evs, err := s.Unsynced(ctx); err != nil || len(evs) != 2 {
		t.Fatalf("renewals to replay after a crash now = %d, %v; want both, since the rows are not all complete", len(evs), err)
	}
	if l, err := rec.Fresh(s).LockByKey(ctx, node); err != nil || !l.RenewedAt.Equal(At(1)) {
		t.Fatalf("heartbeat read through Fresh: renewed at %s, %v; want 1s", l.RenewedAt, err)
	}

	secs.Store(31)
	waitUntil(t, "every renewal in the rows", func() bool {
		evs, err := s.Unsynced(ctx)
		return err == nil && len(evs) == 0
	})
	if got := renewedAt(node); !got.Equal(At(1)) {
		t.Fatalf("heartbeat's row renewed at %s after the heartbeat sync, want 1s", got)
	}
}

// Killed in the middle of a sync round, the restarted recorder still has
// every renewal: the journal's mark had not moved.
func testRecorderRenewalsSurviveACrashInASyncRound(t *testing.T, h Harness) {
	const n = 2500
	ctx := context.Background()
	s := h.Open(t)
	j := &syncingJournal{Store: s, dieAfter: true, deadAfter: make(chan struct{})}
	var hours atomic.Int64
	rec := StartRecorder(t, j, audit.WithSyncInterval(time.Hour), audit.WithTickInterval(5*time.Millisecond), hourClock(&hours))
	keys := manyLocks(t, rec, n)
	hours.Store(2)
	select {
	case <-j.deadAfter:
	case <-time.After(30 * time.Second):
		t.Fatal("timed out waiting for a sync round to start")
	}
	rec.Close()

	s = h.Reopen(t, s)
	evs, err := s.Unsynced(ctx)
	if err != nil || len(evs) != n {
		t.Fatalf("renewals to replay after the crash = %d, %v; want all %d: the round never finished", len(evs), err, n)
	}
	rec = StartRecorder(t, s, audit.WithSyncInterval(time.Hour))
	fresh := rec.Fresh(s)
	for _, k := range keys {
		l, err := fresh.LockByKey(ctx, k)
		if err != nil || !l.RenewedAt.Equal(At(1)) {
			t.Fatalf("%s after the restart: renewed at %s, %v; want the renewal at 1s", k.Name, l.RenewedAt, err)
		}
	}
}

// A commit fails because the database went away, and so does the reload of
// the tracker's state that follows. Once the database is back, the step the
// failed commit took is taken again from the stored state: the collector's
// retry of the release is recorded, not found already taken.
func testRecorderReloadsAfterTheStoreReturns(t *testing.T, h Harness) {
	st := h.Open(t)
	j := &downJournal{Store: st}
	rec := StartRecorder(t, j)
	ctx := context.Background()
	if err := rec.Record(ctx, GrantInput("A", 41, At(0), "10")); err != nil {
		t.Fatal(err)
	}
	release := GrantInput("A", 41, At(1), "11")
	release.Observations[0].Kind = audit.EventRelease

	j.down.Store(true)
	if err := rec.Record(ctx, release); audit.ErrorCode(err) != audit.EUNAVAILABLE {
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
	err := rec.Record(ctx, release)
	if audit.ErrorCode(err) == audit.EUNAVAILABLE {
		err = rec.Record(ctx, release)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := EventKinds(t, st); len(got) != 2 || got[1] != audit.EventRelease {
		t.Fatalf("events = %v, want [grant release]", got)
	}
}

// A commit that the store made but whose answer was lost fails the
// request, and the recorder reloads what the store holds: the cursor it
// then gives the collector is the stored one, past the lost answer, so the
// collector's resumption sends nothing twice; a collector that sends the
// same step again is not recorded twice either.
func testRecorderCommitWhoseAnswerIsLost(t *testing.T, h Harness) {
	j := &lostReplyJournal{Store: h.Open(t)}
	rec := StartRecorder(t, j)
	ctx := context.Background()
	if err := rec.Record(ctx, GrantInput("A", 41, At(0), "10")); err != nil {
		t.Fatal(err)
	}
	j.lose.Store(true)
	if err := rec.Record(ctx, GrantInput("B", 42, At(1), "11")); audit.ErrorCode(err) != audit.EUNAVAILABLE {
		t.Fatalf("observe whose answer was lost: %v, want an unavailable error", err)
	}
	j.lose.Store(false)
	if pos, _ := rec.Cursor("src"); pos != "11" {
		t.Errorf("cursor after the lost answer = %q, want 11, what the store committed", pos)
	}
	// At-least-once delivery: the same step again.
	err := rec.Record(ctx, GrantInput("B", 42, At(1), "11"))
	if audit.ErrorCode(err) == audit.EUNAVAILABLE {
		err = rec.Record(ctx, GrantInput("B", 42, At(1), "11"))
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := EventKinds(t, j); len(got) != 2 || got[0] != audit.EventGrant || got[1] != audit.EventGrant {
		t.Fatalf("events = %v, want [grant grant]: B's grant once", got)
	}
}
