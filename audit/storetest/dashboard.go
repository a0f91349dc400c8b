package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

func lockKeys(ls []audit.Lock) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Name)
	}
	return out
}

// sortedLocks stores locks n0..n5 whose change times run backwards and whose
// expiries are shuffled, plus a heartbeat.
func sortedLocks(t *testing.T, s Store) map[string]int64 {
	t.Helper()
	var states []audit.TrackState
	expiries := []int{50, 20, 40, 10, 60, 30}
	for i, exp := range expiries {
		st := heldLock("src", fmt.Sprintf("n%d", i), fmt.Sprintf("h%d", i%2), int64(i), 0)
		st.Lock.ChangedAt = At(100 - i)
		st.Lock.ExpiresAt = At(exp)
		if i == 5 {
			st.Lock.Kind = audit.KindRedis
			st.Lock.State = audit.StateFree
		}
		states = append(states, st)
	}
	hb := heldLock("src", "hb", "node", 1, 0)
	hb.Lock.Class = audit.ClassHeartbeat
	states = append(states, hb)
	Apply(t, s, audit.Batch{Locks: states})
	ids := map[string]int64{}
	for _, st := range states {
		ids[st.Lock.Name] = LockByKey(t, s, st.Lock.Key()).ID
	}
	return ids
}

func testLocksSortsAndKeysetPages(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	ids := sortedLocks(t, s)
	lock := audit.ClassLock
	for _, tc := range []struct {
		name string
		f    audit.LockFilter
		want []string
	}{
		{"Name", audit.LockFilter{Class: lock, Limit: 3}, []string{"n0", "n1", "n2"}},
		{"NameAfter", audit.LockFilter{Class: lock, Limit: 3, After: ids["n2"]}, []string{"n3", "n4", "n5"}},
		{"NameBefore", audit.LockFilter{Class: lock, Limit: 2, Before: ids["n3"]}, []string{"n1", "n2"}},
		{"Changed", audit.LockFilter{Class: lock, Sort: audit.SortChanged, Limit: 2}, []string{"n0", "n1"}},
		{"ChangedAfter", audit.LockFilter{Class: lock, Sort: audit.SortChanged, Limit: 2, After: ids["n1"]}, []string{"n2", "n3"}},
		{"ChangedBefore", audit.LockFilter{Class: lock, Sort: audit.SortChanged, Limit: 2, Before: ids["n4"]}, []string{"n2", "n3"}},
		{"Expiry", audit.LockFilter{Class: lock, Sort: audit.SortExpiry, Limit: 3}, []string{"n3", "n1", "n5"}},
		{"ExpiryAfter", audit.LockFilter{Class: lock, Sort: audit.SortExpiry, After: ids["n5"]}, []string{"n2", "n0", "n4"}},
		{"ExpiryBefore", audit.LockFilter{Class: lock, Sort: audit.SortExpiry, Before: ids["n2"], Limit: 1}, []string{"n5"}},
		// n0 changed at 100s, n1 at 99s, ... n5 at 95s; both ends count.
		{"ChangedWindow", audit.LockFilter{Class: lock, ChangedFrom: At(96), ChangedTo: At(98)}, []string{"n2", "n3", "n4"}},
		{"ChangedFrom", audit.LockFilter{Class: lock, ChangedFrom: At(99)}, []string{"n0", "n1"}},
		{"ChangedToByChange", audit.LockFilter{Class: lock, ChangedTo: At(97), Sort: audit.SortChanged, Limit: 2}, []string{"n3", "n4"}},
		{"Kind", audit.LockFilter{Kind: audit.KindRedis}, []string{"n5"}},
		{"Holder", audit.LockFilter{Holder: "h1"}, []string{"n1", "n3", "n5"}},
		{"HolderIsExact", audit.LockFilter{Holder: "h"}, nil},
		// At 15s, 25% of a 10s lease left means expiring before 17.5s; n3
		// (10s) is past expiry, n1 (20s) has half its lease left, n5 is free.
		{"ExpiringBy", audit.LockFilter{Class: lock, ExpiringBy: 0.25, ExpiringAt: At(15)}, []string{"n3"}},
		{"ExpiringByWide", audit.LockFilter{Class: lock, ExpiringBy: 0.6, ExpiringAt: At(15), Sort: audit.SortExpiry}, []string{"n3", "n1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Locks(ctx, tc.f)
			if err != nil {
				t.Fatalf("Locks(%+v): %v", tc.f, err)
			}
			Equal(t, "locks", lockKeys(got), tc.want)
			cf := tc.f
			cf.Limit = 0
			n, err := s.CountLocks(ctx, cf)
			if err != nil {
				t.Fatalf("CountLocks: %v", err)
			}
			f := tc.f
			f.After, f.Before, f.Limit = 0, 0, 10
			all, _ := s.Locks(ctx, f)
			if n != len(all) {
				t.Errorf("CountLocks = %d, want %d (the filter's matches without a page)", n, len(all))
			}
		})
	}
	t.Run("CountStopsAtItsLimit", func(t *testing.T) {
		n, err := s.CountLocks(ctx, audit.LockFilter{Class: lock, Limit: 4})
		if err != nil || n != 4 {
			t.Errorf("CountLocks(Limit 4) = %d, %v; want 4 of 6", n, err)
		}
	})
	t.Run("MissingCursor", func(t *testing.T) {
		_, err := s.Locks(ctx, audit.LockFilter{After: 9999})
		if audit.ErrorCode(err) != audit.EINVALID {
			t.Errorf("Locks(After missing) err = %v, want EINVALID", err)
		}
	})
	t.Run("BadSort", func(t *testing.T) {
		_, err := s.Locks(ctx, audit.LockFilter{Sort: "size"})
		if audit.ErrorCode(err) != audit.EINVALID {
			t.Errorf("Locks(Sort size) err = %v, want EINVALID", err)
		}
	})
}

