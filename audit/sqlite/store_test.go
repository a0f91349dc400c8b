package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/migrations"
)

// t0 is the base of every test's clock: nanoseconds included, so truncation
// would show.
var t0 = time.Date(2025, 3, 14, 9, 26, 53, 589793238, time.UTC)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func openStore(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leasewatch.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, path
}

func apply(t *testing.T, s *Store, b audit.Batch) {
	t.Helper()
	if err := s.Apply(context.Background(), b); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func lockByKey(t *testing.T, s *Store, key audit.LockKey) audit.Lock {
	t.Helper()
	l, err := s.LockByKey(context.Background(), key)
	if err != nil {
		t.Fatalf("LockByKey(%s): %v", key, err)
	}
	return l
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, show(got), show(want))
	}
}

// show renders v as JSON so pointers and times print as values.
func show(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

func heldLock(source, name, holder string, token int64, sec int) audit.TrackState {
	return audit.TrackState{
		Lock: audit.Lock{
			Source: source, Kind: audit.KindEtcd, Name: name, Class: audit.ClassLock, State: audit.StateHeld,
			Holder: holder, Token: audit.Int64(token), AcquiredAt: at(sec), RenewedAt: at(sec),
			ExpiresAt: at(sec + 10), LeaseDuration: 10 * time.Second, ChangedAt: at(sec),
		},
		NextSeq: 1,
	}
}

func TestOpenAppliesMigrationsOnceAcrossReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leasewatch.db")
	want, err := migrations.Load(migrations.SQLite)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}

	type applied struct {
		Version   int
		Name      string
		AppliedAt int64
	}
	read := func() []applied {
		t.Helper()
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer s.Close()
		rows, err := s.reader.QueryContext(ctx, `SELECT version, name, applied_at FROM schema_migrations ORDER BY version`)
		if err != nil {
			t.Fatalf("read schema_migrations: %v", err)
		}
		defer rows.Close()
		var got []applied
		for rows.Next() {
			var a applied
			if err := rows.Scan(&a.Version, &a.Name, &a.AppliedAt); err != nil {
				t.Fatalf("scan schema_migrations: %v", err)
			}
			got = append(got, a)
		}
		var mode string
		if err := s.reader.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
			t.Fatalf("journal_mode: %v", err)
		}
		if mode != "wal" {
			t.Errorf("journal_mode = %q, want wal", mode)
		}
		return got
	}

	first := read()
	if len(first) != len(want) {
		t.Fatalf("applied %d migrations, want %d", len(first), len(want))
	}
	for i, m := range want {
		if first[i].Version != m.Version || first[i].Name != m.Name || first[i].AppliedAt == 0 {
			t.Errorf("migration %d recorded as %+v, want version %d name %s with a time", i, first[i], m.Version, m.Name)
		}
	}
	second := read()
	equal(t, "schema_migrations after reopen", second, first)
}

func TestOpenRejectsPathsThatAreNotPlainFiles(t *testing.T) {
	for _, path := range []string{"", ":memory:", "file:x.db?mode=memory", filepath.Join(t.TempDir(), "a?b.db")} {
		if s, err := Open(context.Background(), path); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want an error", path)
		}
	}
}

func TestApplyRoundTripsEveryField(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "prod-etcd", Name: "/locks/ördérs <b>&amp;</b>"}

	st := audit.TrackState{
		Lock: audit.Lock{
			Source: key.Source, Kind: audit.KindKubernetes, Name: key.Name, Class: audit.ClassHeartbeat,
			State: audit.StateExpired, Holder: "wörker-1 <script>alert(1)</script>", Token: audit.Int64(42),
			AcquiredAt: at(1), RenewedAt: at(2), ExpiresAt: at(12), LeaseDuration: 10500 * time.Millisecond,
			ChangedAt: at(12),
		},
		NextSeq: 2,
	}
	ended := audit.Tenure{
		Lock: key, Seq: 1, Holder: "wörker-1 <script>alert(1)</script>", Token: audit.Int64(42),
		GrantedAt: at(1), Observed: true, Position: "rv-1234", Renewals: 7, LastRenewedAt: at(2),
		LeaseDuration: 10500 * time.Millisecond, ExpiresAt: at(12), EndedAt: at(12), End: audit.EndExpired,
	}
	held := audit.Tenure{Lock: key, Seq: 2, Holder: "unfenced"} // nil token, every time zero
	events := []audit.Event{
		{
			Lock: key, Kind: audit.EventGrant, At: at(1), Holder: "wörker-1", Token: audit.Int64(42),
			TTL: 10500 * time.Millisecond, Position: "1234", Inferred: true,
			Detail: map[string]any{"note": "ünïcode <i>markup</i> \"quoted\"", "revision": 9007199254740993, "nested": map[string]any{"ok": true}},
		},
		{Lock: key, Kind: audit.EventWriteRejected, At: at(3), Holder: "", Resource: "s3://bücket", RequestID: "req-1", Detail: map[string]any{}},
		{Lock: key, Kind: audit.EventBlind}, // zero time, nil token, nil detail
	}
	findings := []audit.Finding{
		{
			Lock: key, Kind: audit.FindingOverlap, Severity: audit.SeverityCritical, At: at(5), Until: at(12),
			Summary: "two holders <b>both</b> believed they held it — ünïcode", Tokens: []int64{41, 42},
			Holders: []string{"a", "b"}, Resource: "db",
		},
		{Lock: key, Kind: audit.FindingUnfencedLock, At: at(6)}, // instant, no tokens or holders; severity from kind
	}
	apply(t, s, audit.Batch{Locks: []audit.TrackState{st}, Tenures: []audit.Tenure{ended, held},
		Events: events, Findings: findings, Cursors: []audit.Cursor{{Source: "prod-etcd", Position: "1234", At: at(12)}}})

	got := lockByKey(t, s, key)
	if got.ID == 0 {
		t.Fatalf("lock ID = 0, want the row id")
	}
	wantLock := st.Lock
	wantLock.ID = got.ID
	equal(t, "LockByKey", got, wantLock)
	byID, err := s.Lock(ctx, got.ID)
	if err != nil {
		t.Fatalf("Lock(%d): %v", got.ID, err)
	}
	equal(t, "Lock", byID, wantLock)

	gotTenures, err := s.Tenures(ctx, got.ID, audit.TimeFilter{})
	if err != nil {
		t.Fatalf("Tenures: %v", err)
	}
	ended.LockID, held.LockID = got.ID, got.ID
	equal(t, "Tenures", gotTenures, []audit.Tenure{ended, held})

	gotEvents, err := s.Events(ctx, got.ID, audit.EventFilter{})
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	if len(gotEvents) != len(events) {
		t.Fatalf("got %d events, want %d", len(gotEvents), len(events))
	}
	// Time order puts the zero-time blind event first.
	wantEvents := []audit.Event{events[2], events[0], events[1]}
	// Detail comes back as decoded JSON: numbers as json.Number, exact.
	wantEvents[1].Detail = map[string]any{"note": "ünïcode <i>markup</i> \"quoted\"", "revision": json.Number("9007199254740993"), "nested": map[string]any{"ok": true}}
	for i := range wantEvents {
		if gotEvents[i].ID == 0 {
			t.Errorf("event %d: ID = 0, want the row id", i)
		}
		wantEvents[i].ID = gotEvents[i].ID
		wantEvents[i].LockID = got.ID
	}
	equal(t, "Events", gotEvents, wantEvents)

	gotFindings, err := s.Findings(ctx, audit.FindingFilter{})
	if err != nil {
		t.Fatalf("Findings: %v", err)
	}
	if len(gotFindings) != len(findings) {
		t.Fatalf("got %d findings, want %d", len(gotFindings), len(findings))
	}
	wantFindings := append([]audit.Finding(nil), findings...)
	wantFindings[1].Severity = audit.SeverityWarning
	for i := range wantFindings {
		wantFindings[i].ID = gotFindings[i].ID
		wantFindings[i].LockID = got.ID
	}
	equal(t, "Findings", gotFindings, wantFindings)

	_, cursors, err := s.Restore(ctx)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	equal(t, "cursors", cursors, []audit.Cursor{{Source: "prod-etcd", Position: "1234", At: at(12)}})
}

