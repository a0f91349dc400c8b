package review_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/review"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// t0 is the start of the known incident's window.
var t0 = time.Date(2026, 3, 14, 10, 0, 0, 0, time.UTC)

// at returns t0 plus a duration written like "2m3.4s".
func at(d string) time.Time {
	v, err := time.ParseDuration(d)
	if err != nil {
		panic(err)
	}
	return t0.Add(v)
}

const (
	source = "prod-etcd"
	lock   = "/locks/orders"
	// A holder name as hostile as a backend can make it.
	hostile = "worker|3 <b>[x](http://e/)`\n# h"
)

var ordersKey = audit.LockKey{Source: source, Name: lock}

// incident records the known incident through the real recorder into a
// SQLite store:
//
//   - worker-1 holds token 41, renews once, then stops renewing; its lease
//     expires and, 1.4 s later, worker-2 takes token 42. The ledger learns
//     token 42 180 ms after the grant; worker-1 wakes 3.1 s after the expiry
//     and writes with token 41: the ledger rejects it, the cache accepts it.
//   - worker-2's lease is still valid for 500 ms when a hostile-named holder
//     is granted token 43 (overlap).
//   - that holder releases; worker-1 takes token 44 at the same moment.
//   - the collector goes blind for 10 s; afterwards worker-2 holds token 46,
//     so worker-1's expiry and worker-2's grant are inferred.
func incident(t *testing.T) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	st, rec := recorder(t)
	defer rec.Close()

	observe := func(kind audit.EventKind, when, holder string, token int64, lease time.Duration, inferred bool) {
		t.Helper()
		in := audit.Input{Source: source, Kind: audit.KindEtcd, Observations: []audit.Observation{{
			Lock: ordersKey, Kind: kind, At: at(when), Holder: holder, Token: audit.Int64(token),
			LeaseDuration: lease, Inferred: inferred,
		}}}
		if err := rec.Record(ctx, in); err != nil {
			t.Fatalf("observe %s %s: %v", kind, when, err)
		}
	}
	write := func(when, resource, holder string, token int64, outcome audit.WriteOutcome) {
		t.Helper()
		w := audit.WriteReport{Source: source, Lock: lock, Resource: resource, Token: audit.Int64(token), Outcome: outcome, Holder: holder, At: at(when)}
		if resource == "ledger" {
			w.HighestToken = audit.Int64(max(token, 42))
		}
		if err := rec.ReportWrites(ctx, []audit.WriteReport{w}); err != nil {
			t.Fatalf("write %s: %v", when, err)
		}
	}

	observe(audit.EventGrant, "2m0.5s", "worker-1", 41, 2*time.Second, false)
	write("2m0.6s", "ledger", "worker-1", 41, audit.WriteAccepted)
	observe(audit.EventRenew, "2m1s", "worker-1", 41, 2*time.Second, false)
	observe(audit.EventExpire, "2m3s", "worker-1", 41, 0, false)
	observe(audit.EventGrant, "2m4.4s", "worker-2", 42, 2*time.Second, false)
	write("2m4.58s", "ledger", "worker-2", 42, audit.WriteAccepted)
	observe(audit.EventRenew, "2m5s", "worker-2", 42, 2*time.Second, false)
	write("2m6.1s", "ledger", "worker-1", 41, audit.WriteRejected)
	write("2m6.15s", "cache", "worker-1", 41, audit.WriteAccepted)
	observe(audit.EventGrant, "2m6.5s", hostile, 43, 5*time.Second, false)
	write("2m6.9s", "ledger", hostile, 43, audit.WriteAccepted)
	observe(audit.EventRelease, "2m20s", hostile, 43, 0, false)
	observe(audit.EventGrant, "2m20s", "worker-1", 44, 5*time.Second, false)
	write("2m21s", "ledger", "worker-1", 44, audit.WriteAccepted)

	blind := audit.Input{Source: source, Kind: audit.KindEtcd, Snapshot: true, Blind: &audit.Blind{From: at("2m30s"), To: at("2m40s"), Reason: "etcd compaction"},
		Observations: []audit.Observation{{Lock: ordersKey, Kind: audit.EventGrant, At: at("2m40s"), Holder: "worker-2", Token: audit.Int64(46), LeaseDuration: 5 * time.Second, Inferred: true}}}
	if err := rec.Record(ctx, blind); err != nil {
		t.Fatalf("observe blind window: %v", err)
	}
	// Outside the window: a grant after it.
	observe(audit.EventGrant, "6m", "worker-3", 47, 5*time.Second, false)
	return st
}

