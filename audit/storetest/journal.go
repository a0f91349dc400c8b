package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

func testApplyRoundTripsEveryField(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "prod-etcd", Name: "/locks/ördérs <b>&amp;</b>"}

	st := audit.TrackState{
		Lock: audit.Lock{
			Source: key.Source, Kind: audit.KindKubernetes, Name: key.Name, Class: audit.ClassHeartbeat,
			State: audit.StateExpired, Holder: "wörker-1 <script>alert(1)</script>", Token: audit.Int64(42),
			AcquiredAt: At(1), RenewedAt: At(2), ExpiresAt: At(12), LeaseDuration: 10500 * time.Millisecond,
			ChangedAt: At(12),
		},
		NextSeq: 2,
	}
	ended := audit.Tenure{
		Lock: key, Seq: 1, Holder: "wörker-1 <script>alert(1)</script>", Token: audit.Int64(42),
		GrantedAt: At(1), Observed: true, Position: "rv-1234", Renewals: 7, LastRenewedAt: At(2),
		LeaseDuration: 10500 * time.Millisecond, ExpiresAt: At(12), EndedAt: At(12), End: audit.EndExpired,
	}
	held := audit.Tenure{Lock: key, Seq: 2, Holder: "unfenced"} // nil token, every time zero
	events := []audit.Event{
		{
			Lock: key, Kind: audit.EventGrant, At: At(1), Holder: "wörker-1", Token: audit.Int64(42),
			TTL: 10500 * time.Millisecond, Position: "1234", Inferred: true,
			Detail: map[string]any{"note": "ünïcode <i>markup</i> \"quoted\"", "revision": 9007199254740993, "nested": map[string]any{"ok": true}},
		},
		{Lock: key, Kind: audit.EventWriteRejected, At: At(3), Holder: "", Resource: "s3://bücket", RequestID: "req-1", Detail: map[string]any{}},
		{Lock: key, Kind: audit.EventBlind}, // zero time, nil token, nil detail
	}
	findings := []audit.Finding{
		{
			Lock: key, Kind: audit.FindingOverlap, Severity: audit.SeverityCritical, At: At(5), Until: At(12),
			Summary: "two holders <b>both</b> believed they held it — ünïcode", Tokens: []int64{41, 42},
			Holders: []string{"a", "b"}, Resource: "db",
		},
		{Lock: key, Kind: audit.FindingUnfencedLock, At: At(6)}, // instant, no tokens or holders; severity from kind
	}
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{st}, Tenures: []audit.Tenure{ended, held},
		Events: events, Findings: findings, Cursors: []audit.Cursor{{Source: "prod-etcd", Position: "1234", At: At(12)}}})

	got := LockByKey(t, s, key)
	if got.ID == 0 {
		t.Fatalf("lock ID = 0, want the row id")
	}
	wantLock := st.Lock
	wantLock.ID = got.ID
	Equal(t, "LockByKey", got, wantLock)
	byID, err := s.Lock(ctx, got.ID)
	if err != nil {
		t.Fatalf("Lock(%d): %v", got.ID, err)
	}
	Equal(t, "Lock", byID, wantLock)

	gotTenures, err := s.Tenures(ctx, got.ID, audit.TimeFilter{})
	if err != nil {
		t.Fatalf("Tenures: %v", err)
	}
	ended.LockID, held.LockID = got.ID, got.ID
	Equal(t, "Tenures", gotTenures, []audit.Tenure{ended, held})

	// Time order puts the zero-time blind event first.
	wantEvents := []audit.Event{events[2], events[0], events[1]}
	// Detail comes back as decoded JSON: numbers as json.Number, exact.
	wantEvents[1].Detail = map[string]any{"note": "ünïcode <i>markup</i> \"quoted\"", "revision": json.Number("9007199254740993"), "nested": map[string]any{"ok": true}}
	eventsAre(t, s, got.ID, wantEvents)
	wantFindings := append([]audit.Finding(nil), findings...)
	wantFindings[1].Severity = audit.SeverityWarning
	findingsAre(t, s, got.ID, wantFindings)

	_, cursors, err := s.Restore(ctx)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	Equal(t, "cursors", cursors, []audit.Cursor{{Source: "prod-etcd", Position: "1234", At: At(12)}})
}

