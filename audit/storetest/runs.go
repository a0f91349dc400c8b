package storetest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// Renewal runs: sealing (audit.Sealer) folds staged renewals of closed
// hour windows into runs, and every read of renewals reads the runs with
// the rows left. A sealed renewal reads back as it was, its observed time
// to the millisecond and with an id of its own, in the same (at, id) order.

// runHour is the start of the h-th hour window of the runs' stories.
func runHour(h int) time.Time {
	return time.Date(2025, 3, 14, 10, 0, 0, 0, time.UTC).Add(time.Duration(h) * time.Hour)
}

// runIDBase is the lowest id of a renewal read from a run.
const runIDBase = int64(1) << 52

// Seal seals s's renewals observed before before, a lock per step from the
// first lock, and returns how many it sealed.
func Seal(t *testing.T, s Store, before time.Time) int {
	t.Helper()
	return sealFrom(t, s, before, 0, -1)
}

// sealFrom seals a lock per step after lock after, for at most steps
// steps (all of them for -1), and returns how many renewals it sealed.
func sealFrom(t *testing.T, s Store, before time.Time, after int64, steps int) int {
	t.Helper()
	sealed := 0
	for ; steps != 0; steps-- {
		res, err := s.SealRenewals(context.Background(), audit.SealStep{Before: before, AfterLock: after, Limit: 1})
		if err != nil {
			t.Fatalf("SealRenewals after lock %d: %v", after, err)
		}
		sealed += res.Sealed
		if res.Done {
			break
		}
		if res.NextLock <= after && res.Sealed == 0 {
			t.Fatalf("SealRenewals after lock %d: next lock %d and nothing sealed: no progress", after, res.NextLock)
		}
		after = res.NextLock
	}
	return sealed
}

// nodeLease is a Kubernetes node lease's tenure: holder and token as the
// collector records them, a 40 s lease.
func nodeLease(key audit.LockKey, seq int64, holder string, token int64, granted time.Time) audit.Tenure {
	return audit.Tenure{Lock: key, Seq: seq, Holder: holder, Token: audit.Int64(token), GrantedAt: granted,
		LeaseDuration: 40 * time.Second}
}

// nodeRenewals are n renewals of ten from start, every 10 s with up to 4 %
// of jitter and a few ms of observation lag, each with its renewTime to the
// microsecond, margin and resourceVersion, as the tracker records a node
// lease's.
func nodeRenewals(ten audit.Tenure, start time.Time, n int) []audit.Event {
	events := make([]audit.Event, n)
	at := start
	for i := range events {
		renewed := at.Add(time.Duration(i*7919%400_000) * time.Microsecond).Truncate(time.Microsecond)
		observed := renewed.Add(time.Duration(1+i%5)*time.Millisecond + time.Duration(i*104729%1_000_000))
		events[i] = audit.Event{Lock: ten.Lock, Kind: audit.EventRenew, At: observed, Holder: ten.Holder, Token: ten.Token,
			TTL: ten.LeaseDuration, Position: strconv.Itoa(48_213_000 + 17*i), Seq: ten.Seq,
			Detail: map[string]any{"margin_ratio": float64(700+i%250) / 1000, "renewed_at": renewed.Format(time.RFC3339Nano)}}
		at = at.Add(10 * time.Second)
	}
	return events
}

// allEvents reads every event of lock id that f selects, failing the test
// on an error.
func allEvents(t *testing.T, s Store, id int64, f audit.EventFilter) []audit.Event {
	t.Helper()
	if f.Limit == 0 {
		f.Limit = audit.MaxListLimit
	}
	events, err := s.Events(context.Background(), id, f)
	if err != nil {
		t.Fatalf("Events(%d, %+v): %v", id, f, err)
	}
	return events
}

// sealedAs is events as a read of them once sealed gives them back: those
// that got gives an id of a run (sealed) are at their millisecond; every
// other field is the same. It fails the test unless got and events are
// the same renewals in the same order, and at least one was sealed.
func sealedAs(t *testing.T, events, got []audit.Event) []audit.Event {
	t.Helper()
	if len(got) != len(events) {
		t.Fatalf("read %d events after sealing, want the %d before", len(got), len(events))
	}
	want := slices.Clone(events)
	sealed := 0
	for i := range want {
		if got[i].ID >= runIDBase {
			sealed++
			want[i].ID, want[i].At = got[i].ID, want[i].At.Truncate(time.Millisecond)
		}
	}
	if sealed == 0 {
		t.Fatal("no renewal read back from a run")
	}
	return want
}