// Renewals that name their tenure are stored without holder, token or their
// margin and renewal time as JSON (journal.go's eventArgs); they must read
// back exactly as the tracker made them, as older full rows do.
func TestCompactRenewalsReadBackWhole(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "cluster-a", Name: "kube-system/<b>scheduler</b>"}
	first := audit.Tenure{Lock: key, Seq: 1, Holder: "node-1 <script>", Token: audit.Int64(7), GrantedAt: at(1),
		EndedAt: at(5), End: audit.EndReleased, LeaseDuration: 10 * time.Second}
	second := audit.Tenure{Lock: key, Seq: 2, Holder: "node-2", GrantedAt: at(6), LeaseDuration: 10 * time.Second}
	renew := func(sec int, ten audit.Tenure, detail map[string]any) audit.Event {
		return audit.Event{Lock: key, Kind: audit.EventRenew, At: at(sec), Holder: ten.Holder, Token: ten.Token,
			TTL: 10 * time.Second, Seq: ten.Seq, Detail: detail}
	}
	events := []audit.Event{
		renew(2, first, map[string]any{"margin_ratio": 0.875, "renewed_at": "2026-01-01T00:00:01.999999Z"}),
		renew(3, first, map[string]any{"margin_ratio": -0.25, "overtaken": true, "renewal": int64(2)}),
		// Not exactly representable in the columns: kept as JSON.
		renew(4, first, map[string]any{"margin_ratio": 0.1234, "renewed_at": "2026-01-01T01:00:03+01:00"}),
		renew(7, second, map[string]any{"margin_ratio": 1.0}),
		renew(8, second, nil),
		// A renewal stored before renewals named their tenure.
		{Lock: key, Kind: audit.EventRenew, At: at(9), Holder: "node-2", TTL: 10 * time.Second,
			Detail: map[string]any{"margin_ratio": 0.5}},
	}
	apply(t, s, audit.Batch{Tenures: []audit.Tenure{first, second}, Events: events})

	id := lockByKey(t, s, key).ID
	got, err := s.Events(ctx, id, audit.EventFilter{})
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	want := append([]audit.Event(nil), events...)
	want[0].Detail = map[string]any{"margin_ratio": json.Number("0.875"), "renewed_at": "2026-01-01T00:00:01.999999Z"}
	want[1].Detail = map[string]any{"margin_ratio": json.Number("-0.25"), "overtaken": true, "renewal": json.Number("2")}
	want[2].Detail = map[string]any{"margin_ratio": json.Number("0.1234"), "renewed_at": "2026-01-01T01:00:03+01:00"}
	want[3].Detail = map[string]any{"margin_ratio": json.Number("1")}
	want[5].Detail = map[string]any{"margin_ratio": json.Number("0.5")}
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d", len(got), len(want))
	}
	for i := range want {
		want[i].ID, want[i].LockID = got[i].ID, id
	}
	equal(t, "Events", got, want)

	// The journal's replay reads them the same way.
	unsynced, err := s.Unsynced(ctx)
	if err != nil {
		t.Fatalf("Unsynced: %v", err)
	}
	for i := range unsynced {
		unsynced[i].LockID = id
	}
	equal(t, "Unsynced", unsynced, want)
}

