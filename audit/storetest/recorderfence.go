package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// The recorder under fences: each replica's recorder writes the sources it
// owns under their tokens, and gives a source up when the store says a
// newer owner holds it.

// sourceGrant is an input of source granting its lock "orders" to holder
// with token at sec, at cursor.
func sourceGrant(source, holder string, token int64, sec int, cursor string) audit.Input {
	in := GrantInput(holder, token, At(sec), cursor)
	in.Source = source
	in.Observations[0].Lock.Source = source
	return in
}

// sourceRenewal is an input of source renewing holder's grant of "orders"
// at sec, at cursor.
func sourceRenewal(source, holder string, token int64, sec int, cursor string) audit.Input {
	in := sourceGrant(source, holder, token, sec, cursor)
	in.Observations[0].Kind = audit.EventRenew
	return in
}

// gatedJournal is a store whose Apply, once armed, waits at the gate: the
// requests that arrive meanwhile make the recorder's next group.
type gatedJournal struct {
	Store
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedJournal) Apply(ctx context.Context, b audit.Batch) error {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.gate
	}
	return g.Store.Apply(ctx, b)
}

// refusals collects a recorder's FenceRefusals.
type refusals struct {
	mu  sync.Mutex
	got []audit.FenceRefusal
}

func (r *refusals) hook() audit.RecorderOption {
	return audit.WithFenceRefused(func(f audit.FenceRefusal) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got = append(r.got, f)
	})
}

func (r *refusals) all() []audit.FenceRefusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]audit.FenceRefusal(nil), r.got...)
}

// sourceEventKinds returns the kinds of source's "orders" events, in order.
func sourceEventKinds(t *testing.T, s audit.Store, source string) []audit.EventKind {
	t.Helper()
	evs, _ := lockEvents(t, s, audit.LockKey{Source: source, Name: "orders"})
	var kinds []audit.EventKind
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	return kinds
}

// A group commit holds inputs of a source a newer owner has taken and of a
// source still owned: the first are refused with the store's EFENCED and
// the source is given up (tracker state, cursor, later requests), the
// second are stored and acknowledged, and the hook says what was refused.
func testRecorderFenceRefusalKeepsOtherSources(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	j := &gatedJournal{Store: s, entered: make(chan struct{}), gate: make(chan struct{})}
	var refused refusals
	rec := StartRecorder(t, j, refused.hook(), WithoutTicks())
	for _, src := range []string{"src", "other"} {
		if err := rec.SetFence(ctx, src, 1); err != nil {
			t.Fatalf("SetFence(%s, 1): %v", src, err)
		}
		if err := rec.Record(ctx, sourceGrant(src, "A", 41, 0, "100")); err != nil {
			t.Fatalf("observe %s: %v", src, err)
		}
	}
	// Another replica takes src over.
	Apply(t, s, audit.Batch{Fences: []audit.Fence{{Source: "src", Token: 2}}})

	j.armed.Store(true)
	first := rec.Submit(ctx, sourceRenewal("other", "A", 41, 1, "101"))
	<-j.entered
	lost := rec.Submit(ctx, sourceRenewal("src", "A", 41, 2, "102"))
	kept := rec.Submit(ctx, sourceRenewal("other", "A", 41, 3, "103"))
	close(j.gate)
	if err := first(); err != nil {
		t.Fatalf("other's first renewal: %v", err)
	}
	CheckFenced(t, lost(), "src", 1, 2)
	if err := kept(); err != nil {
		t.Fatalf("other's renewal in the refused group: %v", err)
	}

	Equal(t, "src events", sourceEventKinds(t, s, "src"), []audit.EventKind{audit.EventGrant})
	Equal(t, "other events", sourceEventKinds(t, s, "other"), []audit.EventKind{audit.EventGrant, audit.EventRenew, audit.EventRenew})
	got := refused.all()
	if len(got) != 1 {
		t.Fatalf("hook called %d times, want once: %+v", len(got), got)
	}
	f := got[0]
	if f.Source != "src" || f.Token != 1 || f.Highest != 2 || f.Inputs != 1 || f.Writes != 0 || f.Events != 1 || f.At.IsZero() {
		t.Errorf("refusal = %+v, want src, token 1, highest 2, 1 input, 1 event, with its time", f)
	}
	if pos, _ := rec.Cursor("src"); pos != "" {
		t.Errorf("src cursor = %q after the refusal, want none", pos)
	}
	if pos, _ := rec.Cursor("other"); pos != "103" {
		t.Errorf("other cursor = %q, want 103", pos)
	}
	rec.Peek(func(lock func(audit.LockKey) (audit.Lock, bool)) {
		if l, ok := lock(audit.LockKey{Source: "src", Name: "orders"}); ok {
			t.Errorf("the tracker still has src's lock: %+v", l)
		}
	})
	if err := rec.Ready(ctx); err != nil {
		t.Errorf("Ready after a fence refusal: %v; it is no outage", err)
	}

	// Later requests of src are refused without reaching the store; a
	// write report that names src refuses the whole report.
	err := rec.Record(ctx, sourceRenewal("src", "A", 41, 4, "104"))
	if audit.ErrorCode(err) != audit.EFENCED {
		t.Errorf("observe src after the refusal: %v, want %s", err, audit.EFENCED)
	}
	err = rec.ReportWrites(ctx, []audit.WriteReport{
		{Source: "other", Lock: "orders", Resource: "db", Token: audit.Int64(41), Outcome: audit.WriteAccepted, At: At(5), RequestID: "w-1"},
		{Source: "src", Lock: "orders", Resource: "db", Token: audit.Int64(41), Outcome: audit.WriteAccepted, At: At(5), RequestID: "w-2"},
	})
	if audit.ErrorCode(err) != audit.EFENCED {
		t.Errorf("write reports naming src: %v, want %s", err, audit.EFENCED)
	}
	if stored, err := s.StoredWrites(ctx, []string{"w-1", "w-2"}); err != nil || len(stored) != 0 {
		t.Errorf("stored writes of the refused report = %+v, %v; want none", stored, err)
	}
	if len(refused.all()) != 1 {
		t.Errorf("hook called %d times, want once: the later refusals are this replica's own", len(refused.all()))
	}
	Equal(t, "src events", sourceEventKinds(t, s, "src"), []audit.EventKind{audit.EventGrant})
}

