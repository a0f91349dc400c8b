package storetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// retentionStory stores two tenures of one lock: the first granted at 0,
// renewed at 10, 20 and 30 (margins 0.9, 0.2 and 0.5) and released at 35,
// with an accepted write at 15; the second granted at 40 and renewed at 50
// and 60. Findings at 20 (an instant) and 30 lasting to 70. Everything is
// synced into the lock rows.
func retentionStory(t *testing.T, s Store) audit.LockKey {
	t.Helper()
	key := audit.LockKey{Source: "cache", Name: "lock:orders"}
	first := audit.Tenure{Lock: key, Seq: 1, Holder: "a", Token: audit.Int64(1), GrantedAt: At(0), Renewals: 3,
		LastRenewedAt: At(30), EndedAt: At(35), End: audit.EndReleased}
	second := audit.Tenure{Lock: key, Seq: 2, Holder: "b", Token: audit.Int64(2), GrantedAt: At(40), Renewals: 2, LastRenewedAt: At(60)}
	renew := func(sec int, ten audit.Tenure, margin float64) audit.Event {
		return audit.Event{Lock: key, Kind: audit.EventRenew, At: At(sec), Holder: ten.Holder, Token: ten.Token,
			Seq: ten.Seq, Detail: map[string]any{"margin_ratio": margin}}
	}
	events := []audit.Event{
		{Lock: key, Kind: audit.EventGrant, At: At(0), Holder: "a", Token: audit.Int64(1)},
		renew(10, first, 0.9),
		{Lock: key, Kind: audit.EventWriteAccepted, At: At(15), Holder: "a", Token: audit.Int64(1), Resource: "db"},
		renew(20, first, 0.2),
		renew(30, first, 0.5),
		{Lock: key, Kind: audit.EventRelease, At: At(35), Holder: "a", Token: audit.Int64(1)},
		{Lock: key, Kind: audit.EventGrant, At: At(40), Holder: "b", Token: audit.Int64(2)},
		renew(50, second, 0.75),
		renew(60, second, 0.8),
	}
	findings := []audit.Finding{
		{Lock: key, Kind: audit.FindingLateRenewal, At: At(20)},
		{Lock: key, Kind: audit.FindingOverlap, At: At(30), Until: At(70)},
	}
	Apply(t, s, audit.Batch{Tenures: []audit.Tenure{first, second}, Events: events, Findings: findings, Synced: true})
	return key
}

func eventTimes(t *testing.T, s Store, id int64) map[audit.EventKind][]int {
	t.Helper()
	events, err := s.Events(context.Background(), id, audit.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[audit.EventKind][]int)
	for _, e := range events {
		out[e.Kind] = append(out[e.Kind], int(e.At.Sub(T0)/time.Second))
	}
	return out
}

