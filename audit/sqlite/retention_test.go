package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// retentionStory stores two tenures of one lock: the first granted at 0,
// renewed at 10, 20 and 30 (margins 0.9, 0.2 and 0.5) and released at 35,
// with an accepted write at 15; the second granted at 40 and renewed at 50
// and 60. Findings at 20 (an instant) and 30 lasting to 70. Everything is
// synced into the lock rows.
func retentionStory(t *testing.T, s *Store) audit.LockKey {
	t.Helper()
	key := audit.LockKey{Source: "cache", Name: "lock:orders"}
	first := audit.Tenure{Lock: key, Seq: 1, Holder: "a", Token: audit.Int64(1), GrantedAt: at(0), Renewals: 3,
		LastRenewedAt: at(30), EndedAt: at(35), End: audit.EndReleased}
	second := audit.Tenure{Lock: key, Seq: 2, Holder: "b", Token: audit.Int64(2), GrantedAt: at(40), Renewals: 2, LastRenewedAt: at(60)}
	renew := func(sec int, ten audit.Tenure, margin float64) audit.Event {
		return audit.Event{Lock: key, Kind: audit.EventRenew, At: at(sec), Holder: ten.Holder, Token: ten.Token,
			Seq: ten.Seq, Detail: map[string]any{"margin_ratio": margin}}
	}
	events := []audit.Event{
		{Lock: key, Kind: audit.EventGrant, At: at(0), Holder: "a", Token: audit.Int64(1)},
		renew(10, first, 0.9),
		{Lock: key, Kind: audit.EventWriteAccepted, At: at(15), Holder: "a", Token: audit.Int64(1), Resource: "db"},
		renew(20, first, 0.2),
		renew(30, first, 0.5),
		{Lock: key, Kind: audit.EventRelease, At: at(35), Holder: "a", Token: audit.Int64(1)},
		{Lock: key, Kind: audit.EventGrant, At: at(40), Holder: "b", Token: audit.Int64(2)},
		renew(50, second, 0.75),
		renew(60, second, 0.8),
	}
	findings := []audit.Finding{
		{Lock: key, Kind: audit.FindingLateRenewal, At: at(20)},
		{Lock: key, Kind: audit.FindingOverlap, At: at(30), Until: at(70)},
	}
	apply(t, s, audit.Batch{Tenures: []audit.Tenure{first, second}, Events: events, Findings: findings, Synced: true})
	return key
}

func eventTimes(t *testing.T, s *Store, id int64) map[audit.EventKind][]int {
	t.Helper()
	events, err := s.Events(context.Background(), id, audit.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[audit.EventKind][]int)
	for _, e := range events {
		out[e.Kind] = append(out[e.Kind], int(e.At.Sub(t0)/time.Second))
	}
	return out
}

func TestRetentionPrunesByKindAndKeepsRenewalSummaries(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := retentionStory(t, s)
	id := lockByKey(t, s, key).ID

	now := at(100)
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
	equal(t, "events left", eventTimes(t, s, id), map[audit.EventKind][]int{
		audit.EventRenew:   {50, 60},
		audit.EventRelease: {35},
		audit.EventGrant:   {40},
	})
	equal(t, "pruned", pruned, map[string]int{"events": 5, "findings": 1})

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
	equal(t, "first tenure's pruned renewals", tenures[0].Pruned,
		&audit.RenewalSummary{Renewals: 3, First: at(10), Last: at(30), MinMarginRatio: audit.Float64(0.2)})
	if tenures[0].Renewals != 3 {
		t.Errorf("first tenure's renewals = %d, want its count kept at 3", tenures[0].Renewals)
	}
	if tenures[1].Pruned != nil {
		t.Errorf("second tenure's pruned renewals = %+v, want nil: none pruned", tenures[1].Pruned)
	}

	// Later, the walk goes on from where it stopped and adds to the
	// summaries.
	now = at(115)
	if err := r.Pass(ctx); err != nil {
		t.Fatalf("Pass: %v", err)
	}
	equal(t, "events left later", eventTimes(t, s, id), map[audit.EventKind][]int{
		audit.EventRenew:   {60},
		audit.EventRelease: {35},
	})
	tenures, err = s.Tenures(ctx, id, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "second tenure's pruned renewals", tenures[1].Pruned,
		&audit.RenewalSummary{Renewals: 1, First: at(50), Last: at(50), MinMarginRatio: audit.Float64(0.75)})
}

// Renewals not yet folded into their lock rows are what a restart replays:
// retention leaves them, however old.
func TestRetentionKeepsUnsyncedRenewals(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := retentionStory(t, s)
	id := lockByKey(t, s, key).ID
	ten := audit.Tenure{Lock: key, Seq: 2, Holder: "b", Token: audit.Int64(2)}
	apply(t, s, audit.Batch{Events: []audit.Event{{Lock: key, Kind: audit.EventRenew, At: at(65), Holder: "b",
		Token: ten.Token, Seq: 2}}})

	r := &audit.Retainer{Store: s, Retention: audit.Retention{Kinds: map[audit.EventKind]time.Duration{audit.EventRenew: time.Second}},
		Now: func() time.Time { return at(1000) }}
	if err := r.Pass(ctx); err != nil {
		t.Fatalf("Pass: %v", err)
	}
	equal(t, "renewals left", eventTimes(t, s, id)[audit.EventRenew], []int{65})
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
func TestRetentionSummarisesRenewalsStoredWithoutTheirTenure(t *testing.T) {
	s, _ := openStore(t)
	ctx := context.Background()
	key := audit.LockKey{Source: "cache", Name: "lock:old"}
	tenures := []audit.Tenure{
		{Lock: key, Seq: 1, Holder: "a", GrantedAt: at(0), EndedAt: at(20), End: audit.EndExpired},
		{Lock: key, Seq: 2, Holder: "b", GrantedAt: at(20)},
	}
	events := []audit.Event{
		{Lock: key, Kind: audit.EventRenew, At: at(5), Holder: "a", Detail: map[string]any{"margin_ratio": 0.4}},
		{Lock: key, Kind: audit.EventRenew, At: at(25), Holder: "b", Detail: map[string]any{"margin_ratio": 0.6}},
		{Lock: key, Kind: audit.EventRenew, At: at(30), Holder: "b"},
	}
	apply(t, s, audit.Batch{Tenures: tenures, Events: events, Synced: true})
	r := &audit.Retainer{Store: s, Retention: audit.Retention{Kinds: map[audit.EventKind]time.Duration{audit.EventRenew: time.Second}},
		Now: func() time.Time { return at(100) }}
	if err := r.Pass(ctx); err != nil {
		t.Fatalf("Pass: %v", err)
	}
	got, err := s.Tenures(ctx, lockByKey(t, s, key).ID, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "summaries", []*audit.RenewalSummary{got[0].Pruned, got[1].Pruned}, []*audit.RenewalSummary{
		{Renewals: 1, First: at(5), Last: at(5), MinMarginRatio: audit.Float64(0.4)},
		{Renewals: 2, First: at(25), Last: at(30), MinMarginRatio: audit.Float64(0.6)},
	})
}

func TestPruneEventsRejectsANonPositiveLimit(t *testing.T) {
	s, _ := openStore(t)
	if _, err := s.PruneEvents(context.Background(), audit.PruneStep{Rule: audit.EventRule{Others: true}}); err == nil {
		t.Error("PruneEvents with limit 0 = nil error, want one")
	}
}
