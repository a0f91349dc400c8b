package storetest

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/storecopy"
)

// The renewal log (Harness.Log): a store that writes a commit's renewals
// as a few log rows instead of a row each reads them back exactly, with
// ids of their own (logIDBase and up, below a run's), replays those after
// the sync marks, and seals and prunes them as it does rows: as the commit
// rows it writes and as the rows of the locks' buckets it folds the synced
// ones into (Harness.Rebucket).

// logIDBase is the lowest id of a logged renewal.
const logIDBase = int64(1) << 51

// logCases run only for a store with a log.
var logCases = []struct {
	name string
	run  func(*testing.T, Harness)
}{
	{"LogRoundTripsEveryField", func(t *testing.T, h Harness) { testLogRoundTripsEveryField(t, h, false) }},
	{"LogRebucketedRoundTripsEveryField", func(t *testing.T, h Harness) { testLogRoundTripsEveryField(t, h, true) }},
	{"LogUnsyncedAfterACrash", testLogUnsyncedAfterACrash},
	{"LogUnsyncedAfterARebucketingAndACrash", testLogUnsyncedAfterARebucketingAndACrash},
	{"LogTakeoverRestoresTheSource", testLogTakeoverRestoresTheSource},
	{"LogPagesAcrossLogRunsAndRows", testLogPagesAcrossLogRunsAndRows},
	{"LogPagesAcrossARebucketing", testLogPagesAcrossARebucketing},
	{"LogRetentionPrunesAndSummarises", func(t *testing.T, h Harness) { testLogRetentionPrunesAndSummarises(t, h, false) }},
	{"LogRetentionOfRebucketedRows", func(t *testing.T, h Harness) { testLogRetentionPrunesAndSummarises(t, h, true) }},
	{"LogSealsIntoRuns", func(t *testing.T, h Harness) { testLogSealsIntoRuns(t, h, false) }},
	{"LogSealsRebucketedRows", func(t *testing.T, h Harness) { testLogSealsIntoRuns(t, h, true) }},
	{"LogCopiesCommitAndBucketRows", testLogCopiesCommitAndBucketRows},
}

// logStory stores two locks' renewals: a node lease's (backend times to
// the µs, margins, decimal positions), and one renewed without backend
// times, with hex positions and a detail of its own, a renewal of which
// the log cannot keep (a position not canonical) among them. It returns
// the renewals as stored, each lock's in time order.
func logStory(t *testing.T, s Store, start time.Time, synced bool) (node, other []audit.Event) {
	t.Helper()
	nodeKey := audit.LockKey{Source: "cluster-a", Name: "kube-node-lease/node-1"}
	otherKey := audit.LockKey{Source: "cache", Name: "lock:jobs"}
	nodeTen := nodeLease(nodeKey, 1, "node-1", 6, start.Add(-time.Second))
	otherTen := audit.Tenure{Lock: otherKey, Seq: 2, Holder: "w-3", Token: audit.Int64(9), GrantedAt: start.Add(-time.Second),
		LeaseDuration: 15 * time.Second}
	node = nodeRenewals(nodeTen, start, 30)
	for i := range 30 {
		e := audit.Event{Lock: otherKey, Kind: audit.EventRenew, At: start.Add(time.Duration(i)*5*time.Second + 123457),
			Holder: "w-3", Token: audit.Int64(9), TTL: 15 * time.Second, Position: "0x" + strconv.FormatInt(int64(4096+37*i), 16),
			Seq: 2, Detail: map[string]any{"client": "jobs-7"}}
		if i == 17 {
			e.Position = "007" // a row
		}
		other = append(other, e)
	}
	// Stored in commits of a few, the two locks interleaved, as the
	// recorder's group commits store them.
	Apply(t, s, audit.Batch{Tenures: []audit.Tenure{nodeTen, otherTen}, Synced: synced})
	for i := 0; i < len(node); i += 5 {
		batch := slices.Concat(node[i:i+5], other[i:i+5])
		Apply(t, s, audit.Batch{Events: batch, Synced: synced})
	}
	return node, other
}

// withoutIDs is events with their ids cleared, and fails the test unless
// the logged ones (all but rows) have ids of the log, or of runs once
// sealed.
func withoutIDs(t *testing.T, events []audit.Event, sealed bool) []audit.Event {
	t.Helper()
	out := slices.Clone(events)
	for i, e := range out {
		logged := e.ID >= logIDBase && e.ID < runIDBase
		if sealed {
			logged = e.ID >= runIDBase
		}
		if !logged && e.Position != "007" {
			t.Errorf("renewal at %s has id %d, not one of the log's (sealed %v)", e.At, e.ID, sealed)
		}
		out[i].ID, out[i].LockID = 0, 0
	}
	return out
}