// eventsAre checks that lock lockID's events are want, each with its row
// id.
func eventsAre(t *testing.T, s Store, lockID int64, want []audit.Event) {
	t.Helper()
	got, err := s.Events(context.Background(), lockID, audit.EventFilter{})
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].ID == 0 {
			t.Errorf("event %d: ID = 0, want the row id", i)
		}
		want[i].ID, want[i].LockID = got[i].ID, lockID
	}
	Equal(t, "Events", got, want)
}

// findingsAre checks that the store's findings are want, all of lock
// lockID.
func findingsAre(t *testing.T, s Store, lockID int64, want []audit.Finding) {
	t.Helper()
	got, err := s.Findings(context.Background(), audit.FindingFilter{})
	if err != nil {
		t.Fatalf("Findings: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d findings, want %d", len(got), len(want))
	}
	for i := range want {
		want[i].ID, want[i].LockID = got[i].ID, lockID
	}
	Equal(t, "Findings", got, want)
}

// typed gives a renew event its margin (thousandths) and renewal time as the
// tracker does, typed (audit.RenewalDetail).
func typed(e audit.Event, margin int64, renewedAt time.Time) audit.Event {
	e.Renewal = audit.RenewalDetail{Margin: margin, RenewedAt: renewedAt.UnixNano(), HasMargin: true, HasRenewedAt: true}
	return e
}

// Renewals are most of what is stored, and a store may keep them compact
// (SQLite drops the holder and token a renewal's tenure already has, and
// keeps margin and renewal time out of the JSON): whatever it keeps, they
// read back exactly as the tracker made them, through Events and Unsynced,
// with odd details and without a tenure.
func testCompactRenewalsReadBackWhole(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "cluster-a", Name: "kube-system/<b>scheduler</b>"}
	first := audit.Tenure{Lock: key, Seq: 1, Holder: "node-1 <script>", Token: audit.Int64(7), GrantedAt: At(1),
		EndedAt: At(5), End: audit.EndReleased, LeaseDuration: 10 * time.Second}
	second := audit.Tenure{Lock: key, Seq: 2, Holder: "node-2", GrantedAt: At(6), LeaseDuration: 10 * time.Second}
	renew := func(sec int, ten audit.Tenure, detail map[string]any) audit.Event {
		return audit.Event{Lock: key, Kind: audit.EventRenew, At: At(sec), Holder: ten.Holder, Token: ten.Token,
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
		{Lock: key, Kind: audit.EventRenew, At: At(9), Holder: "node-2", TTL: 10 * time.Second,
			Detail: map[string]any{"margin_ratio": 0.5}},
		// As the tracker makes them: margin and renewal time typed.
		typed(renew(10, second, map[string]any{"zone": "a"}), 625, At(10).Add(-time.Microsecond)),
		typed(audit.Event{Lock: key, Kind: audit.EventRenew, At: At(11), Holder: "node-2", TTL: 10 * time.Second}, -250, At(11)),
	}
	Apply(t, s, audit.Batch{Tenures: []audit.Tenure{first, second}, Events: events})

	id := LockByKey(t, s, key).ID
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
	want[6].Detail = map[string]any{"zone": "a", "margin_ratio": json.Number("0.625"), "renewed_at": At(10).Add(-time.Microsecond).Format(time.RFC3339Nano)}
	want[7].Detail = map[string]any{"margin_ratio": json.Number("-0.25"), "renewed_at": At(11).Format(time.RFC3339Nano)}
	want[6].Renewal, want[7].Renewal = audit.RenewalDetail{}, audit.RenewalDetail{}
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d", len(got), len(want))
	}
	for i := range want {
		want[i].ID, want[i].LockID = got[i].ID, id
	}
	Equal(t, "Events", got, want)

	// The journal's replay reads them the same way.
	unsynced, err := s.Unsynced(ctx)
	if err != nil {
		t.Fatalf("Unsynced: %v", err)
	}
	for i := range unsynced {
		unsynced[i].LockID = id
	}
	Equal(t, "Unsynced", unsynced, want)
}