func TestApplyLaterEntriesReplaceEarlier(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}

	first := heldLock("src", "orders", "a", 1, 0)
	second := heldLock("src", "orders", "b", 2, 5)
	second.NextSeq = 2
	t1 := audit.Tenure{Lock: key, Seq: 1, Holder: "a", Token: audit.Int64(1), GrantedAt: at(0)}
	t1ended := t1
	t1ended.EndedAt, t1ended.End = at(5), audit.EndReleased
	apply(t, s, audit.Batch{
		Locks:   []audit.TrackState{first, second},
		Tenures: []audit.Tenure{t1, t1ended},
		Cursors: []audit.Cursor{{Source: "src", Position: "10", At: at(0)}, {Source: "src", Position: "11", At: at(5)}},
	})

	l := lockByKey(t, s, key)
	if l.Holder != "b" || *l.Token != 2 {
		t.Errorf("lock holder, token = %s, %d; want b, 2", l.Holder, *l.Token)
	}
	tenures, err := s.Tenures(ctx, l.ID, audit.TimeFilter{})
	if err != nil {
		t.Fatalf("Tenures: %v", err)
	}
	t1ended.LockID = l.ID
	equal(t, "tenures", tenures, []audit.Tenure{t1ended})

	// A later batch replaces again, keeping the lock's id.
	third := heldLock("src", "orders", "c", 3, 9)
	third.Lock.State = audit.StateFree
	t1ended.Renewals = 4
	apply(t, s, audit.Batch{Locks: []audit.TrackState{third}, Tenures: []audit.Tenure{t1ended},
		Cursors: []audit.Cursor{{Source: "src", Position: "12", At: at(9)}}})
	l2 := lockByKey(t, s, key)
	if l2.ID != l.ID {
		t.Errorf("lock id after replace = %d, want %d", l2.ID, l.ID)
	}
	if l2.Holder != "c" || l2.State != audit.StateFree {
		t.Errorf("lock holder, state = %s, %s; want c, free", l2.Holder, l2.State)
	}
	tenures, err = s.Tenures(ctx, l.ID, audit.TimeFilter{})
	if err != nil {
		t.Fatalf("Tenures: %v", err)
	}
	if len(tenures) != 1 || tenures[0].Renewals != 4 {
		t.Errorf("tenures = %+v, want one with 4 renewals", show(tenures))
	}
	states, cursors, err := s.Restore(ctx)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	equal(t, "cursors", cursors, []audit.Cursor{{Source: "src", Position: "12", At: at(9)}})
	if len(states) != 1 || states[0].Lock.Holder != "c" {
		t.Errorf("restored states = %s, want one held by c", show(states))
	}
}

func TestApplyFailureRollsBackEverything(t *testing.T) {
	ctx := context.Background()
	good := audit.Batch{
		Locks:   []audit.TrackState{heldLock("src", "old", "a", 1, 0)},
		Events:  []audit.Event{{Lock: audit.LockKey{Source: "src", Name: "old"}, Kind: audit.EventGrant, At: at(0)}},
		Cursors: []audit.Cursor{{Source: "src", Position: "100", At: at(0)}},
	}
	newKey := audit.LockKey{Source: "src", Name: "new"}
	bad := audit.Batch{
		Locks:   []audit.TrackState{heldLock("src", "new", "b", 2, 1)},
		Tenures: []audit.Tenure{{Lock: newKey, Seq: 1, Holder: "b", GrantedAt: at(1)}},
		Events: []audit.Event{
			{Lock: newKey, Kind: audit.EventWriteAccepted, At: at(1), RequestID: "dup"},
			// A request id is unique per lock and resource (migration 0010).
			{Lock: audit.LockKey{Source: "src", Name: "bare"}, Kind: audit.EventWriteAccepted, At: at(1), Resource: "r", RequestID: "dup"},
			{Lock: audit.LockKey{Source: "src", Name: "bare"}, Kind: audit.EventWriteAccepted, At: at(2), Resource: "r", RequestID: "dup"},
		},
		Findings: []audit.Finding{{Lock: newKey, Kind: audit.FindingTokenSkip, At: at(1)}},
		Cursors:  []audit.Cursor{{Source: "src", Position: "200", At: at(1)}},
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()

	for _, tc := range []struct {
		name string
		ctx  context.Context
		b    audit.Batch
	}{
		{"DuplicateRequestIDMidBatch", ctx, bad},
		{"CancelledContext", cancelled, bad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := openStore(t)
			apply(t, s, good)
			if err := s.Apply(tc.ctx, tc.b); err == nil {
				t.Fatal("Apply succeeded, want an error")
			}
			for _, key := range []audit.LockKey{newKey, {Source: "src", Name: "bare"}} {
				if _, err := s.LockByKey(ctx, key); audit.ErrorCode(err) != audit.ENOTFOUND {
					t.Errorf("LockByKey(%s) error = %v, want ENOTFOUND after rollback", key, err)
				}
			}
			_, cursors, err := s.Restore(ctx)
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			equal(t, "cursors after rollback", cursors, good.Cursors)
			known, err := s.StoredWrites(ctx, []string{"dup"})
			if err != nil {
				t.Fatalf("StoredWrites: %v", err)
			}
			if len(known) != 0 {
				t.Errorf("request dup is stored after rollback: %+v", known)
			}
			findings, err := s.Findings(ctx, audit.FindingFilter{})
			if err != nil {
				t.Fatalf("Findings: %v", err)
			}
			if len(findings) != 0 {
				t.Errorf("got %d findings after rollback, want 0", len(findings))
			}

			// The rolled-back lock ids must not linger in the cache: the same
			// keys resolve to fresh rows in the next batch.
			fixed := tc.b
			fixed.Events = []audit.Event{tc.b.Events[0], {Lock: audit.LockKey{Source: "src", Name: "bare"}, Kind: audit.EventWriteAccepted, At: at(2), RequestID: "other"}}
			apply(t, s, fixed)
			nl := lockByKey(t, s, newKey)
			evs, err := s.Events(ctx, nl.ID, audit.EventFilter{})
			if err != nil {
				t.Fatalf("Events: %v", err)
			}
			if len(evs) != 1 || evs[0].RequestID != "dup" {
				t.Errorf("events of %s = %s, want the dup write", newKey, show(evs))
			}
			bare := lockByKey(t, s, audit.LockKey{Source: "src", Name: "bare"})
			if bare.ID == nl.ID {
				t.Errorf("bare and new locks share id %d", bare.ID)
			}
			if bare.Class != audit.ClassLock || bare.State != audit.StateFree {
				t.Errorf("bare lock class, state = %s, %s; want lock, free", bare.Class, bare.State)
			}
		})
	}
}