func testLogRoundTripsEveryField(t *testing.T, h Harness, rebucketed bool) {
	s := h.Open(t)
	node, other := logStory(t, s, runHour(0), true)
	if rebucketed {
		h.Rebucket(t, s)
	}
	for _, want := range [][]audit.Event{node, other} {
		id := LockByKey(t, s, want[0].Lock).ID
		got := allEvents(t, s, id, audit.EventFilter{})
		sameJSON(t, "logged renewals of "+want[0].Lock.String(), withoutIDs(t, got, false), want)
		ordered(t, "logged renewals", got)
		times, err := s.EventTimes(context.Background(), id, audit.EventRenew, audit.TimeFilter{})
		if err != nil {
			t.Fatalf("EventTimes: %v", err)
		}
		var wantTimes []time.Time
		for _, e := range want {
			wantTimes = append(wantTimes, e.At)
		}
		Equal(t, "renewal times of "+want[0].Lock.String(), times, wantTimes)
	}
}

// unsyncedAs returns the renewals of events in the order the journal
// replays them, by time.
func byTime(events ...[]audit.Event) []audit.Event {
	all := slices.Concat(events...)
	slices.SortStableFunc(all, func(a, b audit.Event) int { return a.At.Compare(b.At) })
	return all
}

func testLogUnsyncedAfterACrash(t *testing.T, h Harness) {
	s := h.Open(t)
	logStory(t, s, runHour(0), true)
	// Then commits acknowledged but not synced, and the process is killed.
	node, other := logStory(t, s, runHour(0).Add(10*time.Minute), false)
	s = h.Reopen(t, s)
	unsynced, err := s.Unsynced(context.Background())
	if err != nil {
		t.Fatalf("Unsynced: %v", err)
	}
	sameJSON(t, "renewals to replay after the restart", withoutIDs(t, unsynced, false), byTime(node, other))
}

// Renewals synced and folded into bucket rows are never replayed; those
// after the marks, in commit rows the fold leaves, are, once.
func testLogUnsyncedAfterARebucketingAndACrash(t *testing.T, h Harness) {
	s := h.Open(t)
	fences := []audit.Fence{{Source: "cache", Token: 1}, {Source: "cluster-a", Token: 1}}
	Apply(t, s, audit.Batch{Fences: fences})
	logStory(t, s, runHour(0), true)
	node, other := logStory(t, s, runHour(0).Add(10*time.Minute), false)
	h.Rebucket(t, s)
	s = h.Reopen(t, s)
	unsynced, err := s.Unsynced(context.Background())
	if err != nil {
		t.Fatalf("Unsynced: %v", err)
	}
	sameJSON(t, "renewals to replay after the restart", withoutIDs(t, unsynced, false), byTime(node, other))
	_, _, renewals, err := s.RestoreSource(context.Background(), "cluster-a")
	if err != nil {
		t.Fatalf("RestoreSource: %v", err)
	}
	sameJSON(t, "cluster-a's renewals to replay", withoutIDs(t, renewals, false), node)
}

func testLogTakeoverRestoresTheSource(t *testing.T, h Harness) {
	s := h.Open(t)
	fences := []audit.Fence{{Source: "cache", Token: 1}, {Source: "cluster-a", Token: 1}}
	Apply(t, s, audit.Batch{Fences: fences})
	logStory(t, s, runHour(0), false)
	// The replica that owns cluster-a syncs it; cache's renewals stay to
	// replay.
	Apply(t, s, audit.Batch{Fences: fences[1:], Synced: true, SyncSources: []string{"cluster-a"}})
	node, other := logStory(t, s, runHour(0).Add(10*time.Minute), false)
	_, _, renewals, err := s.RestoreSource(context.Background(), "cluster-a")
	if err != nil {
		t.Fatalf("RestoreSource: %v", err)
	}
	sameJSON(t, "cluster-a's renewals to replay", withoutIDs(t, renewals, false), node)
	_, _, renewals, err = s.RestoreSource(context.Background(), "cache")
	if err != nil {
		t.Fatalf("RestoreSource: %v", err)
	}
	if len(renewals) != 2*len(other) {
		t.Errorf("cache's renewals to replay: %d, want its %d of both stories", len(renewals), 2*len(other))
	}
}