// ordered fails the test unless events are in strict (at, id) order.
func ordered(t *testing.T, what string, events []audit.Event) {
	t.Helper()
	for i := 1; i < len(events); i++ {
		a, b := events[i-1], events[i]
		if !a.At.Before(b.At) && (!a.At.Equal(b.At) || a.ID >= b.ID) {
			t.Fatalf("%s: event %d (%s, id %d) is not after event %d (%s, id %d)", what, i, b.At, b.ID, i-1, a.At, a.ID)
		}
	}
}

// clockMovesOn stores an event of another lock, with a sync: the newest
// event of a store may be kept a row, so that the id of the next one
// cannot be taken for synced.
func clockMovesOn(t *testing.T, s Store, at time.Time) {
	t.Helper()
	Apply(t, s, audit.Batch{Events: []audit.Event{{Lock: audit.LockKey{Source: "clock", Name: "tick"}, Kind: audit.EventObserved, At: at}}, Synced: true})
}

func testRunsRoundTripEveryField(t *testing.T, h Harness) {
	s := h.Open(t)
	key := audit.LockKey{Source: "cluster-a", Name: "kube-node-lease/node-1"}
	first := nodeLease(key, 1, "node-1 <script>", 7, runHour(0).Add(-time.Minute))
	first.EndedAt, first.End = runHour(0).Add(30*time.Minute), audit.EndExpired
	second := nodeLease(key, 2, "node-1", 8, runHour(0).Add(31*time.Minute))
	events := []audit.Event{{Lock: key, Kind: audit.EventGrant, At: first.GrantedAt, Holder: first.Holder, Token: first.Token, TTL: first.LeaseDuration}}
	events = append(events, nodeRenewals(first, runHour(0), 150)...) // to 10:25
	events = append(events, audit.Event{Lock: key, Kind: audit.EventExpire, At: first.EndedAt, Holder: first.Holder, Token: first.Token},
		audit.Event{Lock: key, Kind: audit.EventGrant, At: second.GrantedAt, Holder: second.Holder, Token: second.Token, TTL: second.LeaseDuration})
	later := nodeRenewals(second, runHour(0).Add(32*time.Minute), 300) // across 11:00, to 11:22
	// Renewals a run cannot hold or that say more: a position that is not
	// a canonical integer, an inferred one, one with a detail of its own
	// (a run of its own), one without margin or backend time.
	later[3].Position = "0042"
	later[5].Inferred = true
	later[7].Detail["overtaken"], later[7].Detail["renewal"] = true, int64(9)
	later[9].Detail = nil
	later[11].TTL = 15 * time.Second
	later[13].Position = "" // as a Kubernetes renewal is now observed
	events = append(events, later...)
	Apply(t, s, audit.Batch{Tenures: []audit.Tenure{first, second}, Events: events, Synced: true})
	clockMovesOn(t, s, runHour(3))
	id := LockByKey(t, s, key).ID

	before := allEvents(t, s, id, audit.EventFilter{})
	if n := Seal(t, s, runHour(2)); n != len(events)-5 {
		t.Errorf("sealed %d renewals, want %d (all but the two that cannot be and the three other kinds)", n, len(events)-5)
	}
	after := allEvents(t, s, id, audit.EventFilter{})
	Equal(t, "events after sealing", after, sealedAs(t, before, after))
	ordered(t, "events after sealing", after)
	for i, want := range map[int]bool{1: true, 3 + 150 + 3: false, 3 + 150 + 5: false, 3 + 150 + 7: true, 3 + 150 + 9: true} {
		if got := after[i].ID >= runIDBase; got != want {
			t.Errorf("event %d (%s, position %q): from a run %v, want %v", i, after[i].At, after[i].Position, got, want)
		}
	}
	// The backend's time stays exact to its microsecond.
	if got, want := after[1].Detail["renewed_at"], events[1].Detail["renewed_at"]; got != want {
		t.Errorf("renewed_at = %v, want %v", got, want)
	}
	if after[1].Holder != first.Holder || *after[1].Token != 7 || after[len(after)-1].Holder != "node-1" || *after[len(after)-1].Token != 8 {
		t.Errorf("holders and tokens after sealing: %q %v, %q %v; want the tenures'", after[1].Holder, *after[1].Token,
			after[len(after)-1].Holder, *after[len(after)-1].Token)
	}

	// Sealing again seals nothing more, and a reopened store reads the same.
	if n := Seal(t, s, runHour(2)); n != 0 {
		t.Errorf("a second seal sealed %d renewals", n)
	}
	s = h.Reopen(t, s)
	Equal(t, "events after reopening", allEvents(t, s, id, audit.EventFilter{}), after)
}