func TestApplyEmptyBatchIsNoop(t *testing.T) {
	s, _ := openStore(t)
	if err := s.Apply(context.Background(), audit.Batch{}); err != nil {
		t.Fatalf("Apply(empty): %v", err)
	}
}

func TestRestoreRoundTripsTrackState(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "cluster-a", Name: "kube-system/kube-scheduler"}
	st := audit.TrackState{
		Lock: audit.Lock{
			Source: key.Source, Kind: audit.KindKubernetes, Name: key.Name, Class: audit.ClassLock,
			State: audit.StateHeld, Holder: "node-2", Token: audit.Int64(8), AcquiredAt: at(20),
			RenewedAt: at(25), ExpiresAt: at(40), LeaseDuration: 15 * time.Second, ChangedAt: at(25),
		},
		Recent: []audit.Tenure{
			{Lock: key, Seq: 3, Holder: "node-1", Token: audit.Int64(7), GrantedAt: at(0), Renewals: 3,
				LastRenewedAt: at(9), LeaseDuration: 15 * time.Second, ExpiresAt: at(24), EndedAt: at(20), End: audit.EndSuperseded},
			{Lock: key, Seq: 4, Holder: "node-2", Token: audit.Int64(8), GrantedAt: at(20), Position: "rv-77",
				LastRenewedAt: at(25), LeaseDuration: 15 * time.Second, ExpiresAt: at(40)},
		},
		NextSeq:          4,
		LastGrantToken:   audit.Int64(8),
		ExpireByClock:    true,
		SequentialTokens: true,
		UnfencedReported: true,
		Resources: map[string]*audit.ResourceState{
			"orders-db": {Highest: audit.Int64(7), Pending: []audit.PendingGrant{{Token: 8, GrantedAt: at(20), Holder: "node-2"}}},
			"cache":     {},
		},
	}
	// A lock only a write report named: no track state, but tenures.
	bareKey := audit.LockKey{Source: "cluster-a", Name: "default/bare"}
	// The tracker writes a lock's tenures with it; Recent comes back from them.
	apply(t, s, audit.Batch{
		Locks:   []audit.TrackState{st},
		Tenures: append(slices.Clone(st.Recent), audit.Tenure{Lock: bareKey, Seq: 5, Holder: "x"}),
		Cursors: []audit.Cursor{{Source: "cluster-a", Position: "rv-77", At: at(25)}, {Source: "prod-etcd", Position: "9"}},
	})

	states, cursors, err := s.Restore(ctx)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if len(states) != 2 {
		t.Fatalf("restored %d states, want 2", len(states))
	}
	want := st
	want.Lock.ID = lockByKey(t, s, key).ID
	want.Recent = slices.Clone(st.Recent)
	for i := range want.Recent {
		want.Recent[i].LockID = want.Lock.ID
	}
	equal(t, "restored TrackState", states[0], want)
	equal(t, "restored Recent", states[0].Recent, want.Recent)

	bare := states[1]
	if bare.Lock.Key() != bareKey || bare.Lock.ID == 0 || bare.NextSeq != 5 || bare.Recent != nil {
		t.Errorf("restored bare lock = %s, want key %s, an id and NextSeq 5", show(bare), bareKey)
	}
	equal(t, "cursors", cursors, []audit.Cursor{{Source: "cluster-a", Position: "rv-77", At: at(25)}, {Source: "prod-etcd", Position: "9"}})
}

func TestRestoreEmptyDatabase(t *testing.T) {
	s, _ := openStore(t)
	states, cursors, err := s.Restore(context.Background())
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if len(states) != 0 || len(cursors) != 0 {
		t.Errorf("Restore = %d states, %d cursors; want none", len(states), len(cursors))
	}
}

func TestStoredWrites(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	var b audit.Batch
	// More ids than one IN list holds, so chunking is exercised.
	for i := range 1200 {
		b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventWriteAccepted, At: at(i), RequestID: fmt.Sprintf("req-%d", i)})
	}
	b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventGrant, At: at(0)}) // no request id
	apply(t, s, b)

	var ids []string
	for i := 1100; i < 1300; i++ {
		ids = append(ids, fmt.Sprintf("req-%d", i))
	}
	for i := range 600 {
		ids = append(ids, fmt.Sprintf("req-%d", i))
	}
	ids = append(ids, "", "req-5")
	stored, err := s.StoredWrites(ctx, ids)
	if err != nil {
		t.Fatalf("StoredWrites: %v", err)
	}
	known := make(map[string]int)
	for _, e := range stored {
		if e.Lock != key || e.Kind != audit.EventWriteAccepted {
			t.Fatalf("stored write %+v, want a write_accepted of %s", e, key)
		}
		known[e.RequestID]++
	}
	if len(stored) != 700 || len(known) != 700 {
		t.Errorf("got %d stored writes under %d ids, want 700 under 700", len(stored), len(known))
	}
	for _, id := range []string{"req-0", "req-599", "req-1100", "req-1199"} {
		if known[id] != 1 {
			t.Errorf("%s stored %d times, want once", id, known[id])
		}
	}
	for _, id := range []string{"req-600", "req-1200", ""} {
		if known[id] != 0 {
			t.Errorf("%q stored %d times, want never", id, known[id])
		}
	}

	none, err := s.StoredWrites(ctx, nil)
	if err != nil || len(none) != 0 {
		t.Errorf("StoredWrites(nil) = %v, %v; want empty, nil", none, err)
	}
}