func testLogPagesAcrossLogRunsAndRows(t *testing.T, h Harness) {
	s := h.Open(t)
	logStory(t, s, runHour(0), true)
	logStory(t, s, runHour(1).Add(-2*time.Minute), true) // a window closed, and the next
	if Seal(t, s, runHour(1)) == 0 {
		t.Fatal("nothing sealed")
	}
	for _, key := range []audit.LockKey{{Source: "cluster-a", Name: "kube-node-lease/node-1"}, {Source: "cache", Name: "lock:jobs"}} {
		id := LockByKey(t, s, key).ID
		all := allEvents(t, s, id, audit.EventFilter{})
		if len(all) != 60 {
			t.Fatalf("%s: %d renewals, want 60", key, len(all))
		}
		var paged []audit.Event
		before := audit.EventCursor{}
		for range 20 {
			page := allEvents(t, s, id, audit.EventFilter{TimeFilter: audit.TimeFilter{Limit: 7}, Before: before})
			paged = append(page, paged...)
			if len(page) < 7 {
				break
			}
			before = audit.EventCursor{At: page[0].At, ID: page[0].ID}
		}
		Equal(t, "renewals paged of "+key.String(), paged, all)
		kinds := map[string]int{}
		for _, e := range all {
			switch {
			case e.ID >= runIDBase:
				kinds["run"]++
			case e.ID >= logIDBase:
				kinds["log"]++
			default:
				kinds["row"]++
			}
		}
		if kinds["run"] == 0 || kinds["log"] == 0 || (key.Source == "cache" && kinds["row"] != 2) {
			t.Errorf("%s: renewals read from %v, want runs, the log and (cache) two rows", key, kinds)
		}
	}
}

// A read that pages through a lock's renewals while its commit rows are
// folded into bucket rows, which gives them other ids, reads each once:
// the cursor is by observed time first.
func testLogPagesAcrossARebucketing(t *testing.T, h Harness) {
	s := h.Open(t)
	node, _ := logStory(t, s, runHour(0), true)
	id := LockByKey(t, s, node[0].Lock).ID
	var paged []audit.Event
	before := audit.EventCursor{}
	for i := range 20 {
		if i == 2 {
			h.Rebucket(t, s)
		}
		page := allEvents(t, s, id, audit.EventFilter{TimeFilter: audit.TimeFilter{Limit: 7}, Before: before})
		paged = append(page, paged...)
		if len(page) < 7 {
			break
		}
		before = audit.EventCursor{At: page[0].At, ID: page[0].ID}
	}
	sameJSON(t, "renewals paged across a rebucketing", withoutIDs(t, paged, false), node)
}

func testLogRetentionPrunesAndSummarises(t *testing.T, h Harness, rebucketed bool) {
	s := h.Open(t)
	node, _ := logStory(t, s, runHour(0), true)
	if rebucketed {
		h.Rebucket(t, s)
	}
	cutoff := node[12].At.Add(-time.Millisecond)
	r := &audit.Retainer{Store: s, Retention: audit.Retention{Events: time.Hour}, Now: func() time.Time { return cutoff.Add(time.Hour) }}
	if err := r.Pass(context.Background()); err != nil {
		t.Fatalf("Pass: %v", err)
	}
	id := LockByKey(t, s, node[0].Lock).ID
	left := allEvents(t, s, id, audit.EventFilter{})
	sameJSON(t, "renewals left", withoutIDs(t, left, false), node[12:])
	tenures, err := s.Tenures(context.Background(), id, audit.TimeFilter{})
	if err != nil || len(tenures) != 1 {
		t.Fatalf("Tenures: %v, %v", tenures, err)
	}
	if p := tenures[0].Pruned; p == nil || p.Renewals != 12 || !p.First.Equal(node[0].At) || !p.Last.Equal(node[11].At) {
		t.Errorf("pruned renewals' summary = %+v, want the 12 from %s to %s", p, node[0].At, node[11].At)
	}
}