// runsStory stores a lock's grant and 1,000 renewals every 10 s from 10:00
// (to 12:46), with every 97th renewal's position one a run cannot keep,
// and seals the windows before 12:00: sealed runs and rows, and rows of
// the open window. It returns the lock's id and its events.
func runsStory(t *testing.T, s Store) (int64, []audit.Event) {
	t.Helper()
	key := audit.LockKey{Source: "cluster-a", Name: "kube-node-lease/node-2"}
	ten := nodeLease(key, 1, "node-2", 3, runHour(0).Add(-time.Second))
	events := append([]audit.Event{{Lock: key, Kind: audit.EventGrant, At: ten.GrantedAt, Holder: ten.Holder, Token: ten.Token}},
		nodeRenewals(ten, runHour(0), 1000)...)
	for i := 1; i < len(events); i += 97 {
		events[i].Position = "x" + events[i].Position
	}
	Apply(t, s, audit.Batch{Tenures: []audit.Tenure{ten}, Events: events, Synced: true})
	clockMovesOn(t, s, runHour(4))
	id := LockByKey(t, s, key).ID
	before := allEvents(t, s, id, audit.EventFilter{})
	Seal(t, s, runHour(2))
	return id, sealedAs(t, before, allEvents(t, s, id, audit.EventFilter{}))
}

func testRunsPageWithBeforeCursors(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	id, all := runsStory(t, s)
	ordered(t, "every event", all)

	for _, f := range []audit.EventFilter{{}, {Kind: audit.EventRenew}, {Kinds: []audit.EventKind{audit.EventGrant, audit.EventRenew}}} {
		for _, lim := range []int{3, 7, 360, 361} {
			t.Run(fmt.Sprintf("%s%v/limit%d", f.Kind, f.Kinds, lim), func(t *testing.T) {
				want := all
				if f.Kind == audit.EventRenew {
					want = all[1:]
				}
				var got []audit.Event
				f := f
				f.Limit = lim
				for pages := 0; ; pages++ {
					page := allEvents(t, s, id, f)
					if len(page) > lim || pages > len(want) {
						t.Fatalf("page %d: %d events, limit %d", pages, len(page), lim)
					}
					got = append(slices.Clone(page), got...)
					if len(page) < lim {
						break
					}
					f.Before = audit.EventCursor{At: page[0].At, ID: page[0].ID}
				}
				Equal(t, "the pages together", got, want)
			})
		}
	}

	// Windows that start or end inside a run, across the rows and runs.
	for _, w := range [][2]int{{0, 999}, {5, 5}, {354, 367}, {700, 750}, {710, 900}, {1, 720}} {
		from, to := all[1+w[0]].At, all[1+w[1]].At
		f := audit.EventFilter{Kind: audit.EventRenew, TimeFilter: audit.TimeFilter{From: from, To: to, Limit: audit.MaxListLimit}}
		Equal(t, fmt.Sprintf("renewals %d to %d", w[0], w[1]), allEvents(t, s, id, f), all[1+w[0]:2+w[1]])
		f.Limit = 10
		Equal(t, fmt.Sprintf("the newest 10 of renewals %d to %d", w[0], w[1]), allEvents(t, s, id, f), all[max(1+w[0], 2+w[1]-10):2+w[1]])
		times, err := s.EventTimes(ctx, id, audit.EventRenew, f.TimeFilter)
		if err != nil {
			t.Fatalf("EventTimes: %v", err)
		}
		var want []time.Time
		for _, e := range all[max(1+w[0], 2+w[1]-10) : 2+w[1]] {
			want = append(want, e.At)
		}
		Equal(t, fmt.Sprintf("times of the newest 10 of renewals %d to %d", w[0], w[1]), times, want)
	}
	// Other kinds alone read no run.
	Equal(t, "grants", allEvents(t, s, id, audit.EventFilter{Kind: audit.EventGrant}), all[:1])
}