func TestLocksFilters(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	mk := func(source, name, holder string, class audit.Class, state audit.LockState) audit.TrackState {
		st := heldLock(source, name, holder, 1, 0)
		st.Lock.Class, st.Lock.State = class, state
		return st
	}
	apply(t, s, audit.Batch{Locks: []audit.TrackState{
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
			equal(t, "locks", keys(got), tc.want)
		})
	}
}

func TestLocksDefaultAndMaxLimit(t *testing.T) {
	s, _ := openStore(t)
	// Rows inserted in SQL: Apply of thousands of locks is slow under -race.
	if _, err := s.writer.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO locks (source, name) SELECT 'src', printf('lock-%05d', i) FROM n`, maxLockLimit+10); err != nil {
		t.Fatalf("insert locks: %v", err)
	}
	for _, tc := range []struct {
		limit, want int
	}{{0, defaultLockLimit}, {-1, defaultLockLimit}, {maxLockLimit + 10, maxLockLimit}} {
		got, err := s.Locks(context.Background(), audit.LockFilter{Limit: tc.limit})
		if err != nil {
			t.Fatalf("Locks: %v", err)
		}
		if len(got) != tc.want {
			t.Errorf("Locks(Limit %d) returned %d, want %d", tc.limit, len(got), tc.want)
		}
	}
}

func TestEventsFilters(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	other := audit.LockKey{Source: "src", Name: "other"}
	kinds := []audit.EventKind{audit.EventGrant, audit.EventRenew, audit.EventRenew, audit.EventRelease}
	var b audit.Batch
	for i := range 20 {
		b.Events = append(b.Events, audit.Event{Lock: key, Kind: kinds[i%len(kinds)], At: at(i), Holder: fmt.Sprint(i)})
	}
	// Two events at the same instant keep their insertion order.
	b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventGrant, At: at(19), Holder: "19b"})
	b.Events = append(b.Events, audit.Event{Lock: other, Kind: audit.EventGrant, At: at(5), Holder: "other"})
	apply(t, s, b)
	id := lockByKey(t, s, key).ID

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
		{"WindowIsInclusive", audit.EventFilter{TimeFilter: audit.TimeFilter{From: at(3), To: at(6)}}, []string{"3", "4", "5", "6"}},
		{"OpenStart", audit.EventFilter{TimeFilter: audit.TimeFilter{To: at(1)}}, []string{"0", "1"}},
		{"OpenEnd", audit.EventFilter{TimeFilter: audit.TimeFilter{From: at(18)}}, []string{"18", "19", "19b"}},
		{"Kind", audit.EventFilter{Kind: audit.EventRelease}, []string{"3", "7", "11", "15", "19"}},
		{"KindInWindow", audit.EventFilter{Kind: audit.EventGrant, TimeFilter: audit.TimeFilter{From: at(1), To: at(12)}}, []string{"4", "8", "12"}},
		{"LimitReturnsNewestInTimeOrder", audit.EventFilter{TimeFilter: audit.TimeFilter{Limit: 3}}, []string{"18", "19", "19b"}},
		{"LimitInWindow", audit.EventFilter{TimeFilter: audit.TimeFilter{To: at(10), Limit: 2}}, []string{"9", "10"}},
		{"EmptyWindow", audit.EventFilter{TimeFilter: audit.TimeFilter{From: at(100)}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Events(ctx, id, tc.f)
			if err != nil {
				t.Fatalf("Events: %v", err)
			}
			equal(t, "event holders", holders(got), tc.want)
		})
	}
}

func TestTenuresOverlappingWindow(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	// Tenure n is granted at 10n and ends at 10n+5; the last is still held.
	var b audit.Batch
	for n := int64(1); n <= 5; n++ {
		ten := audit.Tenure{Lock: key, Seq: n, Holder: fmt.Sprint(n), Token: audit.Int64(n), GrantedAt: at(int(10 * n))}
		if n < 5 {
			ten.EndedAt, ten.End = at(int(10*n+5)), audit.EndReleased
		}
		b.Tenures = append(b.Tenures, ten)
	}
	apply(t, s, b)
	id := lockByKey(t, s, key).ID

	for _, tc := range []struct {
		name string
		f    audit.TimeFilter
		want []int64
	}{
		{"All", audit.TimeFilter{}, []int64{1, 2, 3, 4, 5}},
		{"GrantedAtWindowEndCounts", audit.TimeFilter{From: at(26), To: at(30)}, []int64{3}},
		{"EndedAtWindowStartCounts", audit.TimeFilter{From: at(25), To: at(29)}, []int64{2}},
		{"GapBetweenTenures", audit.TimeFilter{From: at(26), To: at(29)}, nil},
		{"HeldTenureOverlapsAnyLaterWindow", audit.TimeFilter{From: at(1000), To: at(2000)}, []int64{5}},
		{"OpenStart", audit.TimeFilter{To: at(20)}, []int64{1, 2}},
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
			equal(t, "tenure seqs", seqs, tc.want)
		})
	}
}

func TestFindingsFilters(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	a := audit.LockKey{Source: "src", Name: "a"}
	bk := audit.LockKey{Source: "src", Name: "b"}
	apply(t, s, audit.Batch{Findings: []audit.Finding{
		{Lock: a, Kind: audit.FindingOverlap, Severity: audit.SeverityCritical, At: at(1), Summary: "1"},
		{Lock: a, Kind: audit.FindingStaleWrite, Severity: audit.SeverityInfo, At: at(2), Resource: "db", Summary: "2"},
		{Lock: bk, Kind: audit.FindingStaleWrite, Severity: audit.SeverityInfo, At: at(3), Resource: "cache", Summary: "3"},
		{Lock: bk, Kind: audit.FindingLateRenewal, Severity: audit.SeverityWarning, At: at(4), Summary: "4"},
		{Lock: a, Kind: audit.FindingOverlap, Severity: audit.SeverityCritical, At: at(5), Summary: "5"},
	}})
	idA := lockByKey(t, s, a).ID

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
		{"WindowIsInclusive", audit.FindingFilter{TimeFilter: audit.TimeFilter{From: at(2), To: at(4)}}, []string{"2", "3", "4"}},
		{"LimitReturnsNewestInTimeOrder", audit.FindingFilter{TimeFilter: audit.TimeFilter{Limit: 2}}, []string{"4", "5"}},
		{"LockAndKindAndLimit", audit.FindingFilter{LockID: idA, Kind: audit.FindingOverlap, TimeFilter: audit.TimeFilter{Limit: 1}}, []string{"5"}},
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
				if want := map[int64]audit.LockKey{idA: a, lockByKey(t, s, bk).ID: bk}[f.LockID]; f.Lock != want || want.Name == "" {
					t.Errorf("finding %s: lock %s (%d), want %s", f.Summary, f.Lock, f.LockID, want)
				}
				sums = append(sums, f.Summary)
			}
			equal(t, "findings", sums, tc.want)
		})
	}
}

func TestLastEventAtPerSource(t *testing.T) {
	s, _ := openStore(t)
	apply(t, s, audit.Batch{
		Locks: []audit.TrackState{heldLock("quiet", "no-events", "h", 1, 0)},
		Events: []audit.Event{
			{Lock: audit.LockKey{Source: "etcd", Name: "a"}, Kind: audit.EventGrant, At: at(5)},
			{Lock: audit.LockKey{Source: "etcd", Name: "b"}, Kind: audit.EventGrant, At: at(9)},
			{Lock: audit.LockKey{Source: "etcd", Name: "a"}, Kind: audit.EventRenew, At: at(7)},
			{Lock: audit.LockKey{Source: "k8s", Name: "ns/x"}, Kind: audit.EventGrant, At: at(3)},
		},
	})
	got, err := s.LastEventAt(context.Background())
	if err != nil {
		t.Fatalf("LastEventAt: %v", err)
	}
	equal(t, "LastEventAt", got, map[string]time.Time{"etcd": at(9), "k8s": at(3)})
}

func TestMissingLockIsNotFound(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	apply(t, s, audit.Batch{Locks: []audit.TrackState{heldLock("src", "exists", "h", 1, 0)}})

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
func TestWriteEventsReadWhatEventsRead(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	details := []map[string]any{nil, {"highest_token": int64(9)}, {"highest_token": 12.0}, {"note": "x", "highest_token": int64(3)}}
	var b audit.Batch
	for i := range 24 {
		e := audit.Event{Lock: key, Kind: audit.EventWriteAccepted, At: at(i / 2), Holder: fmt.Sprint("w", i%3),
			Resource: fmt.Sprint("db-", i%2), RequestID: fmt.Sprint("r", i), Detail: details[i%len(details)]}
		if i%3 == 0 {
			e.Kind = audit.EventWriteRejected
		}
		if i%5 != 0 {
			e.Token = audit.Int64(int64(i))
		}
		b.Events = append(b.Events, e)
		b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventGrant, At: at(i / 2), Holder: "g"})
	}
	apply(t, s, b)
	id := lockByKey(t, s, key).ID
	for _, outcome := range []audit.WriteOutcome{audit.WriteAccepted, audit.WriteRejected} {
		kind := audit.EventKind("write_" + string(outcome))
		for _, f := range []audit.EventFilter{
			{},
			{TimeFilter: audit.TimeFilter{From: at(3), To: at(7)}},
			{TimeFilter: audit.TimeFilter{Limit: 3}},
			{Before: audit.EventCursor{At: at(6), ID: 15}, TimeFilter: audit.TimeFilter{Limit: 4}},
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

func TestReadersDoNotWaitForAnOpenWrite(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	apply(t, s, audit.Batch{Events: []audit.Event{{Lock: key, Kind: audit.EventGrant, At: at(0)}}})
	id := lockByKey(t, s, key).ID

	// Hold the write lock with an uncommitted event, as a slow Apply would.
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO events (lock_id, kind, at) VALUES (?, 'renew', ?)`, id, at(1).UnixNano()); err != nil {
		t.Fatalf("insert: %v", err)
	}

	readCtx, cancel := context.WithTimeout(ctx, 2*time.Second) // far below busy_timeout: a blocked read fails
	defer cancel()
	evs, err := s.Events(readCtx, id, audit.EventFilter{})
	if err != nil {
		t.Fatalf("Events during an open write: %v", err)
	}
	if len(evs) != 1 {
		t.Errorf("read %d events during an open write, want the 1 committed", len(evs))
	}
}