func testLockCounts(t *testing.T, h Harness) {
	s := h.Open(t)
	sortedLocks(t, s)
	got, err := s.LockCounts(context.Background())
	if err != nil {
		t.Fatalf("LockCounts: %v", err)
	}
	Equal(t, "counts", got, []audit.LockCount{
		{Source: "src", Class: audit.ClassHeartbeat, State: audit.StateHeld, N: 1},
		{Source: "src", Class: audit.ClassLock, State: audit.StateFree, N: 1},
		{Source: "src", Class: audit.ClassLock, State: audit.StateHeld, N: 5},
	})

	// The counts follow state changes (a store may keep them as it goes).
	st := heldLock("src", "n0", "h0", 0, 0)
	st.Lock.State = audit.StateExpired
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{st}})
	got, err = s.LockCounts(context.Background())
	if err != nil {
		t.Fatalf("LockCounts: %v", err)
	}
	Equal(t, "counts after n0 expired", got, []audit.LockCount{
		{Source: "src", Class: audit.ClassHeartbeat, State: audit.StateHeld, N: 1},
		{Source: "src", Class: audit.ClassLock, State: audit.StateExpired, N: 1},
		{Source: "src", Class: audit.ClassLock, State: audit.StateFree, N: 1},
		{Source: "src", Class: audit.ClassLock, State: audit.StateHeld, N: 4},
	})
}

// Lock rows made bare (by an event), then given state by the tracker, one
// batch after another, all count: the update moves a lock between counts
// that already exist.
func testLockCountsAcrossBatches(t *testing.T, h Harness) {
	s := h.Open(t)
	for i := range 3 {
		Apply(t, s, audit.Batch{Events: []audit.Event{{Lock: audit.LockKey{Source: "src", Name: fmt.Sprint("bare", i)}, Kind: audit.EventGrant, At: At(i)}}})
		Apply(t, s, audit.Batch{Locks: []audit.TrackState{heldLock("src", fmt.Sprint("bare", i), "h", 1, i)}})
		Apply(t, s, audit.Batch{Events: []audit.Event{{Lock: audit.LockKey{Source: "src", Name: fmt.Sprint("free", i)}, Kind: audit.EventGrant, At: At(i)}}})
	}
	got, err := s.LockCounts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "counts", got, []audit.LockCount{
		{Source: "src", Class: audit.ClassLock, State: audit.StateFree, N: 3},
		{Source: "src", Class: audit.ClassLock, State: audit.StateHeld, N: 3},
	})
}