func testApplyLaterEntriesReplaceEarlier(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}

	first := heldLock("src", "orders", "a", 1, 0)
	second := heldLock("src", "orders", "b", 2, 5)
	second.NextSeq = 2
	t1 := audit.Tenure{Lock: key, Seq: 1, Holder: "a", Token: audit.Int64(1), GrantedAt: At(0)}
	t1ended := t1
	t1ended.EndedAt, t1ended.End = At(5), audit.EndReleased
	Apply(t, s, audit.Batch{
		Locks:   []audit.TrackState{first, second},
		Tenures: []audit.Tenure{t1, t1ended},
		Cursors: []audit.Cursor{{Source: "src", Position: "10", At: At(0)}, {Source: "src", Position: "11", At: At(5)}},
	})

	l := LockByKey(t, s, key)
	if l.Holder != "b" || *l.Token != 2 {
		t.Errorf("lock holder, token = %s, %d; want b, 2", l.Holder, *l.Token)
	}
	tenures, err := s.Tenures(ctx, l.ID, audit.TimeFilter{})
	if err != nil {
		t.Fatalf("Tenures: %v", err)
	}
	t1ended.LockID = l.ID
	Equal(t, "tenures", tenures, []audit.Tenure{t1ended})

	// A later batch replaces again, keeping the lock's id.
	third := heldLock("src", "orders", "c", 3, 9)
	third.Lock.State = audit.StateFree
	t1ended.Renewals = 4
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{third}, Tenures: []audit.Tenure{t1ended},
		Cursors: []audit.Cursor{{Source: "src", Position: "12", At: At(9)}}})
	l2 := LockByKey(t, s, key)
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
		t.Errorf("tenures = %+v, want one with 4 renewals", Show(tenures))
	}
	states, cursors, err := s.Restore(ctx)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	Equal(t, "cursors", cursors, []audit.Cursor{{Source: "src", Position: "12", At: At(9)}})
	if len(states) != 1 || states[0].Lock.Holder != "c" {
		t.Errorf("restored states = %s, want one held by c", Show(states))
	}
}

func testApplyFailureRollsBackEverything(t *testing.T, h Harness) {
	ctx := context.Background()
	good := audit.Batch{
		Locks:   []audit.TrackState{heldLock("src", "old", "a", 1, 0)},
		Events:  []audit.Event{{Lock: audit.LockKey{Source: "src", Name: "old"}, Kind: audit.EventGrant, At: At(0)}},
		Cursors: []audit.Cursor{{Source: "src", Position: "100", At: At(0)}},
	}
	newKey := audit.LockKey{Source: "src", Name: "new"}
	bad := audit.Batch{
		Locks:   []audit.TrackState{heldLock("src", "new", "b", 2, 1)},
		Tenures: []audit.Tenure{{Lock: newKey, Seq: 1, Holder: "b", GrantedAt: At(1)}},
		Events: []audit.Event{
			{Lock: newKey, Kind: audit.EventWriteAccepted, At: At(1), RequestID: "dup"},
			// A request id is unique per lock and resource: the third write fails.
			{Lock: audit.LockKey{Source: "src", Name: "bare"}, Kind: audit.EventWriteAccepted, At: At(1), Resource: "r", RequestID: "dup"},
			{Lock: audit.LockKey{Source: "src", Name: "bare"}, Kind: audit.EventWriteAccepted, At: At(2), Resource: "r", RequestID: "dup"},
		},
		Findings: []audit.Finding{{Lock: newKey, Kind: audit.FindingTokenSkip, At: At(1)}},
		Cursors:  []audit.Cursor{{Source: "src", Position: "200", At: At(1)}},
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
			s := h.Open(t)
			Apply(t, s, good)
			if err := s.Apply(tc.ctx, tc.b); err == nil {
				t.Fatal("Apply succeeded, want an error")
			}
			rolledBack(t, s, good.Cursors, newKey, audit.LockKey{Source: "src", Name: "bare"})

			// Ids of rolled-back lock rows must not linger in any memory of
			// the store: the same keys resolve to fresh rows in the next batch.
			fixed := tc.b
			fixed.Events = []audit.Event{tc.b.Events[0], {Lock: audit.LockKey{Source: "src", Name: "bare"}, Kind: audit.EventWriteAccepted, At: At(2), RequestID: "other"}}
			Apply(t, s, fixed)
			nl := LockByKey(t, s, newKey)
			evs, err := s.Events(ctx, nl.ID, audit.EventFilter{})
			if err != nil {
				t.Fatalf("Events: %v", err)
			}
			if len(evs) != 1 || evs[0].RequestID != "dup" {
				t.Errorf("events of %s = %s, want the dup write", newKey, Show(evs))
			}
			bare := LockByKey(t, s, audit.LockKey{Source: "src", Name: "bare"})
			if bare.ID == nl.ID {
				t.Errorf("bare and new locks share id %d", bare.ID)
			}
			if bare.Class != audit.ClassLock || bare.State != audit.StateFree {
				t.Errorf("bare lock class, state = %s, %s; want lock, free", bare.Class, bare.State)
			}
		})
	}
}