func testRunsCutByACrash(t *testing.T, h Harness) {
	s := h.Open(t)
	keys := []audit.LockKey{{Source: "cluster-a", Name: "kube-node-lease/node-3"}, {Source: "cluster-a", Name: "kube-node-lease/node-4"}}
	var tenures []audit.Tenure
	var renewals [][]audit.Event
	for i, key := range keys {
		ten := nodeLease(key, 1, key.Name, int64(i+1), runHour(0).Add(-time.Second))
		tenures = append(tenures, ten)
		renewals = append(renewals, nodeRenewals(ten, runHour(0), 1000))
	}
	// Half of the first window's renewals, a crash before any sealing, the
	// rest after the restart.
	half := func(from, to int) audit.Batch {
		b := audit.Batch{Tenures: tenures, Synced: true}
		for _, rs := range renewals {
			b.Events = append(b.Events, rs[from:to]...)
		}
		return b
	}
	Apply(t, s, half(0, 180))
	s = h.Reopen(t, s)
	Apply(t, s, half(180, 700))
	clockMovesOn(t, s, runHour(4))
	var ids []int64
	var rows [][]audit.Event
	for _, key := range keys {
		id := LockByKey(t, s, key).ID
		ids = append(ids, id)
		rows = append(rows, allEvents(t, s, id, audit.EventFilter{}))
	}
	// Sealing cut after its first lock's step, then done; then the rest
	// of the second window, sealed after another restart.
	sealed := sealFrom(t, s, runHour(1), 0, 1)
	s = h.Reopen(t, s)
	sealed += Seal(t, s, runHour(1))
	Apply(t, s, half(700, 1000))
	clockMovesOn(t, s, runHour(5))
	var before [][]audit.Event
	for i, id := range ids {
		got := allEvents(t, s, id, audit.EventFilter{})
		if len(got) != 1000 {
			t.Fatalf("%d renewals of %s read, want 1000", len(got), keys[i].Name)
		}
		Equal(t, "the first window of "+keys[i].Name+" sealed", got[:700], sealedAs(t, rows[i], got[:700]))
		before = append(before, got)
	}
	s = h.Reopen(t, s)
	sealed += Seal(t, s, runHour(2))
	if sealed != 2*720 {
		t.Errorf("sealed %d renewals, want %d: the first two windows of both locks", sealed, 2*720)
	}
	for i, id := range ids {
		got := allEvents(t, s, id, audit.EventFilter{})
		Equal(t, "renewals of "+keys[i].Name, got, sealedAs(t, before[i], got))
		ordered(t, "renewals of "+keys[i].Name, got)
	}
}