// Two recorders on two stores of one database are two replicas. The one
// granted the source later, under a higher token, cuts the other off the
// moment its SetFence returns, before it writes anything; the deposed one
// can no longer set its old token either.
func testRecorderSetFenceCutsOffTheOldOwner(t *testing.T, h Harness) {
	if h.Second == nil {
		t.Skip("the store cannot be opened twice on one database")
	}
	ctx := context.Background()
	s := h.Open(t)
	var oldRefused refusals
	old := StartRecorder(t, s, oldRefused.hook())
	if err := old.SetFence(ctx, "src", 7); err != nil {
		t.Fatalf("SetFence(src, 7): %v", err)
	}
	if err := old.Record(ctx, GrantInput("A", 41, At(0), "100")); err != nil {
		t.Fatalf("observe: %v", err)
	}
	owner := StartRecorder(t, h.Second(t, s))
	if err := owner.SetFence(ctx, "src", 8); err != nil {
		t.Fatalf("SetFence(src, 8): %v", err)
	}
	// The old owner, paused past its lease, wakes up and writes.
	CheckFenced(t, old.Record(ctx, sourceRenewal("src", "A", 41, 1, "101")), "src", 7, 8)
	if got := oldRefused.all(); len(got) != 1 || got[0].Source != "src" || got[0].Token != 7 || got[0].Highest != 8 {
		t.Errorf("refusals = %+v, want one of src under 7, fence at 8", got)
	}
	if err := old.SetFence(ctx, "src", 7); audit.ErrorCode(err) != audit.EFENCED {
		t.Errorf("SetFence(src, 7) after the takeover: %v, want %s", err, audit.EFENCED)
	}
	if err := owner.Record(ctx, GrantInput("B", 42, At(2), "102")); err != nil {
		t.Fatalf("the new owner's grant: %v", err)
	}
	Equal(t, "events", EventKinds(t, s), []audit.EventKind{audit.EventGrant, audit.EventGrant})
}

// DropFence gives a source up: its requests are refused until SetFence
// takes it again, and nothing it had is written meanwhile.
func testRecorderDropFenceGivesTheSourceUp(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	rec := StartRecorder(t, s)
	if err := rec.SetFence(ctx, "src", 3); err != nil {
		t.Fatalf("SetFence: %v", err)
	}
	if err := rec.Record(ctx, GrantInput("A", 41, At(0), "100")); err != nil {
		t.Fatalf("observe: %v", err)
	}
	if err := rec.DropFence(ctx, "src"); err != nil {
		t.Fatalf("DropFence: %v", err)
	}
	if err := rec.Record(ctx, sourceRenewal("src", "A", 41, 1, "101")); audit.ErrorCode(err) != audit.EFENCED {
		t.Errorf("observe after DropFence: %v, want %s", err, audit.EFENCED)
	}
	if pos, _ := rec.Cursor("src"); pos != "" {
		t.Errorf("cursor after DropFence = %q, want none", pos)
	}
	rec.Peek(func(lock func(audit.LockKey) (audit.Lock, bool)) {
		if l, ok := lock(orders); ok {
			t.Errorf("the tracker still has the lock after DropFence: %+v", l)
		}
	})
	if err := rec.SetFence(ctx, "src", 4); err != nil {
		t.Fatalf("SetFence again: %v", err)
	}
	if err := rec.Record(ctx, GrantInput("B", 42, At(2), "102")); err != nil {
		t.Fatalf("observe after SetFence again: %v", err)
	}
	Equal(t, "events", EventKinds(t, s), []audit.EventKind{audit.EventGrant, audit.EventGrant})
	// Under the new token: the old one is refused.
	CheckFenced(t, s.Apply(ctx, fenced("src", "orders", 3, 9, "late")), "src", 3, 4)
}

