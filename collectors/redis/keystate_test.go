package redis

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// hold is a hold of value id read at ms, with a TTL of ttl ms, read in 2ms.
func hold(id string, ms, ttl int) holding {
	return holding{ID: id, Holder: id, At: at(ms), TTL: time.Duration(ttl) * time.Millisecond, Lo: at(ms - 2 + ttl), Hi: at(ms + ttl)}
}

func evs(ms int, names ...string) []event {
	out := make([]event, len(names))
	for i, n := range names {
		out[i] = event{Name: n, At: at(ms)}
	}
	return out
}

// step is one round: events for lock:a, then a read (present h, or gone).
type step struct {
	events  []event
	present bool
	h       holding
	want    string // the changes, rendered by describe
}

func describe(chs []change) string {
	var parts []string
	for _, ch := range chs {
		who := ch.H.Holder
		if ch.H.Vanished {
			who = "?"
		}
		s := ""
		switch ch.Kind {
		case changeGrant:
			s = "grant " + who
		case changeRenew:
			s = "renew " + who
		case changeEnd:
			s = ch.Reason.String() + " " + who
		}
		if ch.H.Token != nil {
			s += fmt.Sprintf(" #%d", *ch.H.Token)
		}
		if ch.Inferred {
			s += " (inferred)"
		}
		if ch.Overtaken {
			s += " (overtaken)"
		}
		s += fmt.Sprintf(" @%d", ch.At.Sub(t0).Milliseconds())
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func TestInstanceStateStories(t *testing.T) {
	withToken := func(h holding, tok int64) holding { h.Token = int64p(tok); return h }
	withCount := func(h holding, n int64) holding { h.Count = n; return h }
	gone := func(ms int) holding { return holding{At: at(ms)} }
	tests := []struct {
		name  string
		steps []step
	}{
		{"RedsyncAcquireExtendUnlock", []step{
			// SET NX PX emits set, then expire: the read may run
			// between them.
			{evs(0, "set"), true, hold("A", 1, 8000), "grant A @1"},
			// The same SET's expire: no renewal.
			{evs(1, "expire"), true, hold("A", 3, 7998), ""},
			{evs(300, "expire"), true, hold("A", 301, 8000), "renew A @301"},
			{evs(500, "del"), false, gone(501), "released A @500"},
		}},
		{"ExpiredAndEvicted", []step{
			{evs(0, "set", "expire"), true, hold("A", 1, 100), "grant A @1"},
			{evs(110, "expired"), false, gone(111), "expired A @110"},
			{evs(200, "set"), true, hold("B", 201, 5000), "grant B @201"},
			{evs(300, "evicted"), false, gone(301), "evicted B @300"},
		}},
		{"ReadAheadOfTheDelEvent", []step{
			{evs(0, "set", "expire"), true, hold("A", 1, 8000), "grant A @1"},
			// A renewal's event, but by the read A had already
			// unlocked: the renewal counts, without a deadline.
			{evs(50, "expire"), false, gone(51), "renew A (overtaken) @50"},
			{evs(52, "del"), false, gone(53), "released A @51"},
		}},
		{"LockedAndUnlockedBeforeTheRead", []step{
			{evs(0, "set", "expire"), false, gone(1), "grant ? (inferred) @0"},
			{evs(2, "del"), false, gone(3), "released ? @1"},
		}},
		{"VanishedWithinOneBatch", []step{
			{append(evs(0, "set", "expire"), evs(1, "del")...), false, gone(1), "grant ? (inferred) @0, released ? @1"},
		}},
		{"DelThenNewHolderBeforeTheRead", []step{
			{evs(0, "set", "expire"), true, hold("A", 1, 8000), "grant A @1"},
			{evs(100, "del"), true, hold("B", 101, 8000), "released A @100, grant B @101"},
			// B's own set and expire arrive afterwards: nothing new.
			{evs(102, "set", "expire"), true, hold("B", 103, 7998), ""},
		}},
		{"ReleasedAndRetakenAheadOfTheEvents", []step{
			{evs(0, "set", "expire"), true, hold("A", 1, 8000), "grant A @1"},
			// A renewal's event, read after A unlocked and B locked.
			{evs(10, "expire"), true, hold("B", 11, 8000), "renew A (overtaken) @10"},
			// A's del arrives: A's end, then B's grant; B's own set is no overwrite.
			{evs(12, "del", "set", "expire"), true, hold("B", 13, 7998), "released A @11, grant B @11"},
			{evs(20, "del"), false, gone(21), "released B @20"},
		}},
		{"RedissonUnlockAndNextAcquireAheadOfTheEvents", []step{
			{evs(0, "hincrby", "expire"), true, withCount(hold("a:1", 1, 30000), 1), "grant a:1 @1"},
			// Re-entrant unlock's events, read after the last unlock and
			// b's acquire: hincrby is no new holder.
			{evs(10, "hincrby", "expire"), true, withCount(hold("b:7", 11, 30000), 1), ""},
			{evs(12, "hincrby", "del"), true, withCount(hold("b:7", 13, 30000), 1), "released a:1 @11, grant b:7 @11"},
			{evs(14, "hincrby", "expire"), true, withCount(hold("b:7", 15, 29998), 1), ""},
		}},
		{"OverwriteWithoutNX", []step{
			{evs(0, "set", "expire"), true, hold("A", 1, 8000), "grant A @1"},
			{evs(100, "set", "expire"), true, hold("B", 101, 8000), "grant B @101"},
		}},
		{"RedissonReentry", []step{
			{evs(0, "hset", "expire"), true, withCount(hold("u:1", 1, 30000), 1), "grant u:1 @1"},
			// Re-entry: count 2 and the watchdog lease set again. Not a grant.
			{evs(100, "hincrby", "expire"), true, withCount(hold("u:1", 101, 30000), 2), "renew u:1 @101"},
			// Re-entrant unlock: count 1, still held.
			{evs(200, "hincrby", "expire"), true, withCount(hold("u:1", 201, 30000), 1), "renew u:1 @201"},
			{evs(300, "hincrby", "del"), false, gone(301), "released u:1 @300"},
		}},
		{"FencedReentryKeepsTheGrantToken", []step{
			{evs(0, "set", "expire"), true, withToken(hold("A", 1, 8000), 5), "grant A #5 @1"},
			{evs(300, "expire"), true, withToken(hold("A", 301, 8000), 6), "renew A #5 @301"},
		}},
		{"ReadOvertakesTheNextRenewal", []step{
			{evs(0, "set", "expire"), true, hold("A", 1, 2000), "grant A @1"},
			// The read for the renewal at 500 ran after the one at 1000.
			{evs(500, "expire"), true, hold("A", 1001, 2000), "renew A @1001"},
			// So the read for the one at 1000 finds nothing new: it
			// still counts.
			{evs(1002, "expire"), true, hold("A", 1003, 1998), "renew A (overtaken) @1002"},
			{evs(1500, "expire"), true, hold("A", 1501, 2000), "renew A @1501"},
		}},
		{"ReadAfterTheFirstRenewalFindsOnlyTheSetsOwnExpire", []step{
			{evs(0, "set"), true, hold("A", 1, 2000), "grant A @1"},
			// The SET's own expire, read after the first renewal at 500:
			// that renewal's notification is still to come and counts it.
			{evs(2, "expire"), true, hold("A", 501, 2000), ""},
			{evs(502, "expire"), true, hold("A", 503, 1998), "renew A (overtaken) @502"},
			{evs(1000, "expire"), true, hold("A", 1001, 2000), "renew A @1001"},
		}},
		{"TwoRenewalsBeforeOneRead", []step{
			{evs(0, "set", "expire"), true, hold("A", 1, 2000), "grant A @1"},
			{append(evs(500, "expire"), evs(1000, "expire")...), true, hold("A", 1001, 2000), "renew A (overtaken) @500, renew A @1001"},
		}},
		{"RenewedThenReleasedBeforeTheRead", []step{
			{evs(0, "set", "expire"), true, hold("A", 1, 2000), "grant A @1"},
			{append(evs(500, "expire"), evs(600, "del")...), false, gone(601), "renew A (overtaken) @500, released A @600"},
		}},
		{"RenewalsBehindAReadThatFoundTheKeyGone", []step{
			{evs(0, "set", "expire"), true, hold("A", 1, 2000), "grant A @1"},
			// The collector lags: by the read, A's last renewals are
			// done and its lease has run out.
			{evs(500, "expire"), false, gone(3000), "renew A (overtaken) @500"},
			{evs(3001, "expire"), false, gone(3002), "renew A (overtaken) @3001"},
			{append(evs(3003, "expire"), evs(3004, "expired")...), false, gone(3005), "renew A (overtaken) @3003, expired A @3000"},
		}},
		{"SetXXByTheHolderRenews", []step{
			{evs(0, "set", "expire"), true, hold("A", 1, 2000), "grant A @1"},
			// SET k A XX PX 2000: set, then its expire.
			{evs(500, "set", "expire"), true, hold("A", 501, 2000), "renew A @501"},
			{evs(1000, "set"), true, hold("A", 1001, 2000), "renew A @1001"},
			// That SET's expire, in the next batch: nothing new.
			{evs(1002, "expire"), true, hold("A", 1003, 1998), ""},
		}},
		{"ExpiryShortened", []step{
			{evs(0, "set", "expire"), true, hold("A", 1, 8000), "grant A @1"},
			{evs(100, "expire"), true, hold("A", 101, 1000), "renew A @101"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newInstanceState()
			for i, st := range tt.steps {
				van := holding{Vanished: true}
				got := describe(s.applyEvents("lock:a", st.events, st.present, st.h, van))
				if got != st.want {
					t.Fatalf("step %d: changes = %q, want %q", i, got, st.want)
				}
			}
		})
	}
}

func TestEndEventThatNeverComes(t *testing.T) {
	s := newInstanceState()
	s.applyEvents("lock:a", evs(0, "set", "expire"), true, hold("A", 1, 8000), holding{})
	// Found gone, then B, but A's end event never arrives (say, FLUSHALL
	// and a new SET): both wait, until the stream has delivered everything
	// published before the read that found A gone.
	if got := describe(s.applyEvents("lock:a", evs(10, "expire"), false, holding{At: at(11)}, holding{})); got != "renew A (overtaken) @10" {
		t.Fatalf("changes = %q, want A's renewal alone", got)
	}
	if got := describe(s.applyEvents("lock:a", evs(20, "set", "expire"), true, hold("B", 21, 8000), holding{})); got != "" {
		t.Fatalf("changes = %q, want none yet", got)
	}
	if got := describe(s.resolvePending(at(11))); got != "" {
		t.Fatalf("resolvePending before the stream passed the read = %q, want nothing", got)
	}
	if got, want := describe(s.resolvePending(at(12))), "released A (inferred) @11, grant B @21"; got != want {
		t.Fatalf("resolvePending = %q, want %q", got, want)
	}
	if got := describe(s.applyEvents("lock:a", evs(30, "del"), false, holding{At: at(31)}, holding{})); got != "released B @30" {
		t.Fatalf("B's release = %q", got)
	}
}

func TestResolvePending(t *testing.T) {
	s := newInstanceState()
	s.applyEvents("lock:a", evs(0, "set", "expire"), true, hold("A", 1, 500), holding{})
	s.applyEvents("lock:b", evs(0, "set", "expire"), true, hold("B", 1, 8000), holding{})
	// Both found gone, no end event yet.
	s.applyEvents("lock:a", evs(599, "expire"), false, holding{At: at(600)}, holding{})
	s.applyEvents("lock:b", evs(599, "expire"), false, holding{At: at(600)}, holding{})
	// The stream lags: a PING sent before the reads is only now answered.
	// The end events may still be on their way, behind more renewals.
	if got := describe(s.resolvePending(at(590))); got != "" {
		t.Fatalf("resolved before the stream passed the reads: %q", got)
	}
	if got := describe(s.applyEvents("lock:a", evs(700, "expire"), false, holding{At: at(701)}, holding{})); got != "renew A (overtaken) @700" {
		t.Fatalf("a renewal queued ahead of the end event = %q, want it counted", got)
	}
	// Everything published before 602 has arrived, and no end event:
	// a's deadline had passed when it was found gone: expired; b's had not.
	if got, want := describe(s.resolvePending(at(602))), "expired A (inferred) @600, released B (inferred) @600"; got != want {
		t.Fatalf("resolvePending = %q, want %q", got, want)
	}
	if len(s.keys) != 0 {
		t.Fatalf("keys left after every hold ended: %v", s.keys)
	}
}

func TestReplaceKeepsGrantTokenAndWindow(t *testing.T) {
	s := newInstanceState()
	a := hold("A", 1, 8000)
	a.Token = int64p(3)
	s.applyEvents("lock:a", evs(0, "set"), true, a, holding{})
	s.applyEvents("lock:b", evs(0, "expire"), false, holding{}, holding{}) // nothing known: no pending
	scanA := hold("A", 1001, 7000)
	scanA.Token = int64p(9)
	s.replace(map[string]holding{"lock:a": scanA, "lock:c": hold("C", 1001, 100)})
	h, ok := s.holds()["lock:a"]
	if !ok || h.Token == nil || *h.Token != 3 {
		t.Fatalf("lock:a after replace = %+v, want the grant token 3", h)
	}
	if !h.Hi.Equal(a.Hi) && !h.Hi.Before(a.Hi) {
		t.Fatalf("window not narrowed: %v", h.Hi)
	}
	if _, ok := s.holds()["lock:c"]; !ok {
		t.Fatal("lock:c from the scan is missing")
	}
}

func TestDedupOverlappingPatterns(t *testing.T) {
	var d dedup
	const ch = "__keyspace@0__:lock:a"
	msgs := []struct {
		payload, pattern string
		dup              bool
	}{
		{"set", "lock:*", false},
		{"set", "lock:a*", true}, // the same event for the second pattern
		{"expire", "lock:*", false},
		{"expire", "lock:a*", true},
		{"expire", "lock:*", false}, // a second PEXPIRE
		{"expire", "lock:a*", true},
		{"del", "lock:a*", false},
	}
	for i, m := range msgs {
		if got := d.dup(ch, m.payload, m.pattern); got != m.dup {
			t.Fatalf("message %d (%s from %s): dup = %v, want %v", i, m.payload, m.pattern, got, m.dup)
		}
	}
}

// TestPeriodicScanLeavesRenewalsToNotifications: a periodic scan that runs
// after a renewal but before its notification is handled must not take the
// new deadline, or the read after the notification finds nothing new and
// the renewal counts only as overtaken, without its time and deadline.
func TestPeriodicScanLeavesRenewalsToNotifications(t *testing.T) {
	// keep: a page of a periodic pass; otherwise a whole scan (after a
	// blind window), which takes the deadlines it reads.
	for _, keep := range []bool{true, false} {
		s := newInstanceState()
		s.applyEvents("lock:a", evs(0, "set", "expire"), true, hold("A", 0, 2000), holding{})
		renewed := hold("A", 600, 2000) // extended at 600 ms
		if keep {
			s.reconcile(map[string]holding{"lock:a": renewed})
		} else {
			s.replace(map[string]holding{"lock:a": renewed})
		}
		got := describe(s.applyEvents("lock:a", evs(650, "expire"), true, hold("A", 700, 1900), holding{}))
		want := "renew A @700"
		if !keep {
			want = "renew A (overtaken) @650"
		}
		if got != want {
			t.Errorf("periodic %v: changes after the renewal's notification = %q, want %q", keep, got, want)
		}
	}
}

// TestPeriodicPassFindsKeysGoneWithoutAnEvent: at the end of a periodic pass,
// the keys it never found are gone (FLUSHALL emits nothing), unless a
// notification touched them after the pass began: SCAN need not return a
// key written after it passed the key's place.
func TestPeriodicPassFindsKeysGoneWithoutAnEvent(t *testing.T) {
	s := newInstanceState()
	s.replace(map[string]holding{"lock:b": hold("B", 0, 8000), "lock:c": hold("C", 0, 8000)})
	s.applyEvents("lock:a", evs(10, "set", "expire"), true, hold("A", 11, 8000), holding{})
	since := at(100)
	s.applyEvents("lock:d", evs(150, "set", "expire"), true, hold("D", 151, 8000), holding{})
	got := s.unseen(map[string]bool{"lock:a": true}, since)
	if want := []string{"lock:b", "lock:c"}; !slices.Equal(got, want) {
		t.Fatalf("unseen = %v, want %v", got, want)
	}

	// e was found gone and waits for the event that says how it ended.
	s.applyEvents("lock:e", evs(160, "set", "expire"), true, hold("E", 161, 8000), holding{})
	s.applyEvents("lock:e", evs(170, "expire"), false, holding{At: at(171)}, holding{})

	// A page's reads: c taken by another holder, d gone, e still gone,
	// a's deadline read after a renewal whose notification is still to
	// come.
	settled := s.reconcile(map[string]holding{"lock:a": hold("A", 600, 8000), "lock:c": hold("X", 600, 8000)})
	if want := []string{"lock:a", "lock:c"}; !slices.Equal(settled, want) {
		t.Errorf("settled = %v, want %v", settled, want)
	}
	for _, key := range []string{"lock:d", "lock:e"} {
		if got := describe(s.gone(key, at(600), passGone)); got != "" {
			t.Errorf("%s read gone: changes %q, want none until its end event", key, got)
		}
	}
	if got := describe(s.applyEvents("lock:e", evs(180, "del"), false, holding{At: at(181)}, holding{})); got != "released E @171" {
		t.Errorf("e's end event after the page = %q, want its release, found by the read before the page", got)
	}
	if got, want := describe(s.resolvePending(at(601))), "released D (inferred) @600"; got != want {
		t.Errorf("d, whose end event never comes = %q, want %q", got, want)
	}
	holds := s.holds()
	if a := holds["lock:a"]; !a.Hi.Equal(at(11 + 8000)) {
		t.Errorf("lock:a after the page = %+v, want the deadline it had (%v): the renewal is the stream's to report", a, at(11+8000))
	}
	if c := holds["lock:c"]; c.ID != "X" {
		t.Errorf("lock:c after the page = %+v, want X's hold", c)
	}
	if _, ok := holds["lock:d"]; ok {
		t.Errorf("lock:d still held after a page read it gone")
	}
}

// TestPassGoneLeavesBacklogToCount: a periodic pass that ends while
// notifications are still queued behind a backlog must not settle the keys
// it never found then and there. A renewed lock whose renewals are still
// queued, and which expired before the pass read its place, would lose
// those renewals: once its state is gone they are notifications about a key
// nobody holds. Found gone, it waits for its end event instead, counting the
// renewals that arrive first, and ends inferred, for the pass's reason, only
// once the stream has delivered everything published before the pass ended.
func TestPassGoneLeavesBacklogToCount(t *testing.T) {
	s := newInstanceState()
	s.applyEvents("lock:a", evs(0, "set", "expire"), true, hold("A", 1, 2000), holding{})
	s.applyEvents("lock:b", evs(0, "set", "expire"), true, hold("B", 1, 8000), holding{})
	since := at(100)
	unseen := s.unseen(map[string]bool{}, since)
	if want := []string{"lock:a", "lock:b"}; !slices.Equal(unseen, want) {
		t.Fatalf("unseen = %v, want %v", unseen, want)
	}
	for _, key := range unseen {
		if got := describe(s.gone(key, at(3000), passGone)); got != "" {
			t.Fatalf("%s found gone by the pass: changes %q, want none until its end event or the stream passes the pass", key, got)
		}
	}
	// The backlog: a's renewals at 500 and 1000 and its expiry; the reads
	// after them find it gone.
	if got, want := describe(s.applyEvents("lock:a", evs(3100, "expire", "expire"), false, holding{At: at(3101)}, holding{})),
		"renew A (overtaken) @3100, renew A (overtaken) @3100"; got != want {
		t.Fatalf("a's queued renewals = %q, want %q: both counted, ahead of the end", got, want)
	}
	end := s.applyEvents("lock:a", evs(3200, "expired"), false, holding{At: at(3201)}, holding{})
	if got, want := describe(end), "expired A @3000"; got != want || end[0].Why != "" {
		t.Fatalf("a's end event = %q (why %q), want %q, which its event explains", got, end[0].Why, want)
	}
	// b's end event never comes (FLUSHALL): it ends once the stream has
	// passed the pass, for the pass's reason.
	if got := describe(s.resolvePending(at(2999))); got != "" {
		t.Fatalf("resolvePending before the stream passed the pass = %q", got)
	}
	got := s.resolvePending(at(3001))
	if want := "released B (inferred) @3000"; describe(got) != want || got[0].Why != passGone {
		t.Fatalf("resolvePending = %q (why %q), want %q for %q", describe(got), got[0].Why, want, passGone)
	}
	if len(s.keys) != 0 {
		t.Fatalf("keys left after every hold ended: %v", s.keys)
	}
}