// recorder opens a store in a test's folder and starts a recorder of the etcd
// source into it, with its clock at t0. The caller closes the recorder; the
// store closes when the test ends.
func recorder(t *testing.T) (*sqlite.Store, *audit.Recorder) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lw.db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	rec := audit.NewRecorder(st, audit.TrackerConfig{SourceKinds: map[string]audit.SourceKind{source: audit.KindEtcd}}, nil,
		audit.WithClock(func() time.Time { return t0 }), audit.WithTickInterval(time.Hour))
	if err := rec.Start(ctx); err != nil {
		t.Fatalf("start recorder: %v", err)
	}
	return st, rec
}

func window() review.Window { return review.Window{From: t0, To: at("5m")} }

func load(t *testing.T, st audit.Store, q review.Query) review.Report {
	t.Helper()
	r, err := review.Load(context.Background(), st, q)
	if err != nil {
		t.Fatalf("load report: %v", err)
	}
	return r
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestKnownIncident(t *testing.T) {
	st := incident(t)
	r := load(t, st, review.Query{Window: window(), Locks: []string{"prod-etcd//locks/orders"}})

	t.Run("Handovers", func(t *testing.T) {
		if len(r.Locks) != 1 {
			t.Fatalf("locks = %d, want 1", len(r.Locks))
		}
		hs := r.Locks[0].Handovers
		type want struct {
			prev, next  int64
			end         audit.EndReason
			endInferred bool
			gap         time.Duration
			overlap     time.Duration
			writes      int
		}
		wants := []want{
			{41, 42, audit.EndExpired, false, 1400 * time.Millisecond, 0, 3},
			{42, 43, audit.EndSuperseded, false, -500 * time.Millisecond, 500 * time.Millisecond, 1},
			{43, 44, audit.EndReleased, false, 0, 0, 1},
			{44, 46, audit.EndExpired, true, 0, 0, 0},
		}
		if len(hs) != len(wants) {
			t.Fatalf("handovers = %d, want %d", len(hs), len(wants))
		}
		for i, w := range wants {
			h := hs[i]
			if *h.Previous.Token != w.prev || *h.Next.Token != w.next {
				t.Errorf("handover %d: tokens %d → %d, want %d → %d", i+1, *h.Previous.Token, *h.Next.Token, w.prev, w.next)
			}
			if h.Previous.End != w.end || h.EndInferred != w.endInferred {
				t.Errorf("handover %d: end = %s (inferred %v), want %s (inferred %v)", i+1, h.Previous.End, h.EndInferred, w.end, w.endInferred)
			}
			if h.Gap != w.gap {
				t.Errorf("handover %d: gap = %s, want %s", i+1, h.Gap, w.gap)
			}
			var overlap time.Duration
			if h.Overlap != nil {
				overlap = h.Overlap.Duration()
			}
			if overlap != w.overlap {
				t.Errorf("handover %d: overlap = %s, want %s", i+1, overlap, w.overlap)
			}
			if len(h.Writes) != w.writes {
				t.Errorf("handover %d: %d writes, want %d: %+v", i+1, len(h.Writes), w.writes, h.Writes)
			}
		}
		if got := hs[0].Writes[1].Verdict; got != review.VerdictStale {
			t.Errorf("worker-1's late ledger write: verdict %q, want stale", got)
		}
		if got := hs[0].Writes[2].Verdict; got != review.VerdictUnfenced {
			t.Errorf("worker-1's late cache write: verdict %q, want unfenced", got)
		}
		if !hs[3].GrantInferred || len(hs[3].Blind) != 1 {
			t.Errorf("handover after the blind window: grant inferred %v, blind %v; want inferred and one blind window", hs[3].GrantInferred, hs[3].Blind)
		}
	})

	t.Run("Narrative", func(t *testing.T) {
		want := "At 10:02:03.000Z worker-1 (token 41) stopped renewing; its lease expired 2.0 s after the last renewal. " +
			"1.4 s later worker-2 took the lock with token 42. " +
			"The ledger learned token 42 180 ms after the grant; " +
			"a write with token 41 arrived 3.1 s after the expiry and was rejected by the ledger: fencing held; " +
			"a write with token 41 arrived 3.1 s after the expiry and was accepted by the cache: fencing did not protect it."
		if got := r.Locks[0].Handovers[0].Narrative; got != want {
			t.Errorf("narrative:\n got %s\nwant %s", got, want)
		}
	})

	t.Run("Markdown", func(t *testing.T) {
		var buf bytes.Buffer
		if err := review.WriteMarkdown(&buf, r); err != nil {
			t.Fatal(err)
		}
		golden(t, "incident.md", buf.Bytes())
		for _, line := range strings.Split(buf.String(), "\n") {
			if strings.Contains(line, "<b>") || strings.Contains(line, "](http") || strings.HasPrefix(line, "# h") {
				t.Errorf("hostile holder escaped its cell: %q", line)
			}
		}
	})

	t.Run("JSON", func(t *testing.T) {
		var buf bytes.Buffer
		if err := review.WriteJSON(&buf, r); err != nil {
			t.Fatal(err)
		}
		golden(t, "incident.json", buf.Bytes())
		var doc map[string]any
		if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
			t.Fatalf("report is not JSON: %v", err)
		}
	})
}