func testEventsBeforeCursorPagesBack(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	var b audit.Batch
	for i := range 6 {
		b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventRenew, At: At(i / 2), Holder: fmt.Sprint(i)})
	}
	Apply(t, s, b)
	id := LockByKey(t, s, key).ID
	page, err := s.Events(ctx, id, audit.EventFilter{TimeFilter: audit.TimeFilter{Limit: 2}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(page) > 0 {
		for i := len(page) - 1; i >= 0; i-- {
			got = append(got, page[i].Holder)
		}
		first := page[0]
		page, err = s.Events(ctx, id, audit.EventFilter{TimeFilter: audit.TimeFilter{Limit: 2},
			Before: audit.EventCursor{At: first.At, ID: first.ID}})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Events at the same instant page by id, so none is skipped or repeated.
	Equal(t, "newest-first pages", got, []string{"5", "4", "3", "2", "1", "0"})
}

func testEventTimes(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	var b audit.Batch
	for i := range 10 {
		kind := audit.EventRenew
		if i%3 == 0 {
			kind = audit.EventGrant
		}
		b.Events = append(b.Events, audit.Event{Lock: key, Kind: kind, At: At(i)})
	}
	Apply(t, s, b)
	id := LockByKey(t, s, key).ID
	got, err := s.EventTimes(ctx, id, audit.EventRenew, audit.TimeFilter{From: At(2), To: At(8), Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "renew times", got, []time.Time{At(5), At(7), At(8)})
	got, err = s.EventTimes(ctx, id, audit.EventGrant, audit.TimeFilter{From: At(2), To: At(9)})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "grant times", got, []time.Time{At(3), At(6), At(9)})

	// Renewal times among the other kinds: a write report and a renewal at
	// the same instant leave that renewal, and the newest renewals fill the
	// limit past a run of other events.
	Apply(t, s, audit.Batch{Events: []audit.Event{
		{Lock: key, Kind: audit.EventWriteAccepted, At: At(8)},
		{Lock: key, Kind: audit.EventRelease, At: At(10)},
		{Lock: key, Kind: audit.EventRenew, At: At(11)},
		{Lock: key, Kind: audit.EventWriteRejected, At: At(12)},
		{Lock: key, Kind: audit.EventWriteRejected, At: At(13)},
	}})
	got, err = s.EventTimes(ctx, id, audit.EventRenew, audit.TimeFilter{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "renew times among others", got, []time.Time{At(7), At(8), At(11)})
	if _, err := s.EventTimes(ctx, 999, audit.EventRenew, audit.TimeFilter{}); audit.ErrorCode(err) != audit.ENOTFOUND {
		t.Errorf("EventTimes(missing lock) err = %v, want ENOTFOUND", err)
	}
}

// WriteCounts bins a window's writes of one outcome, both ends inclusive,
// keeps the newest when limited and says so, and refuses a filter that does
// not cut a window into bins.
func testWriteCounts(t *testing.T, harness Harness) {
	s := harness.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	var b audit.Batch
	for _, sec := range []int{-1, 0, 1, 1, 3, 10, 11} {
		b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventWriteAccepted, At: At(sec)})
	}
	b.Events = append(b.Events,
		audit.Event{Lock: key, Kind: audit.EventWriteRejected, At: At(4)},
		audit.Event{Lock: key, Kind: audit.EventGrant, At: At(2)},
		audit.Event{Lock: key, Kind: audit.EventRenew, At: At(4)})
	Apply(t, s, b)
	id := LockByKey(t, s, key).ID

	counts := func(outcome audit.WriteOutcome, f audit.BinFilter) audit.Histogram {
		t.Helper()
		h, err := s.WriteCounts(ctx, id, outcome, f)
		if err != nil {
			t.Fatalf("WriteCounts(%s, %+v): %v", outcome, f, err)
		}
		return h
	}
	window := audit.BinFilter{From: At(0), To: At(10), Bins: 5}
	h := counts(audit.WriteAccepted, window)
	Equal(t, "accepted per 2 s", h, audit.Histogram{From: At(0), Width: 2 * time.Second, Counts: []int{3, 1, 0, 0, 1}})
	if h.Total() != 5 {
		t.Errorf("Total = %d, want 5", h.Total())
	}
	if from, to := h.Bin(4); !from.Equal(At(8)) || !to.Equal(At(10)) {
		t.Errorf("Bin(4) = %v..%v, want %v..%v", from, to, At(8), At(10))
	}
	Equal(t, "rejected per 2 s", counts(audit.WriteRejected, window).Counts, []int{0, 0, 1, 0, 0})

	// The newest Limit are counted; one fewer than match says "at least".
	for _, c := range []struct {
		limit   int
		want    []int
		atLeast bool
	}{{3, []int{1, 1, 0, 0, 1}, true}, {4, []int{2, 1, 0, 0, 1}, true}, {5, []int{3, 1, 0, 0, 1}, false}, {0, []int{3, 1, 0, 0, 1}, false}} {
		f := window
		f.Limit = c.limit
		h := counts(audit.WriteAccepted, f)
		if !slices.Equal(h.Counts, c.want) || h.AtLeast != c.atLeast {
			t.Errorf("limit %d: counts %v at least %v, want %v at least %v", c.limit, h.Counts, h.AtLeast, c.want, c.atLeast)
		}
	}

	// A width that does not divide the window rounds up; the end still
	// lands in the last bin.
	h = counts(audit.WriteAccepted, audit.BinFilter{From: At(0), To: At(10), Bins: 3})
	Equal(t, "accepted in thirds", h.Counts, []int{4, 0, 1})
	if h.Width != 3333333334*time.Nanosecond {
		t.Errorf("width of thirds of 10 s = %v, want 3.333333334s", h.Width)
	}
	// A window of one instant is one bin.
	Equal(t, "one instant", counts(audit.WriteAccepted, audit.BinFilter{From: At(1), To: At(1), Bins: 4}).Counts, []int{2, 0, 0, 0})

	for _, c := range []struct {
		outcome audit.WriteOutcome
		f       audit.BinFilter
		field   string
	}{
		{audit.WriteAccepted, audit.BinFilter{From: At(0), To: At(10)}, "bins"},
		{audit.WriteAccepted, audit.BinFilter{From: At(0), To: At(10), Bins: audit.MaxListLimit + 1}, "bins"},
		{audit.WriteAccepted, audit.BinFilter{From: At(10), To: At(0), Bins: 5}, "to"},
		{audit.WriteAccepted, audit.BinFilter{To: At(10), Bins: 5}, "from"},
		{"maybe", window, "outcome"},
	} {
		_, err := s.WriteCounts(ctx, id, c.outcome, c.f)
		if audit.ErrorCode(err) != audit.EINVALID || !strings.HasPrefix(audit.ErrorMessage(err), c.field) {
			t.Errorf("WriteCounts(%s, %+v) err = %v, want EINVALID naming %s", c.outcome, c.f, err, c.field)
		}
	}
	if _, err := s.WriteCounts(ctx, 999, audit.WriteAccepted, window); audit.ErrorCode(err) != audit.ENOTFOUND {
		t.Errorf("WriteCounts(missing lock) err = %v, want ENOTFOUND", err)
	}
}

// WriteCounts agrees with binning every write's time in Go.
func testWriteCountsMatchesBinningTimes(t *testing.T, harness Harness) {
	s := harness.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	rng := rand.New(rand.NewPCG(1, 2))
	from, to := At(0), At(0).Add(time.Hour)
	var (
		b     audit.Batch
		times []time.Time
	)
	for range 5000 {
		ts := from.Add(time.Duration(rng.Int64N(int64(time.Hour + time.Minute))))
		b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventWriteRejected, At: ts})
		if !ts.After(to) {
			times = append(times, ts)
		}
	}
	Apply(t, s, b)
	id := LockByKey(t, s, key).ID
	for _, bins := range []int{1, 7, 85, 1000} {
		h, err := s.WriteCounts(ctx, id, audit.WriteRejected, audit.BinFilter{From: from, To: to, Bins: bins})
		if err != nil {
			t.Fatal(err)
		}
		want := make([]int, bins)
		for _, ts := range times {
			want[min(bins-1, int(ts.Sub(from)/h.Width))]++
		}
		Equal(t, fmt.Sprintf("%d bins", bins), h.Counts, want)
	}
}

