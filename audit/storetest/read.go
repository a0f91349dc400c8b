package storetest

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

func testLocksFilters(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	mk := func(source, name, holder string, class audit.Class, state audit.LockState) audit.TrackState {
		st := heldLock(source, name, holder, 1, 0)
		st.Lock.Class, st.Lock.State = class, state
		return st
	}
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{
		mk("b-src", "/locks/orders", "Worker-A", audit.ClassLock, audit.StateHeld),
		mk("a-src", "/locks/orders", "worker-b", audit.ClassLock, audit.StateFree),
		mk("a-src", "/locks/orders-eu", "", audit.ClassLock, audit.StateExpired),
		mk("a-src", "kube-node-lease/node-1", "node-1", audit.ClassHeartbeat, audit.StateHeld),
		mk("a-src", "100%_done", "x", audit.ClassLock, audit.StateHeld),
		mk("a-src", "1000 done", "x", audit.ClassLock, audit.StateHeld),
		mk("a-src", `back\slash`, "x", audit.ClassLock, audit.StateHeld),
	}})

	keys := func(ls []audit.Lock) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.Key().String())
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    audit.LockFilter
		want []string
	}{
		{"AllOrderedBySourceThenName", audit.LockFilter{}, []string{"a-src//locks/orders", "a-src//locks/orders-eu", "a-src/100%_done", "a-src/1000 done", `a-src/back\slash`, "a-src/kube-node-lease/node-1", "b-src//locks/orders"}},
		{"Source", audit.LockFilter{Source: "b-src"}, []string{"b-src//locks/orders"}},
		{"NameIsExact", audit.LockFilter{Name: "/locks/orders"}, []string{"a-src//locks/orders", "b-src//locks/orders"}},
		{"QMatchesNameSubstringIgnoringCase", audit.LockFilter{Q: "ORDERS-E"}, []string{"a-src//locks/orders-eu"}},
		{"QMatchesHolderIgnoringCase", audit.LockFilter{Q: "worker-a"}, []string{"b-src//locks/orders"}},
		{"QPercentIsLiteral", audit.LockFilter{Q: "0%"}, []string{"a-src/100%_done"}},
		{"QUnderscoreIsLiteral", audit.LockFilter{Q: "%_d"}, []string{"a-src/100%_done"}},
		{"QBackslashIsLiteral", audit.LockFilter{Q: `k\s`}, []string{`a-src/back\slash`}},
		{"QWithoutMatch", audit.LockFilter{Q: "_x_"}, nil},
		{"Class", audit.LockFilter{Class: audit.ClassHeartbeat}, []string{"a-src/kube-node-lease/node-1"}},
		{"State", audit.LockFilter{State: audit.StateExpired}, []string{"a-src//locks/orders-eu"}},
		{"CombinedFilters", audit.LockFilter{Source: "a-src", Q: "orders", State: audit.StateFree}, []string{"a-src//locks/orders"}},
		{"LimitAndOffset", audit.LockFilter{Limit: 2, Offset: 1}, []string{"a-src//locks/orders-eu", "a-src/100%_done"}},
		{"NegativeOffsetIsZero", audit.LockFilter{Limit: 1, Offset: -3}, []string{"a-src//locks/orders"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Locks(ctx, tc.f)
			if err != nil {
				t.Fatalf("Locks(%+v): %v", tc.f, err)
			}
			Equal(t, "locks", keys(got), tc.want)
		})
	}
}

// A caller that pages through every lock (alerting at start) asks for
// MaxLockLimit at a time and stops at a short page: the store must return
// that many.
func testLocksDefaultAndMaxLimit(t *testing.T, h Harness) {
	s := h.Open(t)
	if n := audit.MaxLockLimit + 10; h.AddLocks != nil {
		h.AddLocks(t, s, n)
	} else {
		var b audit.Batch
		for i := range n {
			b.Locks = append(b.Locks, heldLock("bulk", fmt.Sprintf("bulk-%05d", i), "h", 1, 0))
		}
		Apply(t, s, b)
	}
	for _, tc := range []struct {
		limit, want int
	}{{0, audit.DefaultLockLimit}, {-1, audit.DefaultLockLimit}, {audit.MaxLockLimit + 10, audit.MaxLockLimit}} {
		got, err := s.Locks(context.Background(), audit.LockFilter{Limit: tc.limit})
		if err != nil {
			t.Fatalf("Locks: %v", err)
		}
		if len(got) != tc.want {
			t.Errorf("Locks(Limit %d) returned %d, want %d", tc.limit, len(got), tc.want)
		}
	}
}