func TestLoadSelectsLocks(t *testing.T) {
	st := incident(t)
	ctx := context.Background()
	orders, err := st.LockByKey(ctx, ordersKey)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("ByID", func(t *testing.T) {
		r := load(t, st, review.Query{Window: window(), Locks: []string{"1"}})
		if len(r.Locks) != 1 || r.Locks[0].Lock.ID != orders.ID {
			t.Fatalf("locks = %+v, want lock %d", r.Locks, orders.ID)
		}
	})
	t.Run("EveryLockOfTheSource", func(t *testing.T) {
		r := load(t, st, review.Query{Window: window(), Sources: []string{source}})
		if len(r.Locks) != 1 || r.Handovers() != 4 {
			t.Fatalf("locks = %d, handovers = %d; want 1 and 4", len(r.Locks), r.Handovers())
		}
	})
	t.Run("OtherSourceIsEmpty", func(t *testing.T) {
		r := load(t, st, review.Query{Window: window(), Sources: []string{"elsewhere"}})
		if len(r.Locks) != 0 || r.Quiet != 0 {
			t.Fatalf("report = %+v, want no locks", r)
		}
	})
	t.Run("WindowAfterTheIncidentIsQuiet", func(t *testing.T) {
		r := load(t, st, review.Query{Window: review.Window{From: at("10m"), To: at("20m")}})
		if len(r.Locks) != 0 {
			t.Fatalf("report = %+v, want no handovers", r.Locks)
		}
	})
	t.Run("NarrowWindowKeepsThePreviousTenure", func(t *testing.T) {
		r := load(t, st, review.Query{Window: review.Window{From: at("2m6s"), To: at("2m7s")}, Locks: []string{"1"}})
		if r.Handovers() != 1 || *r.Locks[0].Handovers[0].Previous.Token != 42 {
			t.Fatalf("handovers = %+v, want only 42 → 43", r.Locks)
		}
	})
	t.Run("CapOnHandoversKeepsTheNewest", func(t *testing.T) {
		r := load(t, st, review.Query{Window: window(), Locks: []string{"1"}, Options: review.Options{MaxHandovers: 2}})
		l := r.Locks[0]
		// Four handovers in the window (41 → 42 → 43 → 44 → 46): the two
		// left out are counted.
		if len(l.Handovers) != 2 || *l.Handovers[0].Next.Token != 44 || l.Omitted != 2 {
			t.Fatalf("handovers = %d (first to token %d), omitted %d; want the newest 2 and 2 omitted",
				len(l.Handovers), *l.Handovers[0].Next.Token, l.Omitted)
		}
	})
	t.Run("TooManyLocks", func(t *testing.T) {
		_, err := review.Load(ctx, st, review.Query{Window: review.Window{From: t0, To: at("1h")}, MaxLocks: 0, Sources: nil,
			Options: review.Options{}, Locks: nil})
		if err != nil {
			t.Fatalf("one lock, default cap: %v", err)
		}
		_, err = review.Load(ctx, st, review.Query{Window: window(), MaxLocks: 1, Locks: []string{"1", "2"}})
		if audit.ErrorCode(err) != audit.EINVALID || !strings.Contains(err.Error(), "at most 1") {
			t.Fatalf("two named locks over a cap of 1: err = %v, want EINVALID naming the cap", err)
		}
	})
	t.Run("Errors", func(t *testing.T) {
		tests := []struct {
			name string
			q    review.Query
			code string
			msg  string
		}{
			{"MissingLock", review.Query{Window: window(), Locks: []string{"prod-etcd/nope"}}, audit.ENOTFOUND, "prod-etcd/nope"},
			{"MissingID", review.Query{Window: window(), Locks: []string{"99"}}, audit.ENOTFOUND, "99"},
			{"BadRef", review.Query{Window: window(), Locks: []string{"orders"}}, audit.EINVALID, "SOURCE/NAME"},
			{"NoFrom", review.Query{Window: review.Window{To: t0}}, audit.EINVALID, "from:"},
			{"Backwards", review.Query{Window: review.Window{From: at("1m"), To: t0}}, audit.EINVALID, "to:"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := review.Load(ctx, st, tt.q)
				if audit.ErrorCode(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("err = %v (%s), want %s mentioning %q", err, audit.ErrorCode(err), tt.code, tt.msg)
				}
			})
		}
	})
}