func testFindingsBySourceOverlapAndCursor(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	a := audit.LockKey{Source: "etcd", Name: "a"}
	k := audit.LockKey{Source: "k8s", Name: "ns/b"}
	Apply(t, s, audit.Batch{Findings: []audit.Finding{
		{Lock: a, Kind: audit.FindingOverlap, At: At(10), Until: At(30), Summary: "long"},
		{Lock: a, Kind: audit.FindingStaleWrite, At: At(20), Summary: "instant"},
		{Lock: k, Kind: audit.FindingLateRenewal, At: At(20), Summary: "k8s"},
		{Lock: a, Kind: audit.FindingLeaseExpired, At: At(40), Summary: "late"},
	}})
	sums := func(f audit.FindingFilter) []string {
		t.Helper()
		got, err := s.Findings(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range got {
			out = append(out, f.Summary)
		}
		return out
	}
	Equal(t, "source", sums(audit.FindingFilter{Source: "k8s"}), []string{"k8s"})
	window := audit.TimeFilter{From: At(25), To: At(35)}
	Equal(t, "starting in window", sums(audit.FindingFilter{TimeFilter: window}), []string(nil))
	Equal(t, "overlapping window", sums(audit.FindingFilter{TimeFilter: window, Overlapping: true}), []string{"long"})

	idA := LockByKey(t, s, a).ID
	Equal(t, "overlapping window of one lock", sums(audit.FindingFilter{LockID: idA, TimeFilter: window, Overlapping: true}), []string{"long"})
	Equal(t, "overlapping a window of one lock from before it", sums(audit.FindingFilter{LockID: idA, Overlapping: true,
		TimeFilter: audit.TimeFilter{From: At(15), To: At(20)}}), []string{"long", "instant"})
	Equal(t, "overlapping a window of one lock, the newest 2", sums(audit.FindingFilter{LockID: idA, Overlapping: true,
		TimeFilter: audit.TimeFilter{From: At(15), To: At(45), Limit: 2}}), []string{"instant", "late"})
	Equal(t, "overlapping a window of one lock, from before it, the newest 1", sums(audit.FindingFilter{LockID: idA, Overlapping: true,
		TimeFilter: audit.TimeFilter{From: At(25), To: At(45), Limit: 1}}), []string{"late"})
	Equal(t, "overlapping a window of one lock only from before it", sums(audit.FindingFilter{LockID: idA, Overlapping: true,
		TimeFilter: audit.TimeFilter{From: At(25), To: At(35), Limit: 1}}), []string{"long"})

	all, _ := s.Findings(ctx, audit.FindingFilter{})
	third := all[2] // k8s at 20, after "instant" at 20
	Equal(t, "before cursor", sums(audit.FindingFilter{Before: audit.EventCursor{At: third.At, ID: third.ID}}), []string{"long", "instant"})

	counts, err := s.FindingCounts(ctx, audit.FindingCountFilter{TimeFilter: audit.TimeFilter{From: At(15)}})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "counts since 15s", counts, map[audit.Severity]int{audit.SeverityInfo: 1, audit.SeverityWarning: 2})
}