// rolledBack checks that a failed batch left nothing: not the locks of
// keys, nor a write of request dup, nor a finding, nor a cursor but the
// ones before.
func rolledBack(t *testing.T, s Store, cursorsBefore []audit.Cursor, keys ...audit.LockKey) {
	t.Helper()
	ctx := context.Background()
	for _, key := range keys {
		if _, err := s.LockByKey(ctx, key); audit.ErrorCode(err) != audit.ENOTFOUND {
			t.Errorf("LockByKey(%s) error = %v, want ENOTFOUND after rollback", key, err)
		}
	}
	_, cursors, err := s.Restore(ctx)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	Equal(t, "cursors after rollback", cursors, cursorsBefore)
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
}

func testApplyEmptyBatchIsNoop(t *testing.T, h Harness) {
	s := h.Open(t)
	if err := s.Apply(context.Background(), audit.Batch{}); err != nil {
		t.Fatalf("Apply(empty): %v", err)
	}
}

func testRestoreRoundTripsTrackState(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "cluster-a", Name: "kube-system/kube-scheduler"}
	st := audit.TrackState{
		Lock: audit.Lock{
			Source: key.Source, Kind: audit.KindKubernetes, Name: key.Name, Class: audit.ClassLock,
			State: audit.StateHeld, Holder: "node-2", Token: audit.Int64(8), AcquiredAt: At(20),
			RenewedAt: At(25), ExpiresAt: At(40), LeaseDuration: 15 * time.Second, ChangedAt: At(25),
		},
		Recent: []audit.Tenure{
			{Lock: key, Seq: 3, Holder: "node-1", Token: audit.Int64(7), GrantedAt: At(0), Renewals: 3,
				LastRenewedAt: At(9), LeaseDuration: 15 * time.Second, ExpiresAt: At(24), EndedAt: At(20), End: audit.EndSuperseded},
			{Lock: key, Seq: 4, Holder: "node-2", Token: audit.Int64(8), GrantedAt: At(20), Position: "rv-77",
				LastRenewedAt: At(25), LeaseDuration: 15 * time.Second, ExpiresAt: At(40)},
		},
		NextSeq:          4,
		LastGrantToken:   audit.Int64(8),
		ExpireByClock:    true,
		SequentialTokens: true,
		UnfencedReported: true,
		Resources: map[string]*audit.ResourceState{
			"orders-db": {Highest: audit.Int64(7), Pending: []audit.PendingGrant{{Token: 8, GrantedAt: At(20), Holder: "node-2"}}},
			"cache":     {},
		},
	}
	// A lock only a write report named: no track state, but tenures.
	bareKey := audit.LockKey{Source: "cluster-a", Name: "default/bare"}
	// The tracker writes a lock's tenures with it; Recent comes back from them.
	Apply(t, s, audit.Batch{
		Locks:     []audit.TrackState{st},
		Resources: ResourceRows(st),
		Tenures:   append(slices.Clone(st.Recent), audit.Tenure{Lock: bareKey, Seq: 5, Holder: "x"}),
		Cursors:   []audit.Cursor{{Source: "cluster-a", Position: "rv-77", At: At(25)}, {Source: "prod-etcd", Position: "9"}},
	})

	states, cursors, err := s.Restore(ctx)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if len(states) != 2 {
		t.Fatalf("restored %d states, want 2", len(states))
	}
	want := st
	want.Lock.ID = LockByKey(t, s, key).ID
	want.Recent = slices.Clone(st.Recent)
	for i := range want.Recent {
		want.Recent[i].LockID = want.Lock.ID
	}
	Equal(t, "restored TrackState", states[0], want)
	Equal(t, "restored Recent", states[0].Recent, want.Recent)

	bare := states[1]
	if bare.Lock.Key() != bareKey || bare.Lock.ID == 0 || bare.NextSeq != 5 || bare.Recent != nil {
		t.Errorf("restored bare lock = %s, want key %s, an id and NextSeq 5", Show(bare), bareKey)
	}
	Equal(t, "cursors", cursors, []audit.Cursor{{Source: "cluster-a", Position: "rv-77", At: At(25)}, {Source: "prod-etcd", Position: "9"}})
}