func testEventsFilters(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	other := audit.LockKey{Source: "src", Name: "other"}
	kinds := []audit.EventKind{audit.EventGrant, audit.EventRenew, audit.EventRenew, audit.EventRelease}
	var b audit.Batch
	for i := range 20 {
		b.Events = append(b.Events, audit.Event{Lock: key, Kind: kinds[i%len(kinds)], At: At(i), Holder: fmt.Sprint(i)})
	}
	// Two events at the same instant keep their insertion order.
	b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventGrant, At: At(19), Holder: "19b"})
	b.Events = append(b.Events, audit.Event{Lock: other, Kind: audit.EventGrant, At: At(5), Holder: "other"})
	Apply(t, s, b)
	id := LockByKey(t, s, key).ID

	holders := func(es []audit.Event) []string {
		var out []string
		for _, e := range es {
			if e.Lock != key || e.LockID != id {
				t.Errorf("event %d has lock %s (%d), want %s (%d)", e.ID, e.Lock, e.LockID, key, id)
			}
			out = append(out, e.Holder)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    audit.EventFilter
		want []string
	}{
		{"WindowIsInclusive", audit.EventFilter{TimeFilter: audit.TimeFilter{From: At(3), To: At(6)}}, []string{"3", "4", "5", "6"}},
		{"OpenStart", audit.EventFilter{TimeFilter: audit.TimeFilter{To: At(1)}}, []string{"0", "1"}},
		{"OpenEnd", audit.EventFilter{TimeFilter: audit.TimeFilter{From: At(18)}}, []string{"18", "19", "19b"}},
		{"Kind", audit.EventFilter{Kind: audit.EventRelease}, []string{"3", "7", "11", "15", "19"}},
		{"KindInWindow", audit.EventFilter{Kind: audit.EventGrant, TimeFilter: audit.TimeFilter{From: At(1), To: At(12)}}, []string{"4", "8", "12"}},
		{"Kinds", audit.EventFilter{Kinds: []audit.EventKind{audit.EventGrant, audit.EventRelease}, TimeFilter: audit.TimeFilter{To: At(8)}},
			[]string{"0", "3", "4", "7", "8"}},
		{"KindsWithRenewals", audit.EventFilter{Kinds: []audit.EventKind{audit.EventRenew, audit.EventRelease}, TimeFilter: audit.TimeFilter{To: At(4)}},
			[]string{"1", "2", "3"}},
		{"KindsNewestUpToTheLimit", audit.EventFilter{Kinds: []audit.EventKind{audit.EventGrant, audit.EventRelease}, TimeFilter: audit.TimeFilter{Limit: 3}},
			[]string{"16", "19", "19b"}},
		{"KindOverKinds", audit.EventFilter{Kind: audit.EventRelease, Kinds: []audit.EventKind{audit.EventGrant}, TimeFilter: audit.TimeFilter{To: At(8)}},
			[]string{"3", "7"}},
		{"LimitReturnsNewestInTimeOrder", audit.EventFilter{TimeFilter: audit.TimeFilter{Limit: 3}}, []string{"18", "19", "19b"}},
		{"LimitInWindow", audit.EventFilter{TimeFilter: audit.TimeFilter{To: At(10), Limit: 2}}, []string{"9", "10"}},
		{"EmptyWindow", audit.EventFilter{TimeFilter: audit.TimeFilter{From: At(100)}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Events(ctx, id, tc.f)
			if err != nil {
				t.Fatalf("Events: %v", err)
			}
			Equal(t, "event holders", holders(got), tc.want)
		})
	}
}