// A node's heartbeat lease running out is recorded like any lease expiry;
// the class filter, on the lock's class, is how the default views leave it
// out of the findings list and counts.
func testFindingsByLockClass(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	orders := heldLock("k8s", "ns/orders", "a", 1, 0)
	node := heldLock("k8s", "kube-node-lease/node-1", "node-1", 0, 0)
	node.Lock.Class = audit.ClassHeartbeat
	Apply(t, s, audit.Batch{
		Locks: []audit.TrackState{orders, node},
		Findings: []audit.Finding{
			{Lock: orders.Lock.Key(), Kind: audit.FindingLateRenewal, At: At(10), Summary: "orders late"},
			{Lock: node.Lock.Key(), Kind: audit.FindingLeaseExpired, At: At(20), Summary: "node-1 expired"},
			{Lock: node.Lock.Key(), Kind: audit.FindingLateRenewal, At: At(30), Summary: "node-1 late"},
			{Lock: orders.Lock.Key(), Kind: audit.FindingOverlap, At: At(40), Summary: "orders overlap"},
		},
	})
	sums := func(f audit.FindingFilter) []string {
		t.Helper()
		got, err := s.Findings(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range got {
			out = append(out, f.Summary)
		}
		return out
	}
	lock, hb := audit.ClassLock, audit.ClassHeartbeat
	Equal(t, "class lock", sums(audit.FindingFilter{Class: lock}), []string{"orders late", "orders overlap"})
	Equal(t, "class heartbeat", sums(audit.FindingFilter{Class: hb}), []string{"node-1 expired", "node-1 late"})
	Equal(t, "every class", sums(audit.FindingFilter{}), []string{"orders late", "node-1 expired", "node-1 late", "orders overlap"})
	Equal(t, "class lock, newest 1", sums(audit.FindingFilter{Class: lock, TimeFilter: audit.TimeFilter{Limit: 1}}), []string{"orders overlap"})
	Equal(t, "class heartbeat, one kind", sums(audit.FindingFilter{Class: hb, Kind: audit.FindingLeaseExpired}), []string{"node-1 expired"})
	Equal(t, "class lock, source", sums(audit.FindingFilter{Class: lock, Source: "k8s", TimeFilter: audit.TimeFilter{From: At(15)}}), []string{"orders overlap"})

	counts := func(class audit.Class) map[audit.Severity]int {
		t.Helper()
		got, err := s.FindingCounts(ctx, audit.FindingCountFilter{Class: class, TimeFilter: audit.TimeFilter{From: At(5), To: At(35)}})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	Equal(t, "counts of locks", counts(lock), map[audit.Severity]int{audit.SeverityWarning: 1})
	Equal(t, "counts of heartbeats", counts(hb), map[audit.Severity]int{audit.SeverityWarning: 2})
	Equal(t, "counts of every class", counts(""), map[audit.Severity]int{audit.SeverityWarning: 3})

	// A finding stored before its lock's row (the lock named by a finding
	// alone) is counted as a lock's until the row says heartbeat; a lock
	// whose class changes later (heartbeat_namespaces edited) takes its
	// findings along.
	node2 := heldLock("k8s", "kube-node-lease/node-2", "node-2", 0, 0)
	node2.Lock.Class = audit.ClassHeartbeat
	Apply(t, s, audit.Batch{Findings: []audit.Finding{{Lock: node2.Lock.Key(), Kind: audit.FindingLateRenewal, At: At(25), Summary: "node-2 late"}}})
	Equal(t, "counts of locks, node-2's row not yet stored", counts(lock), map[audit.Severity]int{audit.SeverityWarning: 2})
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{node2}})
	Equal(t, "counts of locks, node-2 a heartbeat", counts(lock), map[audit.Severity]int{audit.SeverityWarning: 1})
	Equal(t, "counts of heartbeats, node-2 a heartbeat", counts(hb), map[audit.Severity]int{audit.SeverityWarning: 3})
	node.Lock.Class = audit.ClassLock
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{node}})
	Equal(t, "counts of heartbeats, node-1 a lock", counts(hb), map[audit.Severity]int{audit.SeverityWarning: 1})
	Equal(t, "class lock, node-1 a lock", sums(audit.FindingFilter{Class: lock}), []string{"orders late", "node-1 expired", "node-1 late", "orders overlap"})
	Equal(t, "class heartbeat, node-1 a lock", sums(audit.FindingFilter{Class: hb}), []string{"node-2 late"})
}