func testRestoreEmptyDatabase(t *testing.T, h Harness) {
	s := h.Open(t)
	states, cursors, err := s.Restore(context.Background())
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if len(states) != 0 || len(cursors) != 0 {
		t.Errorf("Restore = %d states, %d cursors; want none", len(states), len(cursors))
	}
}

func testStoredWrites(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	var b audit.Batch
	// More ids than a store is likely to ask for in one query (SQLite's
	// IN lists are chunked).
	for i := range 1200 {
		b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventWriteAccepted, At: At(i), RequestID: fmt.Sprintf("req-%d", i)})
	}
	b.Events = append(b.Events, audit.Event{Lock: key, Kind: audit.EventGrant, At: At(0)}) // no request id
	Apply(t, s, b)

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

// readWholeBatches reads the events of source src's lock until done, and
// sends errs what goes wrong: each batch commits a pair of events, so a
// reader that sees an odd number saw half of one.
func readWholeBatches(s Store, done <-chan struct{}, errs chan<- error) {
	ctx := context.Background()
	for {
		select {
		case <-done:
			return
		default:
		}
		locks, err := s.Locks(ctx, audit.LockFilter{Source: "src"})
		if err != nil {
			errs <- fmt.Errorf("list locks: %w", err)
			return
		}
		if len(locks) == 0 {
			continue
		}
		evs, err := s.Events(ctx, locks[0].ID, audit.EventFilter{})
		if err != nil {
			errs <- fmt.Errorf("list events: %w", err)
			return
		}
		if len(evs)%2 != 0 {
			errs <- fmt.Errorf("read %d events, want an even number (whole batches)", len(evs))
			return
		}
	}
}

func testConcurrentReadsDuringWrites(t *testing.T, h Harness) {
	s := h.Open(t)
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
				Events:  []audit.Event{{Lock: key, Kind: audit.EventGrant, At: At(i)}, {Lock: key, Kind: audit.EventRenew, At: At(i)}},
				Cursors: []audit.Cursor{{Source: "src", Position: fmt.Sprint(i), At: At(i)}},
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
				if err := s.Apply(ctx, audit.Batch{Events: []audit.Event{{Lock: k, Kind: audit.EventGrant, At: At(i)}}}); err != nil {
					errs <- fmt.Errorf("side Apply: %w", err)
					return
				}
			}
		})
	}
	for range 4 {
		wg.Go(func() { readWholeBatches(s, done, errs) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	evs, err := s.Events(ctx, LockByKey(t, s, key).ID, audit.EventFilter{})
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

func testReopenKeepsData(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	key := audit.LockKey{Source: "src", Name: "orders"}
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{heldLock("src", "orders", "a", 1, 0)}})
	before := LockByKey(t, s, key)

	s = h.Reopen(t, s)
	if got := LockByKey(t, s, key); got.ID != before.ID {
		t.Errorf("lock id after reopen = %d, want %d", got.ID, before.ID)
	}
	// A reopened store knows no lock ids yet and must find the existing row.
	Apply(t, s, audit.Batch{Events: []audit.Event{{Lock: key, Kind: audit.EventRenew, At: At(1)}}})
	evs, err := s.Events(ctx, before.ID, audit.EventFilter{})
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	if len(evs) != 1 {
		t.Errorf("got %d events on the reopened lock, want 1", len(evs))
	}
	locks, err := s.Locks(ctx, audit.LockFilter{})
	if err != nil {
		t.Fatalf("Locks: %v", err)
	}
	if len(locks) != 1 {
		t.Errorf("got %d locks after reopen, want 1", len(locks))
	}
}

func testErrorsWrapContext(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Apply(ctx, audit.Batch{Cursors: []audit.Cursor{{Source: "x"}}})
	if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "apply batch") {
		t.Errorf("Apply(cancelled) error = %v, want \"apply batch: ...\" wrapping context.Canceled", err)
	}
}