func TestConcurrentReadsDuringWrites(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	const batches = 100

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		for i := range batches {
			st := heldLock("src", "orders", fmt.Sprint(i), int64(i), i)
			b := audit.Batch{
				Locks:   []audit.TrackState{st},
				Events:  []audit.Event{{Lock: key, Kind: audit.EventGrant, At: at(i)}, {Lock: key, Kind: audit.EventRenew, At: at(i)}},
				Cursors: []audit.Cursor{{Source: "src", Position: fmt.Sprint(i), At: at(i)}},
			}
			if err := s.Apply(ctx, b); err != nil {
				errs <- fmt.Errorf("Apply %d: %w", i, err)
				return
			}
		}
	})
	// Other writers on other locks, to check Apply serializes.
	for w := range 3 {
		wg.Go(func() {
			for i := range 20 {
				k := audit.LockKey{Source: "side", Name: fmt.Sprintf("w%d-%d", w, i)}
				if err := s.Apply(ctx, audit.Batch{Events: []audit.Event{{Lock: k, Kind: audit.EventGrant, At: at(i)}}}); err != nil {
					errs <- fmt.Errorf("side Apply: %w", err)
					return
				}
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				locks, err := s.Locks(ctx, audit.LockFilter{Source: "src"})
				if err != nil {
					errs <- fmt.Errorf("Locks: %w", err)
					return
				}
				if len(locks) == 0 {
					continue
				}
				evs, err := s.Events(ctx, locks[0].ID, audit.EventFilter{})
				if err != nil {
					errs <- fmt.Errorf("Events: %w", err)
					return
				}
				// Each batch commits a pair: a reader never sees half of one.
				if len(evs)%2 != 0 {
					errs <- fmt.Errorf("read %d events, want an even number (whole batches)", len(evs))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	evs, err := s.Events(ctx, lockByKey(t, s, key).ID, audit.EventFilter{})
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	if len(evs) != 2*batches {
		t.Errorf("stored %d events, want %d", len(evs), 2*batches)
	}
	side, err := s.Locks(ctx, audit.LockFilter{Source: "side"})
	if err != nil {
		t.Fatalf("Locks: %v", err)
	}
	if len(side) != 60 {
		t.Errorf("stored %d side locks, want 60", len(side))
	}
}

func TestReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leasewatch.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	key := audit.LockKey{Source: "src", Name: "orders"}
	if err := s.Apply(ctx, audit.Batch{Locks: []audit.TrackState{heldLock("src", "orders", "a", 1, 0)}}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s2.Close()
	before := lockByKey(t, s2, key)
	// The new store's id cache starts empty and must find the existing row.
	if err := s2.Apply(ctx, audit.Batch{Events: []audit.Event{{Lock: key, Kind: audit.EventRenew, At: at(1)}}}); err != nil {
		t.Fatalf("Apply after reopen: %v", err)
	}
	evs, err := s2.Events(ctx, before.ID, audit.EventFilter{})
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	if len(evs) != 1 {
		t.Errorf("got %d events on the reopened lock, want 1", len(evs))
	}
	locks, err := s2.Locks(ctx, audit.LockFilter{})
	if err != nil {
		t.Fatalf("Locks: %v", err)
	}
	if len(locks) != 1 {
		t.Errorf("got %d locks after reopen, want 1", len(locks))
	}
}

func TestErrorsWrapContext(t *testing.T) {
	s, _ := openStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Apply(ctx, audit.Batch{Cursors: []audit.Cursor{{Source: "x"}}})
	if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "apply batch") {
		t.Errorf("Apply(cancelled) error = %v, want \"apply batch: ...\" wrapping context.Canceled", err)
	}
}

func TestConnectionsCarryPragmas(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	pragma := func(db *sql.DB, name string) int64 {
		t.Helper()
		var v int64
		if err := db.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v); err != nil {
			t.Fatalf("PRAGMA %s: %v", name, err)
		}
		return v
	}
	for _, tc := range []struct {
		pool string
		db   *sql.DB
	}{{"writer", s.writer}, {"reader", s.reader.DB}} {
		for name, want := range map[string]int64{"busy_timeout": 10000, "synchronous": 2, "foreign_keys": 1} {
			if got := pragma(tc.db, name); got != want {
				t.Errorf("%s: %s = %d, want %d", tc.pool, name, got, want)
			}
		}
	}
	if got := pragma(s.reader.DB, "query_only"); got != 1 {
		t.Errorf("reader: query_only = %d, want 1", got)
	}
	// A database larger than the map is read through the connections' own
	// page caches, memory the process keeps: the map must be SQLite's largest.
	if got := pragma(s.reader.DB, "mmap_size"); got != readMapSize {
		t.Errorf("reader: mmap_size = %d, want %d", got, readMapSize)
	}
	if got := pragma(s.writer, "query_only"); got != 0 {
		t.Errorf("writer: query_only = %d, want 0", got)
	}
	if _, err := s.reader.ExecContext(ctx, `INSERT INTO cursors (source, position) VALUES ('x', 'y')`); err == nil {
		t.Error("insert through the read pool succeeded, want it refused")
	}
}

// TestMigrationMovesTrackStateOutOfLockRows upgrades a database written
// before 0005, whose lock rows carried the tracker's memory as JSON with its
// recent tenures inside: Restore must give the same memory back.
func TestMigrationMovesTrackStateOutOfLockRows(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leasewatch.db")
	db := migratedTo(t, path, 4)
	// Written as 0004's code wrote it: two recent tenures in the JSON.
	for _, q := range []string{
		`INSERT INTO locks (id, source, kind, name, state, holder, token, renewed_at, expires_at, lease_duration_ms, changed_at, track_state)
			VALUES (7, 'src', 'kubernetes', 'orders', 'held', 'b', 3, 5000, 15000, 10000, 5000,
			'{"recent":[{"Seq":2},{"Seq":3}],"next_seq":3,"last_grant_token":3,"sequential_tokens":true,"resources":{"db":{"highest":2}}}')`,
		`INSERT INTO locks (id, source, name) VALUES (8, 'src', 'bare')`,
		`INSERT INTO tenures (lock_id, seq, holder, token, granted_at, ended_at, end_reason) VALUES (7, 1, 'a', 1, 1000, 2000, 'released')`,
		`INSERT INTO tenures (lock_id, seq, holder, token, granted_at, ended_at, end_reason) VALUES (7, 2, 'a', 2, 3000, 4000, 'expired')`,
		`INSERT INTO tenures (lock_id, seq, holder, token, granted_at, renewals, last_renewed_at, lease_duration_ms, expires_at) VALUES (7, 3, 'b', 3, 4000, 1, 5000, 10000, 15000)`,
		`INSERT INTO events (lock_id, kind, at) VALUES (7, 'grant', 4000), (7, 'renew', 5000)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open (migrating): %v", err)
	}
	defer s.Close()
	states, _, err := s.Restore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 2 {
		t.Fatalf("restored %d locks, want 2", len(states))
	}
	st := states[0]
	var seqs []int64
	for _, ten := range st.Recent {
		seqs = append(seqs, ten.Seq)
	}
	if !slices.Equal(seqs, []int64{2, 3}) || st.Recent[1].Renewals != 1 || st.NextSeq != 3 || !st.SequentialTokens ||
		st.LastGrantToken == nil || *st.LastGrantToken != 3 || st.Resources["db"] == nil || *st.Resources["db"].Highest != 2 {
		t.Errorf("restored state = %s with recent tenures %v, want 0004's memory with tenures 2 and 3", show(st), seqs)
	}
	if bare := states[1]; bare.NextSeq != 0 || bare.Recent != nil {
		t.Errorf("bare lock restored as %s, want nothing remembered", show(bare))
	}
	// The rows held every event before the upgrade: nothing to replay.
	if evs, err := s.Unsynced(ctx); err != nil || len(evs) != 0 {
		t.Errorf("Unsynced after the upgrade = %d events, %v; want none", len(evs), err)
	}
}

// migratedTo creates a database at path with the migrations up to version
// applied and recorded, as an older leasewatch left it, and returns it open.
func migratedTo(t *testing.T, path string, version int) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := migrations.Load(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version > version {
			break
		}
		if _, err := db.Exec(m.SQL); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if _, err := db.Exec(`INSERT INTO schema_migrations VALUES (?, ?, 0)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// TestMigrationGivesFindingsTheirLockClass upgrades a database written
// before 0007: the findings it holds take their locks' classes, so a
// heartbeat's finding leaves the default counts at once.
func TestMigrationGivesFindingsTheirLockClass(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leasewatch.db")
	db := migratedTo(t, path, 6)
	for _, q := range []string{
		`INSERT INTO locks (id, source, name, class) VALUES (1, 'k8s', 'ns/orders', 'lock'), (2, 'k8s', 'kube-node-lease/node-1', 'heartbeat')`,
		`INSERT INTO findings (lock_id, kind, severity, at) VALUES (1, 'late_renewal', 'warning', 1000), (2, 'lease_expired', 'warning', 2000), (2, 'overlap', 'critical', 3000)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open (migrating): %v", err)
	}
	defer s.Close()
	for class, want := range map[audit.Class]map[audit.Severity]int{
		audit.ClassLock:      {audit.SeverityWarning: 1},
		audit.ClassHeartbeat: {audit.SeverityWarning: 1, audit.SeverityCritical: 1},
	} {
		got, err := s.FindingCounts(ctx, audit.FindingCountFilter{Class: class})
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "counts of class "+string(class)+" after the upgrade", got, want)
	}
}

func TestRenewedTouchesOnlyRenewalColumnsAndSyncedEndsUnsynced(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	held := audit.TrackState{
		Lock: audit.Lock{Source: "src", Name: "orders", Kind: audit.KindRedis, State: audit.StateHeld, Holder: "a", Token: audit.Int64(1),
			AcquiredAt: at(0), RenewedAt: at(0), ExpiresAt: at(10), LeaseDuration: 10 * time.Second, ChangedAt: at(0)},
		Recent:  []audit.Tenure{{Lock: key, Seq: 1, Holder: "a", Token: audit.Int64(1), GrantedAt: at(0), LastRenewedAt: at(0), LeaseDuration: 10 * time.Second, ExpiresAt: at(10)}},
		NextSeq: 1,
	}
	apply(t, s, audit.Batch{Locks: []audit.TrackState{held}, Tenures: held.Recent,
		Events: []audit.Event{{Lock: key, Kind: audit.EventGrant, At: at(0), Holder: "a", Token: audit.Int64(1)}}, Synced: true})

	renew := func(sec int) audit.Event {
		return audit.Event{Lock: key, Kind: audit.EventRenew, At: at(sec), Holder: "a", Token: audit.Int64(1), TTL: 10 * time.Second}
	}
	// Two renewals stored as events only, as the recorder does between syncs.
	apply(t, s, audit.Batch{Events: []audit.Event{renew(2), renew(4)}})
	evs, err := s.Unsynced(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Lock != key || !evs[1].At.Equal(at(4)) || evs[1].TTL != 10*time.Second {
		t.Fatalf("Unsynced = %s, want the two renewals of %s", show(evs), key)
	}

	// The sync: only renewal columns change.
	renewed := audit.Renewal{Lock: key, Seq: 1, Renewals: 2, RenewedAt: at(4), ExpiresAt: at(14), LeaseDuration: 10 * time.Second}
	apply(t, s, audit.Batch{Renewed: []audit.Renewal{renewed}, Synced: true})
	l := lockByKey(t, s, key)
	want := held.Lock
	want.ID, want.Class, want.RenewedAt, want.ExpiresAt = l.ID, audit.ClassLock, at(4), at(14)
	equal(t, "lock after the sync", l, want)
	tenures, err := s.Tenures(ctx, l.ID, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	wantTenure := held.Recent[0]
	wantTenure.LockID, wantTenure.Renewals, wantTenure.LastRenewedAt, wantTenure.ExpiresAt = l.ID, 2, at(4), at(14)
	equal(t, "tenures after the sync", tenures, []audit.Tenure{wantTenure})
	if evs, err := s.Unsynced(ctx); err != nil || len(evs) != 0 {
		t.Errorf("Unsynced after the sync = %s, %v; want none", show(evs), err)
	}
}

func TestSizeGrowsWithEvents(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	before, err := s.Size(ctx)
	if err != nil || before <= 0 {
		t.Fatalf("Size of an empty store = %d, %v", before, err)
	}
	var b audit.Batch
	for i := range 5000 {
		b.Events = append(b.Events, audit.Event{Lock: audit.LockKey{Source: "src", Name: "orders"}, Kind: audit.EventRenew, At: at(i), Holder: "worker-1"})
	}
	apply(t, s, b)
	after, err := s.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if per := float64(after-before) / 5000; per < 20 || per > 200 {
		t.Errorf("Size grew by %.0f bytes per event, want a row and its index entry's worth", per)
	}
}