// WithoutTicks is a recorder option that keeps the clock's ticks out of a
// test's group commits.
func WithoutTicks() audit.RecorderOption { return audit.WithTickInterval(time.Hour) }

// A replica takes a source over from one that stopped without a word (a
// crash, or a pause past its lease): with WithOwnership it had restored
// nothing of the source at its start, and on SetFence it loads the source as
// the old owner left it, renewals its rows lack included, while its own
// syncs meanwhile claimed only the sources it owned. Before SetFence it
// refuses the source's requests, which another replica records.
func testRecorderTakeoverResumesTheSource(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	second := audit.Journal(s)
	if h.Second != nil {
		second = h.Second(t, s)
	}
	old := StartRecorder(t, s, audit.WithOwnership(), audit.WithSyncInterval(time.Hour), WithoutTicks())
	next := StartRecorder(t, second, audit.WithOwnership(), audit.WithSyncInterval(0), WithoutTicks())
	if err := old.SetFence(ctx, "src", 1); err != nil {
		t.Fatalf("SetFence(src, 1): %v", err)
	}
	for i, in := range []audit.Input{GrantInput("A", 41, At(0), "100"), sourceRenewal("src", "A", 41, 1, "101"),
		sourceRenewal("src", "A", 41, 2, "102")} {
		if err := old.Record(ctx, in); err != nil {
			t.Fatalf("old owner's input %d: %v", i, err)
		}
	}
	// The next owner records a source of its own and syncs every commit.
	if err := next.SetFence(ctx, "other", 1); err != nil {
		t.Fatalf("SetFence(other, 1): %v", err)
	}
	for i, in := range []audit.Input{sourceGrant("other", "B", 7, 3, "200"), sourceRenewal("other", "B", 7, 4, "201")} {
		if err := next.Record(ctx, in); err != nil {
			t.Fatalf("other's input %d: %v", i, err)
		}
	}
	if err := next.Record(ctx, sourceRenewal("src", "A", 41, 3, "103")); audit.ErrorCode(err) != audit.EFENCED {
		t.Errorf("an input of a source another replica records: %v, want %s", err, audit.EFENCED)
	}
	// A millisecond after the renewal at 3: events of one instant are in
	// id order, and a logged or sealed renewal's id is above every row's.
	write := audit.WriteReport{Source: "src", Lock: "orders", Resource: "db", Token: audit.Int64(41),
		Outcome: audit.WriteAccepted, At: At(3).Add(time.Millisecond), RequestID: "w1"}
	if err := next.ReportWrites(ctx, []audit.WriteReport{write}); audit.ErrorCode(err) != audit.EFENCED {
		t.Errorf("a write report of a source another replica records: %v, want %s", err, audit.EFENCED)
	}

	// The old owner is gone; the next one takes src over.
	if err := next.SetFence(ctx, "src", 2); err != nil {
		t.Fatalf("SetFence(src, 2): %v", err)
	}
	next.Peek(func(lock func(audit.LockKey) (audit.Lock, bool)) {
		l, ok := lock(orders)
		if !ok || l.Holder != "A" || !l.RenewedAt.Equal(At(2)) {
			t.Errorf("the taken-over lock = %+v (found %v), want A's renewed at 2", l, ok)
		}
	})
	if pos, _ := next.Cursor("src"); pos != "102" {
		t.Errorf("the taken-over cursor = %q, want 102", pos)
	}
	if err := next.Record(ctx, sourceRenewal("src", "A", 41, 3, "103")); err != nil {
		t.Fatalf("the next owner's renewal: %v", err)
	}
	if err := next.ReportWrites(ctx, []audit.WriteReport{write}); err != nil {
		t.Fatalf("the next owner's write report: %v", err)
	}
	Equal(t, "events", EventKinds(t, s), []audit.EventKind{audit.EventGrant, audit.EventRenew, audit.EventRenew,
		audit.EventRenew, audit.EventWriteAccepted})
	// Its sync every commit wrote src's rows in full.
	if l := LockByKey(t, s, orders); !l.RenewedAt.Equal(At(3)) {
		t.Errorf("src/orders' row renewed at %v, want 3", l.RenewedAt)
	}
	_, _, renewals := restoreSource(t, s, "src")
	Equal(t, "src's renewals to replay", renewals, []int(nil))
}