func testTenuresOverlappingWindow(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	// Tenure n is granted at 10n and ends at 10n+5; the last is still held.
	var b audit.Batch
	for n := int64(1); n <= 5; n++ {
		ten := audit.Tenure{Lock: key, Seq: n, Holder: fmt.Sprint(n), Token: audit.Int64(n), GrantedAt: At(int(10 * n))}
		if n < 5 {
			ten.EndedAt, ten.End = At(int(10*n+5)), audit.EndReleased
		}
		b.Tenures = append(b.Tenures, ten)
	}
	Apply(t, s, b)
	id := LockByKey(t, s, key).ID

	for _, tc := range []struct {
		name string
		f    audit.TimeFilter
		want []int64
	}{
		{"All", audit.TimeFilter{}, []int64{1, 2, 3, 4, 5}},
		{"GrantedAtWindowEndCounts", audit.TimeFilter{From: At(26), To: At(30)}, []int64{3}},
		{"EndedAtWindowStartCounts", audit.TimeFilter{From: At(25), To: At(29)}, []int64{2}},
		{"GapBetweenTenures", audit.TimeFilter{From: At(26), To: At(29)}, nil},
		{"HeldTenureOverlapsAnyLaterWindow", audit.TimeFilter{From: At(1000), To: At(2000)}, []int64{5}},
		{"OpenStart", audit.TimeFilter{To: At(20)}, []int64{1, 2}},
		{"LimitReturnsNewestInGrantOrder", audit.TimeFilter{Limit: 2}, []int64{4, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Tenures(ctx, id, tc.f)
			if err != nil {
				t.Fatalf("Tenures: %v", err)
			}
			var seqs []int64
			for _, ten := range got {
				if ten.Lock != key || ten.LockID != id {
					t.Errorf("tenure %d has lock %s (%d), want %s (%d)", ten.Seq, ten.Lock, ten.LockID, key, id)
				}
				seqs = append(seqs, ten.Seq)
			}
			Equal(t, "tenure seqs", seqs, tc.want)
		})
	}
}

func testFindingsFilters(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	a := audit.LockKey{Source: "src", Name: "a"}
	bk := audit.LockKey{Source: "src", Name: "b"}
	Apply(t, s, audit.Batch{Findings: []audit.Finding{
		{Lock: a, Kind: audit.FindingOverlap, Severity: audit.SeverityCritical, At: At(1), Summary: "1"},
		{Lock: a, Kind: audit.FindingStaleWrite, Severity: audit.SeverityInfo, At: At(2), Resource: "db", Summary: "2"},
		{Lock: bk, Kind: audit.FindingStaleWrite, Severity: audit.SeverityInfo, At: At(3), Resource: "cache", Summary: "3"},
		{Lock: bk, Kind: audit.FindingLateRenewal, Severity: audit.SeverityWarning, At: At(4), Summary: "4"},
		{Lock: a, Kind: audit.FindingOverlap, Severity: audit.SeverityCritical, At: At(5), Summary: "5"},
	}})
	idA := LockByKey(t, s, a).ID

	for _, tc := range []struct {
		name string
		f    audit.FindingFilter
		want []string
	}{
		{"AllInTimeOrder", audit.FindingFilter{}, []string{"1", "2", "3", "4", "5"}},
		{"Lock", audit.FindingFilter{LockID: idA}, []string{"1", "2", "5"}},
		{"MissingLockMatchesNothing", audit.FindingFilter{LockID: 999}, nil},
		{"Kind", audit.FindingFilter{Kind: audit.FindingStaleWrite}, []string{"2", "3"}},
		{"Severity", audit.FindingFilter{Severity: audit.SeverityCritical}, []string{"1", "5"}},
		{"Resource", audit.FindingFilter{Resource: "cache"}, []string{"3"}},
		{"WindowIsInclusive", audit.FindingFilter{TimeFilter: audit.TimeFilter{From: At(2), To: At(4)}}, []string{"2", "3", "4"}},
		{"LimitReturnsNewestInTimeOrder", audit.FindingFilter{TimeFilter: audit.TimeFilter{Limit: 2}}, []string{"4", "5"}},
		{"LockAndKindAndLimit", audit.FindingFilter{LockID: idA, Kind: audit.FindingOverlap, TimeFilter: audit.TimeFilter{Limit: 1}}, []string{"5"}},
		{"Kinds", audit.FindingFilter{Kinds: []audit.FindingKind{audit.FindingLateRenewal, audit.FindingOverlap}}, []string{"1", "4", "5"}},
		{"LockAndKinds", audit.FindingFilter{LockID: idA, Kinds: []audit.FindingKind{audit.FindingStaleWrite, audit.FindingLateRenewal}}, []string{"2"}},
		{"KindBeforeKinds", audit.FindingFilter{Kind: audit.FindingLateRenewal, Kinds: []audit.FindingKind{audit.FindingOverlap}}, []string{"4"}},
		{"LockAndItsSource", audit.FindingFilter{LockID: idA, Source: "src", Severity: audit.SeverityInfo}, []string{"2"}},
		{"LockAndAnotherSource", audit.FindingFilter{LockID: idA, Source: "other"}, nil},
		{"Source", audit.FindingFilter{Source: "src", Kind: audit.FindingLateRenewal}, []string{"4"}},
		{"OtherSource", audit.FindingFilter{Source: "other"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Findings(ctx, tc.f)
			if err != nil {
				t.Fatalf("Findings: %v", err)
			}
			var sums []string
			for _, f := range got {
				if want := map[int64]audit.LockKey{idA: a, LockByKey(t, s, bk).ID: bk}[f.LockID]; f.Lock != want || want.Name == "" {
					t.Errorf("finding %s: lock %s (%d), want %s", f.Summary, f.Lock, f.LockID, want)
				}
				sums = append(sums, f.Summary)
			}
			Equal(t, "findings", sums, tc.want)
		})
	}
}