func testRetentionPrunesByKindAndKeepsRenewalSummaries(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := retentionStory(t, s)
	id := LockByKey(t, s, key).ID

	now := At(100)
	pruned := map[string]int{}
	r := &audit.Retainer{
		Store: s,
		// Renewals older than 55 s, grants older than 60 s, every other
		// event older than 80 s, findings that ended more than 75 s ago.
		Retention: audit.Retention{Events: 80 * time.Second, Findings: 75 * time.Second,
			Kinds: map[audit.EventKind]time.Duration{audit.EventRenew: 55 * time.Second, audit.EventGrant: 60 * time.Second}},
		Now:    func() time.Time { return now },
		Step:   2, // several steps per rule
		Pruned: func(what string, n int) { pruned[what] += n },
	}
	if err := r.Pass(ctx); err != nil {
		t.Fatalf("Pass: %v", err)
	}
	Equal(t, "events left", eventTimes(t, s, id), map[audit.EventKind][]int{
		audit.EventRenew:   {50, 60},
		audit.EventRelease: {35},
		audit.EventGrant:   {40},
	})
	Equal(t, "pruned", pruned, map[string]int{"events": 5, "findings": 1})

	findings, err := s.Findings(ctx, audit.FindingFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(findings) != 1 || findings[0].Kind != audit.FindingOverlap {
		t.Errorf("findings left = %+v, want only the overlap lasting to 70 s", findings)
	}

	tenures, err := s.Tenures(ctx, id, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tenures) != 2 {
		t.Fatalf("got %d tenures, want both kept", len(tenures))
	}
	Equal(t, "first tenure's pruned renewals", tenures[0].Pruned,
		&audit.RenewalSummary{Renewals: 3, First: At(10), Last: At(30), MinMarginRatio: audit.Float64(0.2)})
	if tenures[0].Renewals != 3 {
		t.Errorf("first tenure's renewals = %d, want its count kept at 3", tenures[0].Renewals)
	}
	if tenures[1].Pruned != nil {
		t.Errorf("second tenure's pruned renewals = %+v, want nil: none pruned", tenures[1].Pruned)
	}

	// Later, the walk goes on from where it stopped and adds to the
	// summaries.
	now = At(115)
	if err := r.Pass(ctx); err != nil {
		t.Fatalf("Pass: %v", err)
	}
	Equal(t, "events left later", eventTimes(t, s, id), map[audit.EventKind][]int{
		audit.EventRenew:   {60},
		audit.EventRelease: {35},
	})
	tenures, err = s.Tenures(ctx, id, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "second tenure's pruned renewals", tenures[1].Pruned,
		&audit.RenewalSummary{Renewals: 1, First: At(50), Last: At(50), MinMarginRatio: audit.Float64(0.75)})
}

// Renewals not yet folded into their lock rows are what a restart replays:
// retention leaves them, however old.
func testRetentionKeepsUnsyncedRenewals(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := retentionStory(t, s)
	id := LockByKey(t, s, key).ID
	ten := audit.Tenure{Lock: key, Seq: 2, Holder: "b", Token: audit.Int64(2)}
	Apply(t, s, audit.Batch{Events: []audit.Event{{Lock: key, Kind: audit.EventRenew, At: At(65), Holder: "b",
		Token: ten.Token, Seq: 2}}})

	r := &audit.Retainer{Store: s, Retention: audit.Retention{Kinds: map[audit.EventKind]time.Duration{audit.EventRenew: time.Second}},
		Now: func() time.Time { return At(1000) }}
	if err := r.Pass(ctx); err != nil {
		t.Fatalf("Pass: %v", err)
	}
	Equal(t, "renewals left", eventTimes(t, s, id)[audit.EventRenew], []int{65})
	unsynced, err := s.Unsynced(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(unsynced) != 1 {
		t.Errorf("unsynced = %d renewals, want the one", len(unsynced))
	}
}

// A renewal stored before renewals named their tenure is summarised under
// the tenure granted last before it, with the margin from its detail.
func testRetentionSummarisesRenewalsStoredWithoutTheirTenure(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "cache", Name: "lock:old"}
	tenures := []audit.Tenure{
		{Lock: key, Seq: 1, Holder: "a", GrantedAt: At(0), EndedAt: At(20), End: audit.EndExpired},
		{Lock: key, Seq: 2, Holder: "b", GrantedAt: At(20)},
	}
	events := []audit.Event{
		{Lock: key, Kind: audit.EventRenew, At: At(5), Holder: "a", Detail: map[string]any{"margin_ratio": 0.4}},
		{Lock: key, Kind: audit.EventRenew, At: At(25), Holder: "b", Detail: map[string]any{"margin_ratio": 0.6}},
		{Lock: key, Kind: audit.EventRenew, At: At(30), Holder: "b"},
		{Lock: key, Kind: audit.EventRelease, At: At(40), Holder: "b"}, // the newest event, which a store may keep
	}
	Apply(t, s, audit.Batch{Tenures: tenures, Events: events, Synced: true})
	r := &audit.Retainer{Store: s, Retention: audit.Retention{Kinds: map[audit.EventKind]time.Duration{audit.EventRenew: time.Second}},
		Now: func() time.Time { return At(100) }}
	if err := r.Pass(ctx); err != nil {
		t.Fatalf("Pass: %v", err)
	}
	got, err := s.Tenures(ctx, LockByKey(t, s, key).ID, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "summaries", []*audit.RenewalSummary{got[0].Pruned, got[1].Pruned}, []*audit.RenewalSummary{
		{Renewals: 1, First: At(5), Last: At(5), MinMarginRatio: audit.Float64(0.4)},
		{Renewals: 2, First: At(25), Last: At(30), MinMarginRatio: audit.Float64(0.6)},
	})
}

func testPruneEventsRejectsANonPositiveLimit(t *testing.T, h Harness) {
	s := h.Open(t)
	if _, err := s.PruneEvents(context.Background(), audit.PruneStep{Rule: audit.EventRule{Others: true}}); err == nil {
		t.Error("PruneEvents with limit 0 = nil error, want one")
	}
}

// A retainer that is not active (another replica prunes) prunes nothing
// however often its passes come round, and prunes as soon as it is.
func testRetainerPrunesOnlyWhileActive(t *testing.T, h Harness) {
	s := h.Open(t)
	key := retentionStory(t, s)
	id := LockByKey(t, s, key).ID
	before := len(eventTimes(t, s, id)[audit.EventRenew])
	var active atomic.Bool
	var asked atomic.Int32
	r := &audit.Retainer{Store: s, Retention: audit.Retention{Kinds: map[audit.EventKind]time.Duration{audit.EventRenew: time.Second}},
		Now: func() time.Time { return At(1000) }, Every: 5 * time.Millisecond,
		Active: func() bool { asked.Add(1); return active.Load() }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, "three passes skipped", func() bool { return asked.Load() >= 3 })
	if n := len(eventTimes(t, s, id)[audit.EventRenew]); n != before || before == 0 {
		t.Fatalf("renewals while inactive: %d of %d left, want all (and some)", n, before)
	}
	active.Store(true)
	waitUntil(t, "the active retainer to prune", func() bool { return len(eventTimes(t, s, id)[audit.EventRenew]) < before })
}
