package storetest

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/storecopy"
)

// CopyStory stores a history that puts rows in every table a copy moves:
// locks of two sources and classes with the tracker's memory of them
// (resources' highest tokens and pending grants), tenures ended and held,
// grants, renewals synced and not, releases, writes with request ids,
// findings, a blind window, cursors, renewals pruned by retention into
// summaries, a renewal sealed into a run, and the fences of two sources. It returns the request ids of its writes.
func CopyStory(t *testing.T, s Store) []string {
	t.Helper()
	ctx := context.Background()
	key := retentionStory(t, s) // two tenures, renewals, a write, findings, synced
	r := &audit.Retainer{Store: s, Step: 2,
		Retention: audit.Retention{Kinds: map[audit.EventKind]time.Duration{audit.EventRenew: 45 * time.Second}},
		Now:       func() time.Time { return At(100) }}
	if err := r.Pass(ctx); err != nil {
		t.Fatalf("retention pass: %v", err)
	}

	sched := audit.LockKey{Source: "cluster-a", Name: "kube-system/kube-scheduler"}
	held := audit.Tenure{Lock: sched, Seq: 4, Holder: "node-2", Token: audit.Int64(8), GrantedAt: At(20), Position: "rv-77",
		Renewals: 1, LastRenewedAt: At(25), LeaseDuration: 15 * time.Second, ExpiresAt: At(40)}
	st := audit.TrackState{
		Lock: audit.Lock{Source: sched.Source, Kind: audit.KindKubernetes, Name: sched.Name, Class: audit.ClassLock,
			State: audit.StateHeld, Holder: "node-2", Token: audit.Int64(8), AcquiredAt: At(20), RenewedAt: At(25),
			ExpiresAt: At(40), LeaseDuration: 15 * time.Second, ChangedAt: At(25)},
		Recent: []audit.Tenure{
			{Lock: sched, Seq: 3, Holder: "node-1", Token: audit.Int64(7), GrantedAt: At(0), Renewals: 3, LastRenewedAt: At(9),
				LeaseDuration: 15 * time.Second, ExpiresAt: At(24), EndedAt: At(20), End: audit.EndSuperseded},
			held,
		},
		NextSeq: 4, LastGrantToken: audit.Int64(8), ExpireByClock: true, SequentialTokens: true,
		Resources: map[string]*audit.ResourceState{
			"orders-db": {Highest: audit.Int64(7), Pending: []audit.PendingGrant{{Token: 8, GrantedAt: At(20), Holder: "node-2"}}},
		},
	}
	beat := heldLock("cluster-a", "kube-node-lease/node-1", "node-1", 1, 5)
	beat.Lock.Class = audit.ClassHeartbeat
	ids := []string{"req-1", "req-2", "req-3"}
	Apply(t, s, audit.Batch{
		Locks:     []audit.TrackState{st, beat},
		Resources: ResourceRows(st),
		Tenures:   st.Recent,
		Events: []audit.Event{
			{Lock: sched, Kind: audit.EventGrant, At: At(20), Holder: "node-2", Token: audit.Int64(8), TTL: 15 * time.Second,
				Position: "rv-77", Detail: map[string]any{"previous": "node-1"}},
			{Lock: beat.Lock.Key(), Kind: audit.EventObserved, At: At(5), Holder: "node-1", Inferred: true},
			{Lock: sched, Kind: audit.EventWriteAccepted, At: At(21), Holder: "node-2", Token: audit.Int64(8),
				Resource: "orders-db", RequestID: ids[0]},
			{Lock: sched, Kind: audit.EventWriteRejected, At: At(22), Holder: "node-1", Token: audit.Int64(7),
				Resource: "orders-db", RequestID: ids[1], Detail: map[string]any{"reason": "stale token"}},
			{Lock: key, Kind: audit.EventWriteAccepted, At: At(61), Holder: "b", Token: audit.Int64(2), Resource: "db", RequestID: ids[2]},
		},
		Findings: []audit.Finding{
			{Lock: sched, Kind: audit.FindingStaleWrite, At: At(22), Summary: "node-1 wrote with token 7",
				Tokens: []int64{7, 8}, Holders: []string{"node-1", "node-2"}, Resource: "orders-db"},
			{Lock: beat.Lock.Key(), Kind: audit.FindingLateRenewal, At: At(6)},
		},
		Cursors: []audit.Cursor{{Source: "cluster-a", Position: "rv-77", At: At(25)}, {Source: "cache", Position: "9", At: At(61)}},
	})
	// The synced renewal retention kept, at 60 s, into a run.
	if n := Seal(t, s, At(60).Truncate(time.Hour).Add(time.Hour)); n != 1 {
		t.Fatalf("sealed %d renewals, want the one retention kept", n)
	}
	// A blind window over both of cluster-a's locks.
	detail := map[string]any{"from": At(30).Format(time.RFC3339Nano), "to": At(35).Format(time.RFC3339Nano), "reason": "watch lost"}
	var blind audit.Batch
	for _, k := range []audit.LockKey{sched, beat.Lock.Key()} {
		blind.Events = append(blind.Events, audit.Event{Lock: k, Kind: audit.EventBlind, At: At(35), Detail: detail})
		blind.Findings = append(blind.Findings, audit.Finding{Lock: k, Kind: audit.FindingBlindWindow, At: At(30), Until: At(35)})
	}
	blind.Cursors = []audit.Cursor{{Source: "cluster-a", Position: "rv-90", At: At(35)}}
	Apply(t, s, blind)
	// Renewals not yet folded into their rows: the journal's unsynced tail.
	for i, sec := range []int{36, 38} {
		Apply(t, s, audit.Batch{
			Events: []audit.Event{{Lock: sched, Kind: audit.EventRenew, At: At(sec), Holder: "node-2", Token: audit.Int64(8),
				Seq: 4, TTL: 15 * time.Second, Detail: map[string]any{"margin_ratio": 0.5}}},
			Renewed: []audit.Renewal{{Lock: sched, Seq: 4, Renewals: int64(2 + i), RenewedAt: At(sec), ExpiresAt: At(sec + 15),
				LeaseDuration: 15 * time.Second}},
			Cursors: []audit.Cursor{{Source: "cluster-a", Position: "rv-9" + string(rune('1'+i)), At: At(sec)}},
		})
	}
	// Replicas own the sources under fences.
	Apply(t, s, audit.Batch{Fences: []audit.Fence{{Source: "cluster-a", Token: 3}, {Source: "cache", Token: 2}}})
	return ids
}