func testBlindWindowsOnePerSourceInterval(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	detail := map[string]any{"from": At(10).Format(time.RFC3339Nano), "to": At(70).Format(time.RFC3339Nano), "reason": "etcd compaction"}
	var b audit.Batch
	for _, name := range []string{"a", "b", "c"} {
		key := audit.LockKey{Source: "etcd", Name: name}
		b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventBlind, At: At(70), Detail: detail})
		b.Findings = append(b.Findings, audit.Finding{Lock: key, Kind: audit.FindingBlindWindow, At: At(10), Until: At(70)})
	}
	Apply(t, s, b)
	Apply(t, s, audit.Batch{Findings: []audit.Finding{
		{Lock: audit.LockKey{Source: "k8s", Name: "x"}, Kind: audit.FindingBlindWindow, At: At(100), Until: At(110)},
	}})
	got, err := s.BlindWindows(ctx, audit.BlindFilter{})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "blind windows", got, []audit.BlindWindow{
		{Source: "etcd", From: At(10), To: At(70), Reason: "etcd compaction", Locks: 3},
		{Source: "k8s", From: At(100), To: At(110), Locks: 1},
	})
	got, _ = s.BlindWindows(ctx, audit.BlindFilter{Source: "etcd", TimeFilter: audit.TimeFilter{From: At(80)}})
	Equal(t, "etcd after 80s", got, []audit.BlindWindow(nil))

	last, err := s.LastEventAt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "last event", last, map[string]time.Time{"etcd": At(70)})
}

