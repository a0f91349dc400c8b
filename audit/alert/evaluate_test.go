package alert

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

var t0 = time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// held is a lock that holder renewed at renewed seconds, with a lease of lease seconds.
func held(source, name, holder string, renewed, lease float64) audit.Lock {
	d := time.Duration(lease * float64(time.Second))
	return audit.Lock{Source: source, Name: name, Class: audit.ClassLock, State: audit.StateHeld, Holder: holder,
		Token: audit.Int64(41), RenewedAt: at(renewed), ExpiresAt: at(renewed).Add(d), LeaseDuration: d, ChangedAt: at(0)}
}

func heartbeat(l audit.Lock) audit.Lock { l.Class = audit.ClassHeartbeat; return l }

// finding is a finding of kind on source/name, raised at s seconds.
func finding(kind audit.FindingKind, source, name string, s float64, holders ...string) audit.Finding {
	return audit.Finding{Lock: audit.LockKey{Source: source, Name: name}, Kind: kind, Severity: kind.Severity(),
		At: at(s), Holders: holders, Summary: string(kind) + " on " + name}
}

// step is one evaluation and the alerts it must report, as "Name source/lock holder".
type step struct {
	at       float64
	in       Input
	firing   []string
	resolved []string
}

// id names an alert in a test's words.
func id(a Alert) string {
	s := a.Name() + " " + a.Labels[LabelSource]
	if l := a.Labels[LabelLock]; l != "" {
		s += "/" + l
	}
	if h := a.Labels[LabelHolder]; h != "" {
		s += " " + h
	}
	return s
}

// play runs steps through one evaluator, checking each one's alerts.
func play(t *testing.T, cfg Config, steps []step) {
	t.Helper()
	e := New(cfg)
	for _, s := range steps {
		var firing, resolved []string
		for _, a := range e.Evaluate(at(s.at), s.in) {
			if a.Firing() {
				firing = append(firing, id(a))
				continue
			}
			if !a.EndsAt.Equal(at(s.at)) {
				t.Errorf("at %vs: %s ends at %v, want the evaluation time", s.at, id(a), a.EndsAt)
			}
			resolved = append(resolved, id(a))
		}
		if !slices.Equal(firing, s.firing) {
			t.Errorf("at %vs: firing = %q, want %q", s.at, firing, s.firing)
		}
		if !slices.Equal(resolved, s.resolved) {
			t.Errorf("at %vs: resolved = %q, want %q", s.at, resolved, s.resolved)
		}
	}
}

func locks(l ...audit.Lock) Input       { return Input{Locks: l} }
func findings(f ...audit.Finding) Input { return Input{Findings: f} }
func sources(s ...audit.Source) Input   { return Input{Sources: s} }
func none(...string) []string           { return nil }
func alerts(ids ...string) []string     { return ids }
func blindSince(name string, s float64) audit.Source {
	return audit.Source{Name: name, Kind: audit.KindEtcd, State: audit.SourceDown, BlindSince: at(s)}
}