func testLastEventAtPerSource(t *testing.T, h Harness) {
	s := h.Open(t)
	Apply(t, s, audit.Batch{
		Locks: []audit.TrackState{heldLock("quiet", "no-events", "h", 1, 0)},
		Events: []audit.Event{
			{Lock: audit.LockKey{Source: "etcd", Name: "a"}, Kind: audit.EventGrant, At: At(5)},
			{Lock: audit.LockKey{Source: "etcd", Name: "b"}, Kind: audit.EventGrant, At: At(9)},
			{Lock: audit.LockKey{Source: "etcd", Name: "a"}, Kind: audit.EventRenew, At: At(7)},
			{Lock: audit.LockKey{Source: "k8s", Name: "ns/x"}, Kind: audit.EventGrant, At: At(3)},
		},
	})
	got, err := s.LastEventAt(context.Background())
	if err != nil {
		t.Fatalf("LastEventAt: %v", err)
	}
	Equal(t, "LastEventAt", got, map[string]time.Time{"etcd": At(9), "k8s": At(3)})
}

func testMissingLockIsNotFound(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{heldLock("src", "exists", "h", 1, 0)}})

	check := func(call string, err error, names string) {
		t.Helper()
		if code := audit.ErrorCode(err); code != audit.ENOTFOUND {
			t.Errorf("%s: error code = %q (%v), want %q", call, code, err, audit.ENOTFOUND)
			return
		}
		if msg := audit.ErrorMessage(err); !strings.Contains(msg, names) {
			t.Errorf("%s: message %q does not name %q", call, msg, names)
		}
	}
	_, err := s.Lock(ctx, 12345)
	check("Lock", err, "12345")
	_, err = s.LockByKey(ctx, audit.LockKey{Source: "src", Name: "missing"})
	check("LockByKey", err, "src/missing")
	_, err = s.Events(ctx, 12345, audit.EventFilter{})
	check("Events", err, "12345")
	_, err = s.Tenures(ctx, 12345, audit.TimeFilter{})
	check("Tenures", err, "12345")
	_, err = s.WriteEvents(ctx, 12345, audit.WriteAccepted, audit.EventFilter{})
	check("WriteEvents", err, "12345")
}