func testRunsTakeoverRestoresTheOpenTenure(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	st := heldLock("cluster-a", "kube-node-lease/node-5", "node-5", 4, 0)
	key := st.Lock.Key()
	ten := nodeLease(key, 1, "node-5", 4, runHour(0).Add(-time.Second))
	st.NextSeq, st.Recent = 1, []audit.Tenure{ten}
	fence := []audit.Fence{{Source: key.Source, Token: 1}}
	rs := nodeRenewals(ten, runHour(0), 700)
	last := rs[499]
	synced := audit.Renewal{Lock: key, Seq: 1, Renewals: 500, RenewedAt: last.At, ExpiresAt: last.At.Add(ten.LeaseDuration), LeaseDuration: ten.LeaseDuration}
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{st}, Tenures: []audit.Tenure{ten}, Events: rs[:500], Fences: fence})
	Apply(t, s, audit.Batch{Renewed: []audit.Renewal{synced}, Fences: fence, Synced: true, SyncSources: []string{key.Source}})
	// Renewals after the source's sync mark, in windows that have closed:
	// a takeover replays them, so they stay rows.
	Apply(t, s, audit.Batch{Events: rs[500:], Fences: fence})
	Apply(t, s, audit.Batch{Events: []audit.Event{{Lock: audit.LockKey{Source: "clock", Name: "tick"}, Kind: audit.EventObserved, At: runHour(4)}}})
	if n := Seal(t, s, runHour(2)); n != 500 {
		t.Errorf("sealed %d renewals, want the 500 the sync mark covers", n)
	}

	states, _, unsynced, err := s.RestoreSource(ctx, key.Source)
	if err != nil {
		t.Fatalf("RestoreSource: %v", err)
	}
	if len(states) != 1 || len(states[0].Recent) != 1 {
		t.Fatalf("RestoreSource: %d locks, want 1 with its tenure", len(states))
	}
	got := states[0].Recent[0]
	if got.Holder != ten.Holder || *got.Token != 4 || got.Renewals != 500 || !got.LastRenewedAt.Equal(last.At) || !got.EndedAt.IsZero() {
		t.Errorf("restored tenure %s", Show(got))
	}
	if len(unsynced) != 200 || !unsynced[0].At.Equal(rs[500].At) || !unsynced[199].At.Equal(rs[699].At) || unsynced[0].ID >= runIDBase {
		t.Fatalf("RestoreSource: %d renewals to replay, want the 200 rows after the sync mark", len(unsynced))
	}
	for i, e := range unsynced {
		if e.Holder != ten.Holder || e.Seq != 1 || e.Detail["renewed_at"] != rs[500+i].Detail["renewed_at"] {
			t.Fatalf("renewal %d to replay: %s", i, Show(e))
		}
	}
	if all := allEvents(t, s, LockByKey(t, s, key).ID, audit.EventFilter{}); len(all) != 700 {
		t.Errorf("%d renewals read, want 700", len(all))
	}
}

func testRunsRetentionKeepsARunWhole(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "cluster-a", Name: "kube-node-lease/node-6"}
	ten := nodeLease(key, 1, "node-6", 5, runHour(0).Add(-time.Second))
	rs := nodeRenewals(ten, runHour(0).Add(5*time.Minute), 300) // 10:05 to 10:54:50, one run
	Apply(t, s, audit.Batch{Tenures: []audit.Tenure{ten}, Events: rs, Synced: true})
	clockMovesOn(t, s, runHour(3))
	id := LockByKey(t, s, key).ID
	if n := Seal(t, s, runHour(1)); n != 300 {
		t.Fatalf("sealed %d renewals, want 300", n)
	}
	sealed := allEvents(t, s, id, audit.EventFilter{})

	prune := func(cutoff time.Time) {
		t.Helper()
		r := &audit.Retainer{Store: s, Retention: audit.Retention{Kinds: map[audit.EventKind]time.Duration{audit.EventRenew: time.Hour}},
			Now: func() time.Time { return cutoff.Add(time.Hour) }, Step: 1}
		if err := r.Pass(ctx); err != nil {
			t.Fatalf("Pass: %v", err)
		}
	}
	// The cutoff inside the run: kept whole.
	prune(rs[150].At)
	Equal(t, "renewals with the cutoff inside their run", allEvents(t, s, id, audit.EventFilter{}), sealed)
	// Past its last renewal: gone, and summarised as pruned rows are.
	prune(rs[299].At.Add(time.Millisecond))
	if left := allEvents(t, s, id, audit.EventFilter{}); len(left) != 0 {
		t.Fatalf("%d renewals left past the cutoff", len(left))
	}
	tenures, err := s.Tenures(ctx, id, audit.TimeFilter{})
	if err != nil {
		t.Fatalf("Tenures: %v", err)
	}
	if len(tenures) != 1 || tenures[0].Pruned == nil {
		t.Fatalf("tenures %s: want one with what was pruned", Show(tenures))
	}
	least := 0.7
	Equal(t, "pruned", *tenures[0].Pruned, audit.RenewalSummary{Renewals: 300, First: sealed[0].At, Last: sealed[299].At, MinMarginRatio: &least})
}