// SameHistory fails the test unless a and b read back the same history:
// the tracker's memory, cursors and unsynced renewals the recorder resumes
// from, and every read of audit.Store the dashboard and reports make.
func SameHistory(t *testing.T, a, b Store, requestIDs []string) {
	t.Helper()
	sameHistory(t, a, b, requestIDs, false)
}

// sameHistory is SameHistory; with renumbered, event rows written after a
// copy may have other ids in the two stores: the target numbers its rows
// after the unsynced logged renewals the copy gave it as rows.
func sameHistory(t *testing.T, a, b Store, requestIDs []string, renumbered bool) {
	t.Helper()
	Equal(t, "history", readHistory(t, b, requestIDs, renumbered), readHistory(t, a, requestIDs, renumbered))
}

// history is every read of a store that a copy must give the same.
type history struct {
	States   []audit.TrackState
	Recent   [][]audit.Tenure
	Cursors  []audit.Cursor
	Unsynced []audit.Event
	Stored   []audit.Event
	Locks    []audit.Lock
	Events   map[int64][]audit.Event
	Writes   map[int64][][]audit.WriteEvent
	Renewals map[int64][]time.Time
	Counts   map[int64]audit.Histogram
	Tenures  map[int64][]audit.Tenure
	Findings []audit.Finding
	ByClass  map[audit.Class]map[audit.Severity]int
	Lockn    []audit.LockCount
	Blinds   []audit.BlindWindow
	Last     map[string]time.Time
	Listed   []audit.Cursor
}