func TestTooManyLocksIsInvalid(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec := audit.NewRecorder(st, audit.TrackerConfig{}, nil)
	if err := rec.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	for i := range 3 {
		in := audit.Input{Source: "s", Kind: audit.KindEtcd, Observations: []audit.Observation{{
			Lock: audit.LockKey{Source: "s", Name: string(rune('a' + i))}, Kind: audit.EventGrant, At: at("1m"), Holder: "h", Token: audit.Int64(int64(i + 1)),
		}}}
		if err := rec.Record(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	_, err = review.Load(ctx, st, review.Query{Window: window(), MaxLocks: 2})
	if !review.IsTooManyLocks(err) || audit.ErrorCode(err) != audit.EINVALID || !strings.Contains(audit.ErrorMessage(err), "at most 2") {
		t.Fatalf("err = %v (code %s), want a too-many-locks error with code invalid", err, audit.ErrorCode(err))
	}
	r := load(t, st, review.Query{Window: window(), MaxLocks: 3})
	if r.Quiet != 3 || len(r.Locks) != 0 {
		t.Fatalf("three locks with one grant each: quiet = %d, locks = %d; want 3 quiet", r.Quiet, len(r.Locks))
	}
}

func TestEscapeMarkdown(t *testing.T) {
	tests := []struct{ in, want string }{
		{"worker-1", "worker-1"},
		{"/locks/orders", "/locks/orders"},
		{"a|b", `a\|b`},
		{"`code`", "\\`code\\`"},
		{"[x](http://e/)", `\[x\]\(http://e/\)`},
		{"<script>&", "&lt;script&gt;&amp;"},
		{"line\nbreak\r\n# heading", "line break  \\# heading"},
		{"*em* _em_ ~s~", `\*em\* \_em\_ \~s\~`},
		{`back\slash`, `back\\slash`},
		{"\"quoted\"", "&quot;quoted&quot;"},
		{"tab\there", "tab here"},
		{"sep\u2028x", "sep x"},
		{"esc\x1b[2J", `esc \[2J`},
		{"txt.exe\u202egnp.", "txt.exe gnp."},
		{"\u2066isolate\u2069", " isolate "},
	}
	for _, tt := range tests {
		if got := review.EscapeMarkdown(tt.in); got != tt.want {
			t.Errorf("EscapeMarkdown(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestHuman(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "under 1 ms"},
		{180 * time.Millisecond, "180 ms"},
		{2 * time.Second, "2.0 s"},
		{3100 * time.Millisecond, "3.1 s"},
		{14 * time.Second, "14 s"},
		{3*time.Minute + 5*time.Second, "3 min 5 s"},
		{time.Hour, "1 h"},
		{2*time.Hour + 10*time.Minute, "2 h 10 min"},
		{-1500 * time.Millisecond, "-1.5 s"},
	}
	for _, tt := range tests {
		if got := review.Human(tt.d); got != tt.want {
			t.Errorf("Human(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

// Build is pure: the same data gives the same report, and a tenure that is
// not the one right before a grant is never paired with it.
func TestBuildPairsOnlyConsecutiveTenures(t *testing.T) {
	l := audit.Lock{ID: 7, Source: "s", Name: "n"}
	ten := func(seq, token int64, granted, ended string, end audit.EndReason) audit.Tenure {
		tn := audit.Tenure{Seq: seq, Holder: "h" + string(rune('0'+seq)), Token: audit.Int64(token), GrantedAt: at(granted), End: end}
		if ended != "" {
			tn.EndedAt = at(ended)
		}
		return tn
	}
	data := []review.LockData{{Lock: l, Tenures: []audit.Tenure{
		ten(3, 30, "3m", "", ""),
		ten(1, 10, "1m", "1m30s", audit.EndReleased),
	}}}
	r := review.Build(window(), data, review.Options{})
	if len(r.Locks) != 0 || r.Quiet != 1 {
		t.Fatalf("tenures 1 and 3 paired: %+v", r.Locks)
	}
	data[0].Tenures = append(data[0].Tenures, ten(2, 20, "2m", "3m", audit.EndReleased))
	a := review.Build(window(), data, review.Options{})
	b := review.Build(window(), data, review.Options{})
	var ja, jb bytes.Buffer
	if err := review.WriteJSON(&ja, a); err != nil {
		t.Fatal(err)
	}
	if err := review.WriteJSON(&jb, b); err != nil {
		t.Fatal(err)
	}
	if a.Handovers() != 2 || !bytes.Equal(ja.Bytes(), jb.Bytes()) {
		t.Fatalf("handovers = %d, want 2, and the same report twice", a.Handovers())
	}
}

// failingStore fails one read: the verdict's (BlindWindows) or the
// handovers' (WriteEvents, or with a cache, WriteTicks).
type failingStore struct {
	audit.Store
	fail string
}

var errRead = errors.New("read failed")

func (s failingStore) BlindWindows(ctx context.Context, f audit.BlindFilter) ([]audit.BlindWindow, error) {
	if s.fail == "BlindWindows" {
		return nil, errRead
	}
	return s.Store.BlindWindows(ctx, f)
}

func (s failingStore) WriteEvents(ctx context.Context, lockID int64, outcome audit.WriteOutcome, f audit.EventFilter) ([]audit.WriteEvent, error) {
	if s.fail == "WriteEvents" {
		return nil, errRead
	}
	return s.Store.WriteEvents(ctx, lockID, outcome, f)
}

func (s failingStore) WriteTicks(ctx context.Context, lockID int64, outcome audit.WriteOutcome, f audit.TimeFilter) ([]audit.TickCount, error) {
	if s.fail == "WriteTicks" {
		return nil, errRead
	}
	return s.Store.WriteTicks(ctx, lockID, outcome, f)
}

// A failed read of a lock's verdict or of its handovers fails the report:
// none is shown without the other.
func TestLoadFailsWithEitherRead(t *testing.T) {
	st := incident(t)
	for _, fail := range []string{"BlindWindows", "WriteEvents", "WriteTicks"} {
		for _, cache := range []*review.WriteCache{nil, review.NewWriteCache(1000)} {
			if cache == nil && fail == "WriteTicks" {
				continue // read only through a cache
			}
			t.Run(fmt.Sprintf("%s/cache=%t", fail, cache != nil), func(t *testing.T) {
				q := review.Query{Window: window(), Cache: cache}
				r, err := review.Load(context.Background(), failingStore{Store: st, fail: fail}, q)
				if !errors.Is(err, errRead) {
					t.Fatalf("Load with %s failing = %+v, %v; want the read's error", fail, r, err)
				}
			})
		}
	}
	// The same store without a failure: the verdict comes with the
	// handovers.
	r := load(t, failingStore{Store: st}, review.Query{Window: window()})
	if len(r.Locks) == 0 || len(r.Locks[0].Handovers) == 0 || r.Locks[0].Verdict.Kind == "" {
		t.Fatalf("report = %+v, want a lock with handovers and its verdict", r.Locks)
	}
}
