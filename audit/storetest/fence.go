package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// The fence cases: when replicas share a store, each batch carries its
// sources' owner tokens (Batch.Fences) and the store refuses, whole, a batch
// under a token older than the highest it has seen for a source.

// fenced is a batch of source src's rows under token: the lock name's
// grant at sec, with its tenure, a write event with request id reqID, a
// finding and a cursor.
func fenced(src, name string, token int64, sec int, reqID string) audit.Batch {
	st := heldLock(src, name, "h", token, sec)
	key := st.Lock.Key()
	ten := audit.Tenure{Lock: key, Seq: 1, Holder: "h", Token: audit.Int64(token), GrantedAt: At(sec),
		LastRenewedAt: At(sec), LeaseDuration: 10 * time.Second, ExpiresAt: At(sec + 10)}
	st.Recent = []audit.Tenure{ten}
	return audit.Batch{
		Locks:   []audit.TrackState{st},
		Tenures: st.Recent,
		Events: []audit.Event{
			{Lock: key, Kind: audit.EventGrant, At: At(sec), Holder: "h", Token: audit.Int64(token)},
			{Lock: key, Kind: audit.EventWriteAccepted, At: At(sec), Holder: "h", Token: audit.Int64(token), Resource: "db", RequestID: reqID},
		},
		Findings: []audit.Finding{{Lock: key, Kind: audit.FindingExposure, At: At(sec), Resource: "db"}},
		Cursors:  []audit.Cursor{{Source: src, Position: fmt.Sprint(sec), At: At(sec)}},
		Fences:   []audit.Fence{{Source: src, Token: token}},
	}
}

// CheckFenced fails the test unless err is the store's refusal of token for
// source, whose fence is at highest: EFENCED, a message naming the source
// and both tokens, and a *audit.StaleFence that says the same.
func CheckFenced(t *testing.T, err error, source string, token, highest int64) {
	t.Helper()
	if code := audit.ErrorCode(err); code != audit.EFENCED {
		t.Fatalf("error = %v (code %q), want %s", err, code, audit.EFENCED)
	}
	msg := audit.ErrorMessage(err)
	for _, want := range []string{fmt.Sprintf("%q", source), fmt.Sprint(token), fmt.Sprint(highest)} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not name %s", msg, want)
		}
	}
	var sf *audit.StaleFence
	if !errors.As(err, &sf) {
		t.Fatalf("error %v has no *audit.StaleFence", err)
	}
	if want := (audit.StaleFence{Source: source, Token: token, Highest: highest}); *sf != want {
		t.Errorf("StaleFence = %+v, want %+v", *sf, want)
	}
}

// A refused batch leaves the store exactly as a store that never saw it:
// no lock row (new or changed), tenure, event, finding, cursor, renewal or
// sync mark of it, and no fence moved, in any source it carries.
func testFenceRefusedBatchLeavesNothing(t *testing.T, h Harness) {
	ctx := context.Background()
	s, ref := h.Open(t), h.Open(t)
	first := fenced("src", "orders", 5, 0, "req-1")
	first.Append(fenced("other", "jobs", 3, 0, "req-2"))
	first.Events = append(first.Events, audit.Event{Lock: audit.LockKey{Source: "src", Name: "orders"}, Kind: audit.EventRenew,
		At: At(1), Holder: "h", Token: audit.Int64(5), Seq: 1, TTL: 10 * time.Second})
	for _, st := range []Store{s, ref} {
		Apply(t, st, first)
	}

	// Newer rows of both sources, a new lock, renewals and sync marks: under
	// a good fence of other and a stale one of src.
	stale := fenced("other", "jobs", 4, 20, "req-3")
	stale.Append(fenced("src", "orders", 4, 20, "req-4"))
	stale.Append(fenced("src", "new", 4, 21, "req-5"))
	stale.Events = append(stale.Events, audit.Event{Lock: audit.LockKey{Source: "src", Name: "orders"}, Kind: audit.EventRenew,
		At: At(22), Holder: "h", Token: audit.Int64(4), Seq: 1, TTL: 10 * time.Second})
	stale.Renewed = []audit.Renewal{{Lock: audit.LockKey{Source: "src", Name: "orders"}, Seq: 1, Renewals: 9,
		RenewedAt: At(22), ExpiresAt: At(32), LeaseDuration: 10 * time.Second}}
	stale.Synced, stale.SyncMark, stale.SyncedToMark = true, true, true
	CheckFenced(t, s.Apply(ctx, stale), "src", 4, 5)
	SameHistory(t, ref, s, []string{"req-1", "req-2", "req-3", "req-4", "req-5"})

	// other's fence stayed at 3: its owner under 3 still writes.
	Apply(t, s, fenced("other", "jobs", 3, 30, "req-6"))
}