func TestNearExpiry(t *testing.T) {
	// A 10s lease with the default margin (25%) is near expiry with less
	// than 2.5s left: from 7.5s after its renewal.
	tests := []struct {
		name  string
		steps []step
	}{
		{"FiresWithoutRenewalThenClearsOnRenewal", []step{
			{at: 5, in: locks(held("prod", "/locks/orders", "worker-a", 0, 10))},
			{at: 7.4, in: locks(held("prod", "/locks/orders", "worker-a", 0, 10))},
			{at: 7.6, in: locks(held("prod", "/locks/orders", "worker-a", 0, 10)), firing: alerts("LeaseNearExpiry prod//locks/orders worker-a")},
			{at: 8.6, in: locks(held("prod", "/locks/orders", "worker-a", 0, 10)), firing: alerts("LeaseNearExpiry prod//locks/orders worker-a")},
			// worker-a renews at 9s, late but in time
			{at: 9.5, in: locks(held("prod", "/locks/orders", "worker-a", 9, 10)), resolved: alerts("LeaseNearExpiry prod//locks/orders worker-a")},
			{at: 10.5, in: locks(held("prod", "/locks/orders", "worker-a", 9, 10))},
		}},
		{"ClearsOnRelease", []step{
			{at: 8, in: locks(held("prod", "/locks/orders", "worker-a", 0, 10)), firing: alerts("LeaseNearExpiry prod//locks/orders worker-a")},
			{at: 9, in: locks(audit.Lock{Source: "prod", Name: "/locks/orders", Class: audit.ClassLock, State: audit.StateFree}),
				resolved: alerts("LeaseNearExpiry prod//locks/orders worker-a")},
		}},
		{"StillFiresPastExpiryUntilTheTrackerExpiresIt", []step{
			{at: 9, in: locks(held("prod", "/locks/orders", "worker-a", 0, 10)), firing: alerts("LeaseNearExpiry prod//locks/orders worker-a")},
			{at: 11, in: locks(held("prod", "/locks/orders", "worker-a", 0, 10)), firing: alerts("LeaseNearExpiry prod//locks/orders worker-a")},
		}},
		{"NewHolderIsANewAlert", []step{
			{at: 8, in: locks(held("prod", "/locks/orders", "worker-a", 0, 10)), firing: alerts("LeaseNearExpiry prod//locks/orders worker-a")},
			{at: 18.5, in: locks(held("prod", "/locks/orders", "worker-b", 10, 10)),
				firing: alerts("LeaseNearExpiry prod//locks/orders worker-b"), resolved: alerts("LeaseNearExpiry prod//locks/orders worker-a")},
		}},
		{"JudgedAsOfTheCollectorsLiveTime", []step{
			// The collector has delivered every change up to 5s only: the
			// lease may have been renewed since, so it is not near expiry.
			{at: 9, in: Input{Locks: []audit.Lock{held("prod", "/locks/orders", "worker-a", 0, 10)}, Live: map[string]time.Time{"prod": at(5)}}},
			{at: 9, in: Input{Locks: []audit.Lock{held("prod", "/locks/orders", "worker-a", 0, 10)}, Live: map[string]time.Time{"prod": at(8)}},
				firing: alerts("LeaseNearExpiry prod//locks/orders worker-a")},
			// Not yet live since a start: nothing is judged.
			{at: 20, in: Input{Locks: []audit.Lock{held("prod", "/locks/orders", "worker-a", 0, 10)}, Live: map[string]time.Time{"prod": {}}},
				resolved: alerts("LeaseNearExpiry prod//locks/orders worker-a")},
			// Live ahead of the evaluation (another clock): judged at now.
			{at: 8, in: Input{Locks: []audit.Lock{held("prod", "/locks/orders", "worker-a", 0, 10)}, Live: map[string]time.Time{"prod": at(30)}},
				firing: alerts("LeaseNearExpiry prod//locks/orders worker-a")},
		}},
		{"UnknownDurationNeverFires", []step{
			{at: 100, in: locks(func() audit.Lock {
				l := held("prod", "/locks/orders", "worker-a", 0, 10)
				l.LeaseDuration, l.ExpiresAt = 0, time.Time{}
				return l
			}())},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { play(t, Config{}, tt.steps) })
	}
}

// TestNearExpirySummaryFollowsTheLease checks that an alert that keeps firing
// describes the lease as it is now: a renewal that leaves it near expiry, and
// the expiry passing unseen, each change the summary, while the fingerprint
// and start stay.
func TestNearExpirySummaryFollowsTheLease(t *testing.T) {
	e := New(Config{})
	evaluate := func(s float64, l audit.Lock) Alert {
		t.Helper()
		out := e.Evaluate(at(s), locks(l))
		if len(out) != 1 || !out[0].Firing() || out[0].Name() != LeaseNearExpiry {
			t.Fatalf("at %vs: alerts = %q, want LeaseNearExpiry firing", s, ids(out))
		}
		return out[0]
	}
	summary := func(a Alert) string { return a.Annotations[AnnotationSummary] }

	first := evaluate(8, held("prod", "/locks/orders", "worker-a", 0, 10))
	if want := "expires at 2026-11-29T03:00:10.000Z"; !strings.Contains(summary(first), want) {
		t.Fatalf("summary = %q, want it to say %q", summary(first), want)
	}
	if again := evaluate(8.25, held("prod", "/locks/orders", "worker-a", 0, 10)); summary(again) != summary(first) {
		t.Errorf("unchanged lease: summary %q, then %q", summary(first), summary(again))
	}
	// A short renewal at 8.5s: the lease now ends at 10.5s, still within
	// its margin.
	renewed := held("prod", "/locks/orders", "worker-a", 0, 10)
	renewed.RenewedAt, renewed.ExpiresAt = at(8.5), at(10.5)
	second := evaluate(8.75, renewed)
	if want := "expires at 2026-11-29T03:00:10.500Z"; !strings.Contains(summary(second), want) {
		t.Errorf("after a renewal: summary = %q, want it to say %q", summary(second), want)
	}
	if want := "renewed since 2026-11-29T03:00:08.500Z"; !strings.Contains(summary(second), want) {
		t.Errorf("after a renewal: summary = %q, want it to say %q", summary(second), want)
	}
	third := evaluate(11, renewed)
	if want := "ran out at 2026-11-29T03:00:10.500Z"; !strings.Contains(summary(third), want) {
		t.Errorf("past the expiry: summary = %q, want it to say %q", summary(third), want)
	}
	if third.Fingerprint() != first.Fingerprint() || !third.StartsAt.Equal(first.StartsAt) {
		t.Errorf("the alert changed identity: %s from %v, then %s from %v", first.Fingerprint(), first.StartsAt, third.Fingerprint(), third.StartsAt)
	}
}

func TestLeaseLost(t *testing.T) {
	// worker-a paused past its 10s lease: the tracker ended its tenure at
	// 10s and raised lease_expired; worker-b was granted the lock at 10.2s.
	lost := finding(audit.FindingLeaseExpired, "prod", "/locks/orders", 10, "worker-a")
	// worker-b renews every few seconds.
	regranted := func(renewed float64) Input {
		l := held("prod", "/locks/orders", "worker-b", renewed, 10)
		l.ChangedAt = at(10.2)
		return locks(l)
	}
	cfg := Config{Defaults: Thresholds{LostHold: time.Minute}}
	tests := []struct {
		name  string
		steps []step
	}{
		{"FiresOnceThenResolvesAfterTheNextGrant", []step{
			// The next grant is already in the evaluation that reports the
			// loss: the alert fires once all the same.
			{at: 10.5, in: Input{Locks: regranted(10.2).Locks, Findings: []audit.Finding{lost}}, firing: alerts("LeaseLost prod//locks/orders worker-a")},
			{at: 11.5, in: regranted(10.2), resolved: alerts("LeaseLost prod//locks/orders worker-a")},
			{at: 12.5, in: regranted(10.2)},
		}},
		{"WithoutAGrantResolvesAfterTheHold", []step{
			{at: 10.5, in: findings(lost), firing: alerts("LeaseLost prod//locks/orders worker-a")},
			{at: 69.9, firing: alerts("LeaseLost prod//locks/orders worker-a")},
			{at: 70, resolved: alerts("LeaseLost prod//locks/orders worker-a")},
			{at: 71},
		}},
		{"LosingAgainRestartsTheHold", []step{
			{at: 10.5, in: findings(lost), firing: alerts("LeaseLost prod//locks/orders worker-a")},
			{at: 50, in: findings(finding(audit.FindingLeaseExpired, "prod", "/locks/orders", 50, "worker-a")), firing: alerts("LeaseLost prod//locks/orders worker-a")},
			{at: 80, firing: alerts("LeaseLost prod//locks/orders worker-a")},
			{at: 110, resolved: alerts("LeaseLost prod//locks/orders worker-a")},
		}},
		{"EachHolderThatLosesIsItsOwnAlert", []step{
			{at: 10.5, in: findings(lost), firing: alerts("LeaseLost prod//locks/orders worker-a")},
			{at: 30.5, in: findings(finding(audit.FindingLeaseExpired, "prod", "/locks/orders", 30, "worker-b")),
				firing: alerts("LeaseLost prod//locks/orders worker-a", "LeaseLost prod//locks/orders worker-b")},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { play(t, cfg, tt.steps) })
	}
}

func TestLeaderless(t *testing.T) {
	// The scheduler's election was released at 600s and nobody has taken
	// it: the tracker raised leaderless a minute later.
	missing := finding(audit.FindingLeaderless, "prod", "/election/scheduler", 600, "sched-a")
	free := audit.Lock{Source: "prod", Name: "/election/scheduler", Class: audit.ClassLock, State: audit.StateFree, ChangedAt: at(600)}
	retaken := func(s float64) audit.Lock {
		l := held("prod", "/election/scheduler", "sched-b", s, 10)
		l.ChangedAt = at(s)
		return l
	}
	const day = 24 * 3600
	play(t, Config{Defaults: Thresholds{LostHold: time.Minute}}, []step{
		{at: 660.5, in: Input{Locks: []audit.Lock{free}, Findings: []audit.Finding{missing}}, firing: alerts("Leaderless prod//election/scheduler")},
		// No hold runs out: a stalled election stays loud.
		{at: day, in: locks(free), firing: alerts("Leaderless prod//election/scheduler")},
		{at: day + 1, in: locks(retaken(day + 0.5)), resolved: alerts("Leaderless prod//election/scheduler")},
		{at: day + 2, in: locks(retaken(day + 0.5))},
	})

	// A replica that takes the source over a day later goes on firing it,
	// from its start; one for a lock held again since does not come back.
	e := New(Config{})
	other := finding(audit.FindingLeaderless, "prod", "/election/compactor", 100, "comp-a")
	compactor := held("prod", "/election/compactor", "comp-b", day, 10)
	compactor.ChangedAt = at(200)
	e.Resume(at(day), []audit.Finding{missing, other}, []audit.Lock{free, compactor})
	out := e.Evaluate(at(day+1), locks(free, compactor))
	if got := ids(out); !slices.Equal(got, []string{"Leaderless prod//election/scheduler"}) || !out[0].StartsAt.Equal(missing.At) {
		t.Fatalf("after the takeover: %q from %v, want only the scheduler's alert firing from %v", got, out[0].StartsAt, missing.At)
	}
}

func TestLeadershipFlapping(t *testing.T) {
	flap := func(s float64) audit.Finding {
		return finding(audit.FindingFlapping, "prod", "/election/scheduler", s, "sched-a", "sched-b")
	}
	play(t, Config{}, []step{
		{at: 1, in: findings(flap(0.5)), firing: alerts("LeadershipFlapping prod//election/scheduler")},
		// The tracker raises the next finding half an hour later while the
		// lock goes on flapping: the alert fires on, without a resolve.
		{at: 1800, in: findings(flap(1800)), firing: alerts("LeadershipFlapping prod//election/scheduler")},
		{at: 3600.5, firing: alerts("LeadershipFlapping prod//election/scheduler")},
		{at: 5399, firing: alerts("LeadershipFlapping prod//election/scheduler")},
		{at: 5400, resolved: alerts("LeadershipFlapping prod//election/scheduler")},
		{at: 5401},
	})
}

func TestHealthWarningsRaiseNoAlert(t *testing.T) {
	play(t, Config{}, []step{{at: 1, in: findings(
		finding(audit.FindingTightRenewal, "prod", "/locks/orders", 0.5, "worker-a"),
		finding(audit.FindingClockSkew, "prod", "/locks/orders", 0.5, "worker-a"),
	)}})
}

func TestFencingViolation(t *testing.T) {
	cfg := Config{Defaults: Thresholds{FencingHold: 10 * time.Minute}}
	for _, kind := range []audit.FindingKind{audit.FindingOverlap, audit.FindingUnfencedWrite, audit.FindingTokenRegression, audit.FindingTokenReuse} {
		t.Run(string(kind), func(t *testing.T) {
			play(t, cfg, []step{
				{at: 1, in: findings(finding(kind, "prod", "/locks/orders", 0.5, "worker-a", "worker-b")), firing: alerts("FencingViolation prod//locks/orders")},
				{at: 300, firing: alerts("FencingViolation prod//locks/orders")},
				{at: 600.5, resolved: alerts("FencingViolation prod//locks/orders")},
				{at: 601},
			})
		})
	}
	t.Run("NotFromWarningsOrInfo", func(t *testing.T) {
		play(t, cfg, []step{{at: 1, in: findings(
			finding(audit.FindingTokenSkip, "prod", "/locks/orders", 0.5),
			finding(audit.FindingLateRenewal, "prod", "/locks/orders", 0.5, "worker-a"),
			finding(audit.FindingStaleWrite, "prod", "/locks/orders", 0.5, "worker-a"),
			finding(audit.FindingBlindWindow, "prod", "/locks/orders", 0.5),
		)}})
	})
	t.Run("ALaterViolationOnTheLockExtendsTheHold", func(t *testing.T) {
		play(t, cfg, []step{
			{at: 1, in: findings(finding(audit.FindingOverlap, "prod", "/locks/orders", 0.5, "worker-a", "worker-b")), firing: alerts("FencingViolation prod//locks/orders")},
			{at: 400, in: findings(finding(audit.FindingUnfencedWrite, "prod", "/locks/orders", 400, "worker-a")), firing: alerts("FencingViolation prod//locks/orders")},
			{at: 700, firing: alerts("FencingViolation prod//locks/orders")},
			{at: 1000, resolved: alerts("FencingViolation prod//locks/orders")},
		})
	})
	t.Run("OnePerLock", func(t *testing.T) {
		play(t, cfg, []step{
			{at: 1, in: findings(
				finding(audit.FindingOverlap, "prod", "/locks/orders", 0.5, "worker-a", "worker-b"),
				finding(audit.FindingTokenReuse, "prod", "/locks/orders", 0.5, "worker-a", "worker-b"),
				finding(audit.FindingOverlap, "cache", "lock:invoices", 0.5, "host-1", "host-2"),
			), firing: alerts("FencingViolation cache/lock:invoices", "FencingViolation prod//locks/orders")},
		})
	})
}

func TestHeartbeats(t *testing.T) {
	// A node stops renewing its heartbeat Lease: near expiry, then expired.
	node := heartbeat(held("cluster-a", "kube-node-lease/node-1", "node-1", 0, 40))
	expired := finding(audit.FindingLeaseExpired, "cluster-a", "kube-node-lease/node-1", 40, "node-1")
	steps := func(want func(...string) []string) []step {
		return []step{
			{at: 35, in: locks(node), firing: want("LeaseNearExpiry cluster-a/kube-node-lease/node-1 node-1")},
			{at: 41, in: Input{Locks: []audit.Lock{node}, Findings: []audit.Finding{expired}},
				firing: want("LeaseLost cluster-a/kube-node-lease/node-1 node-1", "LeaseNearExpiry cluster-a/kube-node-lease/node-1 node-1")},
		}
	}
	t.Run("ExcludedByDefault", func(t *testing.T) { play(t, Config{}, steps(none)) })
	t.Run("IncludedWhenAskedFor", func(t *testing.T) { play(t, Config{IncludeHeartbeats: true}, steps(alerts)) })
}

func TestThresholds(t *testing.T) {
	cfg := Config{
		Defaults: Thresholds{RenewMarginRatio: 0.25, BlindAfter: time.Minute},
		Rules: []Rule{
			{Selector: audit.Selector{Source: "prod"}, Thresholds: Thresholds{RenewMarginRatio: 0.3, BlindAfter: 10 * time.Second}},
			{Selector: audit.Selector{Lock: "/locks/*"}, Thresholds: Thresholds{RenewMarginRatio: 0.4}},
			{Selector: audit.Selector{Lock: "/locks/billing-*"}, Thresholds: Thresholds{RenewMarginRatio: 0.5, LostHold: time.Hour}},
			{Selector: audit.Selector{Lock: "/locks/billing-ledger"}, Thresholds: Thresholds{RenewMarginRatio: 0.6}},
			{Selector: audit.Selector{Source: "prod", Lock: "/locks/*"}, Thresholds: Thresholds{RenewMarginRatio: 0.45}},
			{Selector: audit.Selector{Lock: "/locks/*-ledger"}, Thresholds: Thresholds{RenewMarginRatio: 0.55}}, // ties with billing-*: the earlier wins
		},
	}
	tests := []struct {
		source, lock string
		ratio        float64
		lostHold     time.Duration
		why          string
	}{
		{"staging", "election/leader", 0.25, DefaultLostHold, "no rule: the defaults"},
		{"prod", "election/leader", 0.3, DefaultLostHold, "the source's rule"},
		{"staging", "/locks/orders", 0.4, DefaultLostHold, "a lock pattern beats the defaults"},
		{"prod", "/locks/orders", 0.45, DefaultLostHold, "source and pattern beat the pattern alone and the source alone"},
		{"staging", "/locks/billing-ledgers", 0.5, time.Hour, "more literal characters beat fewer; an earlier tie wins"},
		{"staging", "/locks/billing-ledger", 0.6, time.Hour, "an exact name beats patterns, which still set what it leaves unset"},
		{"prod", "/locks/billing-ledger", 0.45, time.Hour, "source and pattern beat an exact name alone"},
		{"staging", "/locks/a/b", 0.25, DefaultLostHold, "'*' does not cross '/'"},
	}
	for _, tt := range tests {
		t.Run(tt.source+"/"+tt.lock, func(t *testing.T) {
			got := cfg.For(tt.source, tt.lock)
			if got.RenewMarginRatio != tt.ratio || got.LostHold != tt.lostHold {
				t.Fatalf("For(%q, %q) = ratio %v, lost hold %v; want %v, %v (%s)", tt.source, tt.lock, got.RenewMarginRatio, got.LostHold, tt.ratio, tt.lostHold, tt.why)
			}
		})
	}
	if got := cfg.For("prod", "").BlindAfter; got != 10*time.Second {
		t.Errorf("prod blind_after = %v, want 10s", got)
	}

	// The same 10s leases 5.6s after renewal (4.4s left): near expiry where
	// the margin is 45% or more, not where it is 25%, 30% or 40%.
	t.Run("NearExpiryUsesTheLocksOwnMargin", func(t *testing.T) {
		in := locks(
			held("prod", "/locks/orders", "worker-a", 0, 10),
			held("prod", "election/leader", "worker-b", 0, 10),
			held("staging", "/locks/billing-ledger", "worker-c", 0, 10),
			held("staging", "/locks/orders", "worker-d", 0, 10),
		)
		play(t, cfg, []step{{at: 5.6, in: in, firing: alerts(
			"LeaseNearExpiry prod//locks/orders worker-a",
			"LeaseNearExpiry staging//locks/billing-ledger worker-c",
		)}})
	})
}

func TestCollectorBlind(t *testing.T) {
	cfg := Config{Defaults: Thresholds{BlindAfter: 30 * time.Second}}
	up := audit.Source{Name: "prod", Kind: audit.KindEtcd, State: audit.SourceUp}
	t.Run("FiresAfterTheThresholdAndResolvesWhenItSeesAgain", func(t *testing.T) {
		play(t, cfg, []step{
			{at: 0, in: sources(up)},
			{at: 29, in: sources(blindSince("prod", 0))},
			{at: 30, in: sources(blindSince("prod", 0)), firing: alerts("CollectorBlind prod")},
			{at: 31, in: sources(blindSince("prod", 0)), firing: alerts("CollectorBlind prod")},
			{at: 40, in: sources(up), resolved: alerts("CollectorBlind prod")},
			{at: 41, in: sources(up)},
		})
	})
	t.Run("DownWithoutBlindSinceCountsFromWhenFirstSeenDown", func(t *testing.T) {
		never := audit.Source{Name: "prod", Kind: audit.KindEtcd, State: audit.SourceDown} // never connected
		play(t, cfg, []step{
			{at: 5, in: sources(never)},
			{at: 34, in: sources(never)},
			{at: 35, in: sources(never), firing: alerts("CollectorBlind prod")},
			{at: 36, in: sources(up), resolved: alerts("CollectorBlind prod")},
		})
	})
}

// A sender re-sends what fires every second: the same alert must come back
// with the same identity and start, and a resolution only once.
func TestRepeatedEvaluation(t *testing.T) {
	e := New(Config{})
	in := Input{
		Locks:    []audit.Lock{held("prod", "/locks/orders", "worker-a", 0, 10)},
		Findings: []audit.Finding{finding(audit.FindingOverlap, "prod", "/locks/orders", 7, "worker-a", "worker-b")},
		Sources:  []audit.Source{blindSince("prod", -60)},
	}
	first := e.Evaluate(at(8), in)
	if len(first) != 3 {
		t.Fatalf("first evaluation = %d alerts, want 3: %q", len(first), ids(first))
	}
	in.Findings = nil
	for s := 8.5; s < 10; s += 0.5 {
		again := e.Evaluate(at(s), in)
		if len(again) != len(first) {
			t.Fatalf("at %vs: %q, want %q again", s, ids(again), ids(first))
		}
		for i := range again {
			if again[i].Fingerprint() != first[i].Fingerprint() || !again[i].StartsAt.Equal(first[i].StartsAt) || !again[i].Firing() {
				t.Fatalf("at %vs: %s (fingerprint %s, starts %v), want %s (fingerprint %s, starts %v) still firing",
					s, id(again[i]), again[i].Fingerprint(), again[i].StartsAt, id(first[i]), first[i].Fingerprint(), first[i].StartsAt)
			}
		}
	}
	in.Locks[0] = held("prod", "/locks/orders", "worker-a", 10, 10)
	in.Sources[0] = audit.Source{Name: "prod", State: audit.SourceUp}
	resolved := e.Evaluate(at(10.5), in)
	if got := ids(resolved); !slices.Equal(got, []string{"FencingViolation prod//locks/orders", "CollectorBlind prod resolved", "LeaseNearExpiry prod//locks/orders worker-a resolved"}) {
		t.Fatalf("after the renewal and reconnect = %q", got)
	}
	if got := ids(e.Evaluate(at(11), in)); !slices.Equal(got, []string{"FencingViolation prod//locks/orders"}) {
		t.Fatalf("next evaluation = %q, want only the fencing violation, resolutions not repeated", got)
	}
}

func ids(alerts []Alert) []string {
	var s []string
	for _, a := range alerts {
		if a.Firing() {
			s = append(s, id(a))
		} else {
			s = append(s, id(a)+" resolved")
		}
	}
	return s
}

// What a receiver shows: labels, a plain summary, and when it started.
func TestAlertContents(t *testing.T) {
	got := New(Config{}).Evaluate(at(8), Input{
		Locks: []audit.Lock{held("prod", "/locks/orders", "worker-a", 0, 10)},
		Findings: []audit.Finding{
			finding(audit.FindingLeaseExpired, "prod", "/locks/jobs", 7, "worker-z"),
			finding(audit.FindingOverlap, "prod", "/locks/orders", 7.5, "worker-a", "worker-b"),
			finding(audit.FindingTokenReuse, "prod", "/locks/orders", 7.5, "worker-a", "worker-b"),
		},
		Sources: []audit.Source{blindSince("cache", -22)},
	})
	want := []struct {
		labels   string
		startsAt time.Time
		summary  string
	}{
		{"alertname=CollectorBlind severity=warning source=cache", at(8),
			"the cache collector has not seen its backend for 30s, since 2026-11-29T02:59:38Z"},
		{"alertname=FencingViolation lock=/locks/orders severity=critical source=prod", at(7.5),
			"fencing failed on prod//locks/orders (overlap, token_reuse)"},
		{"alertname=LeaseLost holder=worker-z lock=/locks/jobs severity=warning source=prod", at(7),
			"worker-z lost prod//locks/jobs: its lease expired while it held the lock"},
		{"alertname=LeaseNearExpiry holder=worker-a lock=/locks/orders severity=warning source=prod", at(7.5),
			"worker-a's 10s lease on prod//locks/orders expires at 2026-11-29T03:00:10.000Z, within its last 2.5s, and has not been renewed since 2026-11-29T03:00:00.000Z"},
	}
	if len(got) != len(want) {
		t.Fatalf("alerts = %q, want %d", ids(got), len(want))
	}
	for i, w := range want {
		a := got[i]
		if l := labels(a); l != w.labels {
			t.Errorf("labels = %s, want %s", l, w.labels)
		}
		if !a.StartsAt.Equal(w.startsAt) {
			t.Errorf("%s starts at %v, want %v", a.Name(), a.StartsAt, w.startsAt)
		}
		if s := a.Annotations[AnnotationSummary]; !strings.HasPrefix(s, w.summary) {
			t.Errorf("%s summary = %q, want it to begin %q", a.Name(), s, w.summary)
		}
	}
	if d := got[1].Annotations[AnnotationDescription]; d != "token_reuse on /locks/orders" {
		t.Errorf("fencing description = %q, want the latest finding's summary", d)
	}
}

func labels(a Alert) string {
	var s []string
	for k, v := range a.Labels {
		s = append(s, fmt.Sprintf("%s=%s", k, v))
	}
	slices.Sort(s)
	return strings.Join(s, " ")
}

// TestHandover: the replica that gives a source up forgets its alerts
// without reporting any resolved, and leaves the other sources' alone; the
// replica that takes it over resumes, from the findings read back from the
// store, the alerts that still fire, with the same labels and start, and
// none that had ended.
func TestHandover(t *testing.T) {
	cfg := Config{Defaults: Thresholds{LostHold: 60 * time.Second, FencingHold: 60 * time.Second, BlindAfter: 10 * time.Second}}
	lost := finding(audit.FindingLeaseExpired, "prod", "/locks/orders", 1, "worker-1")
	regranted := finding(audit.FindingLeaseExpired, "prod", "/locks/billing", 1, "worker-2")
	stale := finding(audit.FindingLeaseExpired, "prod", "/locks/old", -120, "worker-3")
	unfenced := finding(audit.FindingUnfencedWrite, "prod", "/locks/orders", 2, "worker-0")
	near := held("prod", "/locks/cache", "worker-4", 0, 10)
	other := held("dev", "/locks/cache", "worker-5", 0, 10)

	old := New(cfg)
	old.Evaluate(at(9), Input{Findings: []audit.Finding{lost, unfenced}, Locks: []audit.Lock{near, other},
		Sources: []audit.Source{blindSince("prod", -20)}})
	old.Forget("prod")
	out := old.Evaluate(at(10), Input{Locks: []audit.Lock{other}})
	if got := ids(out); !slices.Equal(got, []string{"LeaseNearExpiry dev//locks/cache worker-5"}) {
		t.Fatalf("after Forget(prod), the old owner reports %q: want only dev's alert, and nothing of prod resolved", got)
	}

	// The new owner: billing was granted again after its loss (so its
	// alert resolved at the old owner); old's hold ran out long ago.
	billing := held("prod", "/locks/billing", "worker-6", 5, 10)
	billing.ChangedAt = at(5)
	e := New(cfg)
	e.Resume(at(11), []audit.Finding{stale, regranted, lost, unfenced}, []audit.Lock{billing})
	out = e.Evaluate(at(12), Input{Locks: []audit.Lock{billing}})
	want := []string{"FencingViolation prod//locks/orders", "LeaseLost prod//locks/orders worker-1"}
	if got := ids(out); !slices.Equal(got, want) {
		t.Fatalf("the new owner reports %q, want %q firing and nothing resolved", got, want)
	}
	for _, a := range out {
		if want := map[string]time.Time{LeaseLost: lost.At, FencingViolation: unfenced.At}[a.Name()]; !a.StartsAt.Equal(want) {
			t.Errorf("%s starts at %v, want the finding's time %v, as at the old owner", a.Name(), a.StartsAt, want)
		}
	}
	// Resumed alerts count as reported: the next grant resolves LeaseLost.
	orders := held("prod", "/locks/orders", "worker-7", 13, 10)
	orders.ChangedAt = at(13)
	want = []string{"FencingViolation prod//locks/orders", "LeaseLost prod//locks/orders worker-1 resolved"}
	if got := ids(e.Evaluate(at(14), Input{Locks: []audit.Lock{orders}})); !slices.Equal(got, want) {
		t.Fatalf("after the lock's next grant: %q, want %q", got, want)
	}
}