// TestWriteEventsReadWhatEventsRead: the lean read of a lock's writes gives,
// for each outcome and filter, what Events gives of the same writes: with and
// without a token, with a highest token as the tracker writes it (int64) and
// as JSON gives it (float64), none, or one among other detail.
func testWriteEventsReadWhatEventsRead(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	details := []map[string]any{nil, {"highest_token": int64(9)}, {"highest_token": 12.0}, {"note": "x", "highest_token": int64(3)}}
	var b audit.Batch
	for i := range 24 {
		e := audit.Event{Lock: key, Kind: audit.EventWriteAccepted, At: At(i / 2), Holder: fmt.Sprint("w", i%3),
			Resource: fmt.Sprint("db-", i%2), RequestID: fmt.Sprint("r", i), Detail: details[i%len(details)]}
		if i%3 == 0 {
			e.Kind = audit.EventWriteRejected
		}
		if i%5 != 0 {
			e.Token = audit.Int64(int64(i))
		}
		b.Events = append(b.Events, e)
		b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventGrant, At: At(i / 2), Holder: "g"})
	}
	Apply(t, s, b)
	id := LockByKey(t, s, key).ID
	all, err := s.Events(ctx, id, audit.EventFilter{})
	if err != nil || len(all) != len(b.Events) {
		t.Fatalf("Events = %d, %v; want %d", len(all), err, len(b.Events))
	}
	// A cursor between the writes at 6 s: the tie on time goes by id.
	mid := all[26]
	if mid.Kind != audit.EventWriteAccepted || !mid.At.Equal(At(6)) {
		t.Fatalf("event 26 = %s, want the write %d at 6 s", Show(mid), 13)
	}
	for _, outcome := range []audit.WriteOutcome{audit.WriteAccepted, audit.WriteRejected} {
		kind := audit.EventKind("write_" + string(outcome))
		for _, f := range []audit.EventFilter{
			{},
			{TimeFilter: audit.TimeFilter{From: At(3), To: At(7)}},
			{TimeFilter: audit.TimeFilter{Limit: 3}},
			{Before: audit.EventCursor{At: mid.At, ID: mid.ID}, TimeFilter: audit.TimeFilter{Limit: 4}},
		} {
			events, err := s.Events(ctx, id, audit.EventFilter{TimeFilter: f.TimeFilter, Kind: kind, Before: f.Before})
			if err != nil {
				t.Fatal(err)
			}
			var want []audit.WriteEvent
			for _, e := range events {
				w, ok := audit.WriteEventOf(e)
				if !ok {
					t.Fatalf("event %+v is no write", e)
				}
				want = append(want, w)
			}
			got, err := s.WriteEvents(ctx, id, outcome, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(want) == 0 || !reflect.DeepEqual(got, want) {
				t.Errorf("%s %+v:\n got %+v\nwant %+v", outcome, f, got, want)
			}
		}
	}
}

// A lock that was not found when read is found once it is stored: a store
// may remember the locks it has seen, never one it has not.
func testLockNotFoundThenStored(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{heldLock("src", "first", "h", 1, 0)}})
	first, err := s.LockByKey(ctx, audit.LockKey{Source: "src", Name: "first"})
	if err != nil {
		t.Fatal(err)
	}
	// The next lock stored takes an id after first's; ids count up.
	for id := first.ID + 1; id <= first.ID+3; id++ {
		if _, err := s.Events(ctx, id, audit.EventFilter{}); audit.ErrorCode(err) != audit.ENOTFOUND {
			t.Fatalf("Events of lock %d before it exists: %v, want ENOTFOUND", id, err)
		}
	}
	Apply(t, s, audit.Batch{Events: []audit.Event{{Lock: audit.LockKey{Source: "src", Name: "second"}, Kind: audit.EventGrant, At: At(1), Holder: "h"}}})
	second, err := s.LockByKey(ctx, audit.LockKey{Source: "src", Name: "second"})
	if err != nil {
		t.Fatal(err)
	}
	if second.ID <= first.ID || second.ID > first.ID+3 {
		t.Fatalf("second lock's id = %d, want one of the ids after %d read before", second.ID, first.ID)
	}
	next := second.ID
	events, err := s.Events(ctx, next, audit.EventFilter{})
	if err != nil || len(events) != 1 || events[0].Lock.Name != "second" {
		t.Fatalf("Events of the lock once stored = %+v, %v; want its grant", events, err)
	}
	if _, err := s.Tenures(ctx, next, audit.TimeFilter{}); err != nil {
		t.Errorf("Tenures of the lock once stored: %v", err)
	}
}