// mustRead fails the test on a read's error.
func mustRead(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// readHistory reads s's history, as a copy must keep it.
func readHistory(t *testing.T, s Store, requestIDs []string, renumbered bool) history {
	t.Helper()
	ctx := context.Background()
	var r history
	var err error
	r.States, r.Cursors, err = s.Restore(ctx)
	mustRead(t, "Restore", err)
	for _, st := range r.States {
		r.Recent = append(r.Recent, st.Recent)
	}
	r.Unsynced, err = s.Unsynced(ctx)
	mustRead(t, "Unsynced", err)
	asCopied(r.Unsynced)
	r.Stored, err = s.StoredWrites(ctx, requestIDs)
	mustRead(t, "StoredWrites", err)
	// In no order the contract gives.
	slices.SortFunc(r.Stored, func(a, b audit.Event) int { return cmp.Compare(a.ID, b.ID) })
	r.Locks, err = s.Locks(ctx, audit.LockFilter{Limit: audit.MaxLockLimit})
	mustRead(t, "Locks", err)
	r.Events, r.Writes = map[int64][]audit.Event{}, map[int64][][]audit.WriteEvent{}
	r.Renewals, r.Counts, r.Tenures = map[int64][]time.Time{}, map[int64]audit.Histogram{}, map[int64][]audit.Tenure{}
	for _, l := range r.Locks {
		r.readLock(t, s, l.ID, renumbered)
	}
	r.Findings, err = s.Findings(ctx, audit.FindingFilter{TimeFilter: audit.TimeFilter{Limit: audit.MaxListLimit}})
	mustRead(t, "Findings", err)
	r.ByClass = map[audit.Class]map[audit.Severity]int{}
	for _, c := range []audit.Class{audit.ClassLock, audit.ClassHeartbeat} {
		r.ByClass[c], err = s.FindingCounts(ctx, audit.FindingCountFilter{Class: c})
		mustRead(t, "FindingCounts", err)
	}
	r.Lockn, err = s.LockCounts(ctx)
	mustRead(t, "LockCounts", err)
	r.Blinds, err = s.BlindWindows(ctx, audit.BlindFilter{})
	mustRead(t, "BlindWindows", err)
	r.Last, err = s.LastEventAt(ctx)
	mustRead(t, "LastEventAt", err)
	r.Listed, err = s.Cursors(ctx)
	mustRead(t, "Cursors", err)
	return r
}

// readLock reads one lock's history into r.
func (r *history) readLock(t *testing.T, s Store, id int64, renumbered bool) {
	t.Helper()
	ctx := context.Background()
	var err error
	r.Events[id], err = s.Events(ctx, id, audit.EventFilter{TimeFilter: audit.TimeFilter{Limit: audit.MaxListLimit}})
	mustRead(t, "Events", err)
	asCopied(r.Events[id])
	for i := range r.Events[id] {
		if renumbered {
			r.Events[id][i].ID = 0
		}
	}
	for _, o := range []audit.WriteOutcome{audit.WriteAccepted, audit.WriteRejected} {
		w, err := s.WriteEvents(ctx, id, o, audit.EventFilter{})
		mustRead(t, "WriteEvents", err)
		r.Writes[id] = append(r.Writes[id], w)
	}
	r.Renewals[id], err = s.EventTimes(ctx, id, audit.EventRenew, audit.TimeFilter{})
	mustRead(t, "EventTimes", err)
	for i, at := range r.Renewals[id] {
		r.Renewals[id][i] = at.Truncate(time.Millisecond)
	}
	r.Counts[id], err = s.WriteCounts(ctx, id, audit.WriteAccepted, audit.BinFilter{From: At(0), To: At(100), Bins: 10})
	mustRead(t, "WriteCounts", err)
	r.Tenures[id], err = s.Tenures(ctx, id, audit.TimeFilter{})
	mustRead(t, "Tenures", err)
}

// asCopied clears the ids of renewals and keeps their observed times to
// the millisecond: a store that logs renewals (the renewal log of either) gives
// a copy its synced ones as runs, which keep the observed time to the
// millisecond as sealing does, and its unsynced ones as rows numbered
// after every row, so their ids differ in the target; the rest of each,
// and their order, do not.
func asCopied(events []audit.Event) {
	for i, e := range events {
		if e.Kind == audit.EventRenew {
			events[i].ID = 0
			events[i].At = e.At.Truncate(time.Millisecond)
		}
	}
}

// copyAll copies src into dst, failing the test on an error.
func copyAll(t *testing.T, src, dst Store, opts storecopy.Options) storecopy.Result {
	t.Helper()
	res, err := storecopy.Copy(context.Background(), src, dst, opts)
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	return res
}

func testCopyMovesTheWholeHistory(t *testing.T, h Harness) {
	src, dst := h.Open(t), h.Open(t)
	ids := CopyStory(t, src)
	res := copyAll(t, src, dst, storecopy.Options{})
	if res.Resumed {
		t.Error("Resumed = true for a copy into an empty store")
	}
	for _, tb := range storecopy.Tables {
		if res.Rows[tb.Name] == 0 {
			t.Errorf("table %s: no rows copied; the story should fill every table", tb.Name)
		}
	}
	SameHistory(t, src, dst, ids)
	// The copy keeps the fences: a deposed owner is refused there too.
	CheckFenced(t, dst.Apply(context.Background(), audit.Batch{Fences: []audit.Fence{{Source: "cluster-a", Token: 2}}}), "cluster-a", 2, 3)

	// The service goes on in the new store: its new rows get new ids, and
	// both stores read the same after the same batch.
	next := audit.Batch{
		Locks:    []audit.TrackState{heldLock("cluster-b", "new", "w", 1, 70)},
		Events:   []audit.Event{{Lock: audit.LockKey{Source: "cluster-b", Name: "new"}, Kind: audit.EventGrant, At: At(70), Holder: "w", Token: audit.Int64(1)}},
		Findings: []audit.Finding{{Lock: audit.LockKey{Source: "cluster-b", Name: "new"}, Kind: audit.FindingUnfencedLock, At: At(70)}},
	}
	Apply(t, src, next)
	Apply(t, dst, next)
	sameHistory(t, src, dst, ids, true)
}

func testCopyResumesAfterEveryInterruption(t *testing.T, h Harness) {
	src, dst := h.Open(t), h.Open(t)
	ids := CopyStory(t, src)
	// Every run copies one chunk of 2 rows and is interrupted, until a run
	// has nothing left but to finish.
	runs := 0
	for ; runs < 200; runs++ {
		ctx, cancel := context.WithCancel(context.Background())
		res, err := storecopy.Copy(ctx, src, dst, storecopy.Options{Chunk: 2, Progress: func(p storecopy.Progress) {
			if p.Copied > 0 {
				cancel()
			}
		}})
		cancel()
		if err == nil {
			if !res.Resumed {
				t.Error("the last run did not resume")
			}
			break
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("run %d: Copy = %v, want context.Canceled", runs, err)
		}
	}
	if runs < 10 {
		t.Errorf("the copy finished after %d interruptions; want one per chunk", runs)
	}
	SameHistory(t, src, dst, ids)
}

func testCopyRefusesATargetWithOtherData(t *testing.T, h Harness) {
	src, dst := h.Open(t), h.Open(t)
	CopyStory(t, src)
	Apply(t, dst, audit.Batch{Locks: []audit.TrackState{heldLock("other", "x", "w", 1, 0)}})
	_, err := storecopy.Copy(context.Background(), src, dst, storecopy.Options{})
	if !errors.Is(err, storecopy.ErrTargetNotEmpty) || !strings.Contains(err.Error(), "locks") {
		t.Fatalf("Copy into a store with data = %v, want ErrTargetNotEmpty naming table locks", err)
	}
	locks, err := dst.Locks(context.Background(), audit.LockFilter{})
	if err != nil || len(locks) != 1 {
		t.Errorf("target's locks after the refused copy = %d, %v; want its one lock alone", len(locks), err)
	}
}

func testCopyRefusesToResumeFromAChangedSource(t *testing.T, h Harness) {
	src, dst := h.Open(t), h.Open(t)
	CopyStory(t, src)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := storecopy.Copy(ctx, src, dst, storecopy.Options{Chunk: 2, Progress: func(storecopy.Progress) { cancel() }})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted Copy = %v, want context.Canceled", err)
	}
	// A service wrote to the source meanwhile: one cursor moved.
	Apply(t, src, audit.Batch{Cursors: []audit.Cursor{{Source: "cache", Position: "10", At: At(62)}}})
	if _, err := storecopy.Copy(context.Background(), src, dst, storecopy.Options{}); !errors.Is(err, storecopy.ErrTargetNotEmpty) {
		t.Fatalf("resume from a changed source = %v, want ErrTargetNotEmpty", err)
	}
}

func testCopyVerifiesCounts(t *testing.T, h Harness) {
	src, dst := h.Open(t), h.Open(t)
	CopyStory(t, src)
	copyAll(t, src, dst, storecopy.Options{})
	// Running it again finds it done and verified.
	if res := copyAll(t, src, dst, storecopy.Options{}); !res.Resumed {
		t.Error("a second run of a finished copy did not see it as its own")
	}
	// A service wrote to the target since: the counts no longer match.
	key := audit.LockKey{Source: "cache", Name: "lock:orders"}
	Apply(t, dst, audit.Batch{Events: []audit.Event{{Lock: key, Kind: audit.EventRelease, At: At(90), Holder: "b"}}})
	_, err := storecopy.Copy(context.Background(), src, dst, storecopy.Options{})
	var mismatch *storecopy.MismatchError
	if !errors.As(err, &mismatch) || len(mismatch.Tables) != 1 || mismatch.Tables[0].Table != "events" ||
		mismatch.Tables[0].Target != mismatch.Tables[0].Source+1 {
		t.Fatalf("Copy onto a target with one more event = %v, want a mismatch naming events alone", err)
	}
}