func testRenewedTouchesOnlyRenewalColumnsAndSyncedEndsUnsynced(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "src", Name: "orders"}
	held := audit.TrackState{
		Lock: audit.Lock{Source: "src", Name: "orders", Kind: audit.KindRedis, State: audit.StateHeld, Holder: "a", Token: audit.Int64(1),
			AcquiredAt: At(0), RenewedAt: At(0), ExpiresAt: At(10), LeaseDuration: 10 * time.Second, ChangedAt: At(0)},
		Recent:  []audit.Tenure{{Lock: key, Seq: 1, Holder: "a", Token: audit.Int64(1), GrantedAt: At(0), LastRenewedAt: At(0), LeaseDuration: 10 * time.Second, ExpiresAt: At(10)}},
		NextSeq: 1,
	}
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{held}, Tenures: held.Recent,
		Events: []audit.Event{{Lock: key, Kind: audit.EventGrant, At: At(0), Holder: "a", Token: audit.Int64(1)}}, Synced: true})

	renew := func(sec int) audit.Event {
		return audit.Event{Lock: key, Kind: audit.EventRenew, At: At(sec), Holder: "a", Token: audit.Int64(1), TTL: 10 * time.Second}
	}
	// Two renewals stored as events only, as the recorder does between syncs.
	Apply(t, s, audit.Batch{Events: []audit.Event{renew(2), renew(4)}})
	evs, err := s.Unsynced(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Lock != key || !evs[1].At.Equal(At(4)) || evs[1].TTL != 10*time.Second {
		t.Fatalf("Unsynced = %s, want the two renewals of %s", Show(evs), key)
	}

	// The sync: only renewal columns change.
	renewed := audit.Renewal{Lock: key, Seq: 1, Renewals: 2, RenewedAt: At(4), ExpiresAt: At(14), LeaseDuration: 10 * time.Second}
	Apply(t, s, audit.Batch{Renewed: []audit.Renewal{renewed}, Synced: true})
	l := LockByKey(t, s, key)
	want := held.Lock
	want.ID, want.Class, want.RenewedAt, want.ExpiresAt = l.ID, audit.ClassLock, At(4), At(14)
	Equal(t, "lock after the sync", l, want)
	tenures, err := s.Tenures(ctx, l.ID, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	wantTenure := held.Recent[0]
	wantTenure.LockID, wantTenure.Renewals, wantTenure.LastRenewedAt, wantTenure.ExpiresAt = l.ID, 2, At(4), At(14)
	Equal(t, "tenures after the sync", tenures, []audit.Tenure{wantTenure})
	if evs, err := s.Unsynced(ctx); err != nil || len(evs) != 0 {
		t.Errorf("Unsynced after the sync = %s, %v; want none", Show(evs), err)
	}
	heldTenureReadsTheSync(t, s, key, wantTenure)
}

// heldTenureReadsTheSync checks that every read of tenures shows the
// renewals a sync wrote of the held tenure want (on its lock's row alone),
// and, once the tenure has ended and its lock been granted again, each
// tenure as its own row has it.
func heldTenureReadsTheSync(t *testing.T, s Store, key audit.LockKey, want audit.Tenure) {
	t.Helper()
	ctx := context.Background()
	byHolder, err := s.TenuresByHolder(ctx, audit.HolderFilter{Holder: want.Holder})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "the holder's tenures after the sync", byHolder, []audit.Tenure{want})
	states, _, err := s.Restore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 1 || len(states[0].Recent) != 1 {
		t.Fatalf("Restore = %+v, want the lock with its tenure", states)
	}
	Equal(t, "the restored tenure after the sync", states[0].Recent[0], want)

	// The tenure ends with one renewal more than the sync wrote, and the
	// lock is granted to b: each tenure's row is written in full.
	ended := want
	ended.Renewals, ended.LastRenewedAt, ended.ExpiresAt = want.Renewals+1, At(6), At(16)
	ended.EndedAt, ended.End = At(8), audit.EndReleased
	next := audit.Tenure{Lock: key, Seq: 2, Holder: "b", Token: audit.Int64(2), GrantedAt: At(9), LastRenewedAt: At(9),
		LeaseDuration: 10 * time.Second, ExpiresAt: At(19)}
	st := states[0]
	st.Lock.Holder, st.Lock.Token, st.Lock.AcquiredAt, st.Lock.RenewedAt, st.Lock.ExpiresAt, st.Lock.ChangedAt =
		"b", audit.Int64(2), At(9), At(9), At(19), At(9)
	st.Recent, st.NextSeq = []audit.Tenure{ended, next}, 2
	Apply(t, s, audit.Batch{Locks: []audit.TrackState{st}, Tenures: st.Recent, Synced: true})
	tenures, err := s.Tenures(ctx, want.LockID, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	next.LockID = want.LockID
	Equal(t, "tenures after the end and the next grant", tenures, []audit.Tenure{ended, next})
}

func testSizeGrowsWithEvents(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	before, err := s.Size(ctx)
	if err != nil || before <= 0 {
		t.Fatalf("Size of an empty store = %d, %v", before, err)
	}
	var b audit.Batch
	for i := range 5000 {
		b.Events = append(b.Events, audit.Event{Lock: audit.LockKey{Source: "src", Name: "orders"}, Kind: audit.EventRenew, At: At(i), Holder: "worker-1"})
	}
	Apply(t, s, b)
	after, err := s.Size(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if per := float64(after-before) / 5000; per < 20 || per > 200 {
		t.Errorf("Size grew by %.0f bytes per event, want a row and its index entry's worth", per)
	}
}

// A sync round of many locks spans batches: the first notes the newest event
// (SyncMark), the last says the rows hold every event up to that note
// (SyncedToMark). Renewals stored in between stay unsynced, and so does all
// of it until the round ends.
func testSyncMarkSpansBatches(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	a, b := audit.LockKey{Source: "src", Name: "a"}, audit.LockKey{Source: "src", Name: "b"}
	var grants audit.Batch
	for i, key := range []audit.LockKey{a, b} {
		st := heldLock(key.Source, key.Name, "h", int64(i+1), 0)
		st.Recent = []audit.Tenure{{Lock: key, Seq: 1, Holder: "h", Token: audit.Int64(int64(i + 1)), GrantedAt: At(0),
			LastRenewedAt: At(0), LeaseDuration: 10 * time.Second, ExpiresAt: At(10)}}
		grants.Locks = append(grants.Locks, st)
		grants.Tenures = append(grants.Tenures, st.Recent...)
		grants.Events = append(grants.Events, audit.Event{Lock: key, Kind: audit.EventGrant, At: At(0), Holder: "h", Token: audit.Int64(int64(i + 1))})
	}
	grants.Synced = true
	Apply(t, s, grants)

	renew := func(key audit.LockKey, sec int) audit.Event {
		return audit.Event{Lock: key, Kind: audit.EventRenew, At: At(sec), Holder: "h", TTL: 10 * time.Second}
	}
	renewed := func(key audit.LockKey, renewals int64, sec int) audit.Renewal {
		return audit.Renewal{Lock: key, Seq: 1, Renewals: renewals, RenewedAt: At(sec), ExpiresAt: At(sec + 10), LeaseDuration: 10 * time.Second}
	}
	unsynced := func(what string, want ...int) {
		t.Helper()
		evs, err := s.Unsynced(ctx)
		if err != nil {
			t.Fatalf("Unsynced %s: %v", what, err)
		}
		var got []int
		for _, e := range evs {
			got = append(got, int(e.At.Sub(T0)/time.Second))
		}
		Equal(t, "seconds of the renewals Unsynced returns "+what, got, want)
	}

	Apply(t, s, audit.Batch{Events: []audit.Event{renew(a, 1), renew(b, 2)}})
	// The round's first chunk, stored with a renewal of its own: the mark.
	Apply(t, s, audit.Batch{Events: []audit.Event{renew(a, 3)}, Renewed: []audit.Renewal{renewed(a, 2, 3)}, SyncMark: true})
	Apply(t, s, audit.Batch{Events: []audit.Event{renew(a, 4)}})
	unsynced("in the round", 1, 2, 3, 4)
	Apply(t, s, audit.Batch{Renewed: []audit.Renewal{renewed(b, 1, 2)}, SyncedToMark: true})
	unsynced("after the round", 4)
	if l := LockByKey(t, s, b); !l.RenewedAt.Equal(At(2)) {
		t.Errorf("lock b renewed at %s, want the round's 2s", l.RenewedAt)
	}

	// The note is durable: a restart replays from it.
	s = h.Reopen(t, s)
	unsynced("after a reopen", 4)

	// One batch may start and end a round.
	Apply(t, s, audit.Batch{Events: []audit.Event{renew(b, 5)}, Renewed: []audit.Renewal{renewed(a, 3, 4), renewed(b, 2, 5)},
		SyncMark: true, SyncedToMark: true})
	unsynced("after a round of one batch")
}