func testTenuresByHolder(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	a, b, c := audit.LockKey{Source: "src", Name: "a"}, audit.LockKey{Source: "src", Name: "b"}, audit.LockKey{Source: "other", Name: "c"}
	ended := func(k audit.LockKey, seq int64, holder string, sec int) audit.Tenure {
		return audit.Tenure{Lock: k, Seq: seq, Holder: holder, Token: audit.Int64(int64(sec)), GrantedAt: At(sec),
			Renewals: 2, LastRenewedAt: At(sec + 2), LeaseDuration: 10 * time.Second, ExpiresAt: At(sec + 12),
			EndedAt: At(sec + 4), End: audit.EndReleased}
	}
	held := ended(a, 3, "alice", 30)
	held.EndedAt, held.End = time.Time{}, ""
	// b and c are both granted at 20 s: lock id, then seq, orders them.
	Apply(t, s, audit.Batch{Tenures: []audit.Tenure{
		ended(a, 1, "alice", 10), ended(a, 2, "bob", 25), held,
		ended(b, 1, "alice", 20), ended(c, 1, "alice", 20),
		ended(b, 2, "alice2", 40), ended(c, 2, "Alice", 41),
	}})
	ids := map[audit.LockKey]int64{}
	for _, k := range []audit.LockKey{a, b, c} {
		ids[k] = LockByKey(t, s, k).ID
	}
	first, second := b, c // the tie at 20 s, in lock id order
	if ids[c] < ids[b] {
		first, second = c, b
	}
	name := func(k audit.LockKey, seq int64) string { return fmt.Sprintf("%s/%d", k, seq) }
	for _, tc := range []struct {
		name string
		f    audit.HolderFilter
		want []string
	}{
		{"AllInGrantOrder", audit.HolderFilter{Holder: "alice"}, []string{name(a, 1), name(first, 1), name(second, 1), name(a, 3)}},
		{"HolderIsExact", audit.HolderFilter{Holder: "alic"}, nil},
		{"UnknownHolder", audit.HolderFilter{Holder: "nobody"}, nil},
		{"WindowOnGrantTimeInclusive", audit.HolderFilter{Holder: "alice", TimeFilter: audit.TimeFilter{From: At(20), To: At(30)}},
			[]string{name(first, 1), name(second, 1), name(a, 3)}},
		{"LimitKeepsTheNewest", audit.HolderFilter{Holder: "alice", TimeFilter: audit.TimeFilter{Limit: 2}}, []string{name(second, 1), name(a, 3)}},
		{"BeforeCursorPagesBackThroughATie", audit.HolderFilter{Holder: "alice", TimeFilter: audit.TimeFilter{Limit: 2},
			Before: audit.TenureCursor{GrantedAt: At(20), LockID: ids[second], Seq: 1}}, []string{name(a, 1), name(first, 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.TenuresByHolder(ctx, tc.f)
			if err != nil {
				t.Fatalf("TenuresByHolder(%+v): %v", tc.f, err)
			}
			var names []string
			for _, ten := range got {
				if ten.LockID != ids[ten.Lock] {
					t.Errorf("tenure %s has lock id %d, want %d", name(ten.Lock, ten.Seq), ten.LockID, ids[ten.Lock])
				}
				names = append(names, name(ten.Lock, ten.Seq))
			}
			Equal(t, "tenures", names, tc.want)
		})
	}
	t.Run("EveryField", func(t *testing.T) {
		got, err := s.TenuresByHolder(ctx, audit.HolderFilter{Holder: "alice", TimeFilter: audit.TimeFilter{From: At(30)}})
		if err != nil {
			t.Fatal(err)
		}
		want := held
		want.LockID = ids[a]
		Equal(t, "the held tenure", got, []audit.Tenure{want})
	})
}