func testLogSealsIntoRuns(t *testing.T, h Harness, rebucketed bool) {
	s := h.Open(t)
	node, other := logStory(t, s, runHour(0), true)
	if rebucketed {
		h.Rebucket(t, s)
	}
	clockMovesOn(t, s, runHour(2))
	ids := map[audit.LockKey]int64{}
	before := map[audit.LockKey][]audit.Event{}
	for _, e := range []audit.Event{node[0], other[0]} {
		ids[e.Lock] = LockByKey(t, s, e.Lock).ID
		before[e.Lock] = allEvents(t, s, ids[e.Lock], audit.EventFilter{})
	}
	if n := Seal(t, s, runHour(1)); n != len(node)+len(other)-1 {
		t.Errorf("sealed %d renewals, want %d (all but the row)", n, len(node)+len(other)-1)
	}
	for key, id := range ids {
		got := allEvents(t, s, id, audit.EventFilter{})
		Equal(t, "renewals of "+key.String()+" once sealed", got, sealedAs(t, before[key], got))
	}
}

// A copy gives the target the renewals of bucket rows, synced whatever
// their ids, and of synced commit rows as runs, and those of commit rows
// after the marks as rows to replay: each renewal once.
func testLogCopiesCommitAndBucketRows(t *testing.T, h Harness) {
	src, dst := h.Open(t), h.Open(t)
	node, other := logStory(t, src, runHour(0), true)
	node2, other2 := logStory(t, src, runHour(0).Add(20*time.Minute), false)
	h.Rebucket(t, src) // bucket rows numbered after the marks
	copyAll(t, src, dst, storecopy.Options{})
	for _, key := range []audit.LockKey{node[0].Lock, other[0].Lock} {
		if n := len(allEvents(t, dst, LockByKey(t, dst, key).ID, audit.EventFilter{})); n != 2*len(node) {
			t.Errorf("%s: %d renewals copied, want %d", key, n, 2*len(node))
		}
	}
	unsynced, err := dst.Unsynced(context.Background())
	if err != nil {
		t.Fatalf("Unsynced: %v", err)
	}
	// A row (a renewal the log cannot keep) comes first in the target's
	// replay, which is by id; each renewal once is what counts.
	observed := func(events []audit.Event) []string {
		var out []string
		for _, e := range events {
			out = append(out, e.Lock.String()+" "+e.At.Format(time.RFC3339Nano))
		}
		slices.Sort(out)
		return out
	}
	Equal(t, "renewals the target replays", observed(unsynced), observed(slices.Concat(node2, other2)))
}

// sameJSON fails the test unless got and want read the same as JSON, as
// the API gives them: a detail's numbers read back as json.Number.
func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	if g, w := Show(got), Show(want); g != w {
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

// WriterFoldsSyncedCommitRows checks that s's writer writes its renewals
// as commit rows and folds them into bucket rows in a commit that finds
// fold of them synced, never unsynced ones, and that every renewal reads
// back once. logRows counts s's commit rows and bucket rows.
func WriterFoldsSyncedCommitRows(t *testing.T, s Store, fold int, logRows func() (commit, bucket int)) {
	t.Helper()
	start := runHour(0)
	var tenures []audit.Tenure
	for l := range 40 {
		key := audit.LockKey{Source: "cluster-a", Name: "kube-node-lease/node-" + strconv.Itoa(l)}
		tenures = append(tenures, nodeLease(key, 1, key.Name, 1, start))
	}
	Apply(t, s, audit.Batch{Tenures: tenures, Synced: true})
	commits := func(from, n int, synced bool) {
		for c := from; c < from+n; c++ {
			var events []audit.Event
			for _, ten := range tenures[c%4*10 : c%4*10+10] {
				events = append(events, nodeRenewals(ten, start.Add(time.Duration(c)*time.Second), 1)...)
			}
			Apply(t, s, audit.Batch{Events: events, Synced: synced})
		}
	}
	n := fold + 10
	commits(0, n, false)
	if commit, bucket := logRows(); commit != n || bucket != 0 {
		t.Fatalf("%d unsynced commits: %d commit rows and %d bucket rows, want %d and none", n, commit, bucket, n)
	}
	commits(n, 2, true) // the first marks them all synced, the second folds them
	if commit, bucket := logRows(); commit > 2 || bucket == 0 {
		t.Errorf("after a sync: %d commit rows and %d bucket rows, want the synced ones folded", commit, bucket)
	}
	for i, ten := range tenures {
		want := (n + 2 + 3 - i/10) / 4 // commits c with c%4 == i/10
		if got := len(allEvents(t, s, LockByKey(t, s, ten.Lock).ID, audit.EventFilter{})); got != want {
			t.Errorf("%s: %d renewals, want %d", ten.Lock, got, want)
		}
	}
}