// The owner writes again and again under its token.
func testFenceEqualTokenCommits(t *testing.T, h Harness) {
	s := h.Open(t)
	for i := range 3 {
		Apply(t, s, fenced("src", "orders", 7, i, fmt.Sprintf("req-%d", i)))
	}
	stored, err := s.StoredWrites(context.Background(), []string{"req-0", "req-1", "req-2"})
	if err != nil {
		t.Fatalf("StoredWrites: %v", err)
	}
	if len(stored) != 3 {
		t.Errorf("stored %d of 3 writes under one token", len(stored))
	}
}

// A higher token moves the fence, and from then on the old one is refused,
// after a restart too; a batch of fences alone moves them.
func testFenceHigherTokenMovesIt(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	Apply(t, s, fenced("src", "orders", 5, 0, "req-1"))
	Apply(t, s, fenced("src", "orders", 6, 1, "req-2"))
	for i := range 2 {
		CheckFenced(t, s.Apply(ctx, fenced("src", "orders", 5, 2+i, fmt.Sprintf("late-%d", i))), "src", 5, 6)
	}
	s = h.Reopen(t, s)
	CheckFenced(t, s.Apply(ctx, fenced("src", "orders", 5, 4, "late-2")), "src", 5, 6)
	Apply(t, s, fenced("src", "orders", 6, 5, "req-3"))

	// A new owner claims the source before it writes anything.
	Apply(t, s, audit.Batch{Fences: []audit.Fence{{Source: "src", Token: 9}}})
	CheckFenced(t, s.Apply(ctx, fenced("src", "orders", 6, 6, "late-3")), "src", 6, 9)
	CheckFenced(t, s.Apply(ctx, audit.Batch{Fences: []audit.Fence{{Source: "src", Token: 8}}}), "src", 8, 9)

	stored, err := s.StoredWrites(ctx, []string{"req-1", "req-2", "req-3", "late-0", "late-1", "late-2", "late-3"})
	if err != nil {
		t.Fatalf("StoredWrites: %v", err)
	}
	var got []string
	for _, e := range stored {
		got = append(got, e.RequestID)
	}
	slices.Sort(got)
	Equal(t, "stored writes", got, []string{"req-1", "req-2", "req-3"})
	_, cursors, err := s.Restore(ctx)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	Equal(t, "cursors", cursors, []audit.Cursor{{Source: "src", Position: "5", At: At(5)}})
}

// A batch carries the fences of several sources; it commits only if every
// one holds, and the error names the one that did not.
func testFencesOfSeveralSources(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	both := fenced("a", "l", 1, 0, "req-1")
	both.Append(fenced("b", "l", 1, 0, "req-2"))
	Apply(t, s, both)

	for _, tc := range []struct {
		name            string
		a, b            int64
		refused         string
		token, highest  int64
		aFenceAfterward int64
	}{
		{"SecondStale", 2, 0, "b", 0, 1, 1},
		{"FirstStale", 0, 2, "a", 0, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fenced("a", "l", tc.a, 10, "x-"+tc.name)
			b.Append(fenced("b", "l", tc.b, 10, "y-"+tc.name))
			CheckFenced(t, s.Apply(ctx, b), tc.refused, tc.token, tc.highest)
		})
	}
	// Neither refused batch moved a fence: both owners under 1 still write.
	again := fenced("a", "l", 1, 20, "req-3")
	again.Append(fenced("b", "l", 1, 20, "req-4"))
	Apply(t, s, again)
	moved := fenced("a", "l", 2, 30, "req-5")
	moved.Append(fenced("b", "l", 3, 30, "req-6"))
	Apply(t, s, moved)
	CheckFenced(t, s.Apply(ctx, fenced("b", "l", 2, 40, "req-7")), "b", 2, 3)
	Apply(t, s, fenced("a", "l", 2, 40, "req-8"))
}