func testRunsSealPreviousRenewalRows(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	// The previous release's rows: compact renewals of a dozen locks over
	// four or eight hours, and of one lock renewals stored before they
	// named their tenure, which stay rows.
	var keys []audit.LockKey
	for i := range 12 {
		key := audit.LockKey{Source: "cluster-a", Name: fmt.Sprintf("kube-node-lease/node-%02d", i)}
		ten := nodeLease(key, 1, key.Name, int64(i), runHour(-1))
		rs := nodeRenewals(ten, runHour(-1).Add(time.Duration(i)*time.Second), 17_280/12*(1+i%2))
		if i == 0 {
			for j := range rs[:50] {
				rs[j].Seq = 0
			}
		}
		Apply(t, s, audit.Batch{Tenures: []audit.Tenure{ten}, Events: rs, Synced: true})
		keys = append(keys, key)
	}
	clockMovesOn(t, s, runHour(72))
	count := func() int {
		n := 0
		for _, key := range keys {
			times, err := s.EventTimes(ctx, LockByKey(t, s, key).ID, audit.EventRenew, audit.TimeFilter{Limit: audit.MaxListLimit})
			if err != nil {
				t.Fatalf("EventTimes: %v", err)
			}
			n += len(times)
		}
		return n
	}
	stored := count()
	if sealed := Seal(t, s, runHour(71)); sealed != stored-50 {
		t.Errorf("sealed %d of %d renewals, want all but the 50 without their tenure", sealed, stored)
	}
	if n := count(); n != stored {
		t.Errorf("%d renewals after sealing, %d before", n, stored)
	}
}

// An idle store seals every renewal it has, its newest event among them
// when that is a renewal. An event stored after must still be one the
// journal has not synced: on a store that numbers a new row after the
// largest id left, that takes keeping the newest row.
func testRunsNewEventAfterSealingIsUnsynced(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "cluster-a", Name: "kube-node-lease/node-7"}
	ten := nodeLease(key, 1, "node-7", 6, runHour(0).Add(-time.Second))
	rs := nodeRenewals(ten, runHour(0), 361)
	Apply(t, s, audit.Batch{Tenures: []audit.Tenure{ten}, Events: rs[:360], Synced: true})
	Seal(t, s, runHour(1))
	Apply(t, s, audit.Batch{Events: rs[360:]})
	unsynced, err := s.Unsynced(ctx)
	if err != nil {
		t.Fatalf("Unsynced: %v", err)
	}
	if len(unsynced) != 1 || !unsynced[0].At.Equal(rs[360].At) {
		t.Fatalf("Unsynced after sealing: %s, want the renewal stored since", Show(unsynced))
	}
	if n := len(allEvents(t, s, LockByKey(t, s, key).ID, audit.EventFilter{})); n != 361 {
		t.Errorf("%d renewals read, want 361", n)
	}
}

// The same holds for retention: an idle store prunes every event it has
// once they are old, and an event stored after must still be unsynced.
func testPruneNewEventAfterPruningIsUnsynced(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "cluster-a", Name: "kube-node-lease/node-8"}
	ten := nodeLease(key, 1, "node-8", 6, runHour(0).Add(-time.Second))
	rs := nodeRenewals(ten, runHour(0), 31)
	Apply(t, s, audit.Batch{Tenures: []audit.Tenure{ten}, Events: rs[:30], Synced: true})
	r := &audit.Retainer{Store: s, Retention: audit.Retention{Events: time.Hour}, Now: func() time.Time { return runHour(3) }}
	if err := r.Pass(ctx); err != nil {
		t.Fatalf("Pass: %v", err)
	}
	Apply(t, s, audit.Batch{Events: rs[30:]})
	unsynced, err := s.Unsynced(ctx)
	if err != nil {
		t.Fatalf("Unsynced: %v", err)
	}
	if len(unsynced) != 1 || !unsynced[0].At.Equal(rs[30].At) {
		t.Fatalf("Unsynced after pruning: %s, want the renewal stored since", Show(unsynced))
	}
}