func testCursors(t *testing.T, h Harness) {
	s := h.Open(t)
	Apply(t, s, audit.Batch{Cursors: []audit.Cursor{{Source: "b", Position: "9", At: At(3)}, {Source: "a", Position: "7", At: At(1)}}})
	got, err := s.Cursors(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "cursors", got, []audit.Cursor{{Source: "a", Position: "7", At: At(1)}, {Source: "b", Position: "9", At: At(3)}})
}

// WriteStats totals a window's writes per resource, both ends inclusive,
// leaving out other kinds, other locks and writes outside the window.
func testWriteStats(t *testing.T, harness Harness) {
	s := harness.Open(t)
	ctx := context.Background()
	key, other := audit.LockKey{Source: "src", Name: "orders"}, audit.LockKey{Source: "src", Name: "billing"}
	write := func(k audit.LockKey, kind audit.EventKind, resource string, sec int) audit.Event {
		return audit.Event{Lock: k, Kind: kind, Resource: resource, At: At(sec), Token: audit.Int64(1)}
	}
	Apply(t, s, audit.Batch{Events: []audit.Event{
		write(key, audit.EventWriteAccepted, "db", -1),
		write(key, audit.EventWriteAccepted, "db", 0),
		write(key, audit.EventWriteAccepted, "db", 2),
		write(key, audit.EventWriteRejected, "db", 5),
		write(key, audit.EventWriteRejected, "cache", 3),
		write(key, audit.EventWriteAccepted, "cache", 10),
		write(key, audit.EventWriteAccepted, "cache", 11),
		{Lock: key, Kind: audit.EventWriteAccepted, Resource: "cache", At: At(9)},
		write(other, audit.EventWriteAccepted, "db", 4),
		{Lock: key, Kind: audit.EventGrant, At: At(1), Token: audit.Int64(1)},
		{Lock: key, Kind: audit.EventRenew, At: At(4)},
	}})
	id := LockByKey(t, s, key).ID

	got, err := s.WriteStats(ctx, id, audit.TimeFilter{From: At(0), To: At(10)})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "writes per resource in the window", got, []audit.ResourceWrites{
		{Resource: "cache", Accepted: 2, Untokened: 1, Rejected: 1, LastAt: At(10)},
		{Resource: "db", Accepted: 2, Rejected: 1, LastAt: At(5)},
	})
	got, err = s.WriteStats(ctx, id, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "writes per resource over all time", got, []audit.ResourceWrites{
		{Resource: "cache", Accepted: 3, Untokened: 1, Rejected: 1, LastAt: At(11)},
		{Resource: "db", Accepted: 3, Rejected: 1, LastAt: At(5)},
	})
	got, err = s.WriteStats(ctx, id, audit.TimeFilter{From: At(20)})
	if err != nil || len(got) != 0 {
		t.Errorf("WriteStats(after every write) = %v, %v; want none", got, err)
	}
	if _, err := s.WriteStats(ctx, 999, audit.TimeFilter{}); audit.ErrorCode(err) != audit.ENOTFOUND {
		t.Errorf("WriteStats(missing lock) err = %v, want ENOTFOUND", err)
	}
}