// Two stores on one database are two replicas. One owns the source under
// token 1 and commits without pause; the other takes over under token 2
// and commits too. Every acknowledged commit is stored, no refused one is,
// and once the new owner's first commit is acknowledged, no commit of the
// old one that starts after it lands.
func testFenceTwoReplicasRace(t *testing.T, h Harness) {
	if h.Second == nil {
		t.Skip("the store cannot be opened twice on one database")
	}
	ctx := context.Background()
	old := h.Open(t)
	owner := h.Second(t, old)
	var r fenceRace
	oldDone := make(chan error, 1)
	oldCommits := make(chan int, 1000)
	newDone := make(chan struct{})
	go func() { oldDone <- r.oldOwner(ctx, old, oldCommits, newDone) }()
	for range 5 {
		<-oldCommits
	}
	for n := 0; n < 30; n++ {
		if err := r.commit(ctx, owner, 2, 1000+n); err != nil {
			t.Fatalf("new owner's commit %d: %v", n, err)
		}
	}
	close(newDone)
	if err := <-oldDone; err != nil {
		t.Fatalf("old owner's commit failed other than by the fence: %v", err)
	}
	r.check(t, ctx, owner)
}

// fenceRace is what the two replicas of testFenceTwoReplicasRace saw of
// their commits.
type fenceRace struct {
	mu        sync.Mutex
	acked     []string  // request ids of acknowledged commits
	refused   []string  // and of refused ones
	tookOver  time.Time // when the new owner's first commit returned
	lateLands []string  // old-owner commits begun after tookOver that landed
}

// commit writes commit n under token to s and notes how it went.
func (r *fenceRace) commit(ctx context.Context, s Store, token int64, n int) error {
	id := fmt.Sprintf("t%d-%04d", token, n)
	started := time.Now()
	err := s.Apply(ctx, fenced("src", "orders", token, n, id))
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		r.acked = append(r.acked, id)
		if token == 1 && !r.tookOver.IsZero() && started.After(r.tookOver) {
			r.lateLands = append(r.lateLands, id)
		}
		if token == 2 && r.tookOver.IsZero() {
			r.tookOver = time.Now()
		}
	case audit.ErrorCode(err) == audit.EFENCED:
		r.refused = append(r.refused, id)
	default:
		return err
	}
	return nil
}

// oldOwner commits under token 1, telling progress of each, until the
// store has refused it a few times, as a paused replica's queued commits
// would; or, should the store refuse none, for a few commits after
// newDone closes.
func (r *fenceRace) oldOwner(ctx context.Context, s Store, progress chan<- int, newDone <-chan struct{}) error {
	extra := 0
	for n := 0; extra < 5; n++ {
		if err := r.commit(ctx, s, 1, n); err != nil {
			return err
		}
		r.mu.Lock()
		if len(r.refused) >= 5 {
			extra = 5
		}
		r.mu.Unlock()
		select {
		case <-newDone:
			extra++
		default:
		}
		select {
		case progress <- n:
		default:
		}
		// A replica's commits come a group-commit apart: back to back, a
		// writer that takes SQLite's lock again at once would starve the
		// other store's writer (its busy handler is not fair).
		time.Sleep(time.Millisecond)
	}
	return nil
}

// check fails the test unless every acknowledged commit is stored once, no
// refused one is, the new owner was never refused, nothing of the old
// owner begun after the takeover landed, and the old owner was refused.
func (r *fenceRace) check(t *testing.T, ctx context.Context, owner Store) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lateLands) > 0 {
		t.Errorf("old owner's commits %v began after the takeover and landed", r.lateLands)
	}
	for _, id := range r.refused {
		if strings.HasPrefix(id, "t2-") {
			t.Errorf("the new owner's commit %s was refused", id)
		}
	}
	stored, err := owner.StoredWrites(ctx, append(append([]string(nil), r.acked...), r.refused...))
	if err != nil {
		t.Fatalf("StoredWrites: %v", err)
	}
	got := make(map[string]int)
	for _, e := range stored {
		got[e.RequestID]++
	}
	for _, id := range r.acked {
		if got[id] != 1 {
			t.Errorf("acknowledged commit %s stored %d times, want once", id, got[id])
		}
	}
	for _, id := range r.refused {
		if got[id] != 0 {
			t.Errorf("refused commit %s is stored", id)
		}
	}
	if len(r.refused) < 5 {
		t.Errorf("%d commits of the old owner were refused, want at least 5", len(r.refused))
	}
}
