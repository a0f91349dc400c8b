package audit_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// health is the configuration the leadership health stories run with.
var health = audit.TrackerConfig{RenewMarginRatio: 0.25, Health: audit.HealthConfig{
	FlappingPerHour: 6, LeaderlessAfter: time.Minute, TightMarginRatio: 0.4, ClockSkewRatio: 0.1,
}}

// handovers grants the lock n times, from token first, alternating holders A
// and B, each released half way to the next, within its lease: an election
// that keeps changing hands.
func (s *story) handovers(first int64, n int, from time.Time, every time.Duration) {
	for i := range n {
		holder := []string{"A", "B"}[i%2]
		when := from.Add(time.Duration(i) * every)
		s.grant(holder, first+int64(i), when, every)
		s.release(holder, when.Add(every/2))
	}
}

// renewEvery renews holder's tenure under token every interval from the
// grant at granted up to until, as a holder with its own clock writes it.
func (s *story) renewEvery(holder string, token int64, granted time.Time, interval, until time.Duration) {
	for d := interval; d <= until; d += interval {
		s.observe(audit.Observation{Kind: audit.EventRenew, At: granted.Add(d), RenewedAt: granted.Add(d), Holder: holder, Token: audit.Int64(token)})
	}
}

func TestTrackerLeadershipHealth(t *testing.T) {
	const lease = 10 * time.Second
	tests := []struct {
		name  string
		kind  audit.SourceKind
		story func(s *story)
		want  []audit.FindingKind
		check func(t *testing.T, s *story)
	}{
		{
			name: "SevenGrantsInAnHourFlap",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.handovers(1, 7, at(0), 5*time.Minute)
			},
			want: []audit.FindingKind{audit.FindingFlapping},
			check: func(t *testing.T, s *story) {
				f := s.finding(audit.FindingFlapping)
				if !f.At.Equal(at(30*time.Minute)) || !slices.Equal(f.Holders, []string{"A", "B"}) || !strings.Contains(f.Summary, "7 times") {
					t.Fatalf("flapping = %+v, want at the 7th grant (30 min), holders A and B, 7 grants", f)
				}
			},
		},
		{
			name: "SixGrantsInAnHourDoNotFlap",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.handovers(1, 6, at(0), 5*time.Minute)
			},
		},
		{
			name: "SevenGrantsOverMoreThanAnHourDoNotFlap",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.handovers(1, 7, at(0), 11*time.Minute)
			},
		},
		{
			// Once reported, flapping is reported again no sooner than
			// half an hour later, however often the lock changes hands.
			name: "FlappingRepeatsEveryHalfHourAtMost",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.handovers(1, 19, at(0), 3*time.Minute) // grants at 0..54 min
			},
			want: []audit.FindingKind{audit.FindingFlapping, audit.FindingFlapping},
			check: func(t *testing.T, s *story) {
				var times []time.Time
				for _, f := range s.out.Findings {
					times = append(times, f.At)
				}
				if !times[0].Equal(at(18*time.Minute)) || !times[1].Equal(at(48*time.Minute)) {
					t.Fatalf("flapping at %v, want the 7th grant (18 min) and 30 min later (48 min)", times)
				}
			},
		},
		{
			name: "HeartbeatsDoNotFlap",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				for i := range 8 {
					when := at(time.Duration(i) * time.Minute)
					s.observe(audit.Observation{Kind: audit.EventGrant, At: when, Holder: "node-1", LeaseDuration: 40 * time.Second, Class: audit.ClassHeartbeat})
					s.observe(audit.Observation{Kind: audit.EventRelease, At: when.Add(30 * time.Second), Holder: "node-1"})
				}
			},
		},
		{
			// An election held for 20 minutes, then released and not
			// taken: a minute later it is leaderless, once.
			name: "ReleasedElectionLeftWithoutALeader",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 7, at(0), lease)
				s.release("A", at(20*time.Minute))
				s.tick(at(20*time.Minute + 59*time.Second))
				s.tick(at(21 * time.Minute))
				s.tick(at(30 * time.Minute))
			},
			want: []audit.FindingKind{audit.FindingLeaderless},
			check: func(t *testing.T, s *story) {
				f := s.finding(audit.FindingLeaderless)
				if !f.At.Equal(at(20*time.Minute)) || !slices.Equal(f.Holders, []string{"A"}) || !slices.Equal(f.Tokens, []int64{7}) {
					t.Fatalf("leaderless = %+v, want since the release at 20 min, after A with token 7", f)
				}
			},
		},
		{
			// A Kubernetes lease that ran out: leaderless a minute after
			// it expired, by the collector's word that it saw nothing.
			name: "ExpiredLeaseNobodyTookOver",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.renewEvery("A", 1, at(0), 2*time.Second, 15*time.Minute)
				s.tick(at(15*time.Minute + lease + time.Minute))
			},
			want: []audit.FindingKind{audit.FindingLeaseExpired, audit.FindingLeaderless},
		},
		{
			// The collector went away after the lease ran out: it cannot
			// say nobody took the lock, so no leaderless finding.
			name: "NoLeaderlessWhileTheCollectorIsAway",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.renewEvery("A", 1, at(0), 2*time.Second, 15*time.Minute)
				s.tick(at(15*time.Minute + lease + time.Second))
				s.tickOnly(at(time.Hour))
			},
			want: []audit.FindingKind{audit.FindingLeaseExpired},
		},
		{
			// No tick came between: the grant, four minutes too late, says
			// the lock went without a leader all the same.
			name: "TakenTooLateWithoutTicksBetweenIsLeaderless",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.renewEvery("A", 1, at(0), 2*time.Second, 20*time.Minute)
				s.grant("B", 2, at(25*time.Minute), lease)
			},
			want: []audit.FindingKind{audit.FindingLeaseExpired, audit.FindingLeaderless},
			check: func(t *testing.T, s *story) {
				if f := s.finding(audit.FindingLeaderless); !f.At.Equal(at(20*time.Minute + lease)) {
					t.Fatalf("leaderless at %v, want at the expiry, %v", f.At, at(20*time.Minute+lease))
				}
			},
		},
		{
			name: "TakenAgainInTimeIsNotLeaderless",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 7, at(0), lease)
				s.release("A", at(20*time.Minute))
				s.tick(at(20*time.Minute + 30*time.Second))
				s.grant("B", 8, at(20*time.Minute+40*time.Second), lease)
				s.tick(at(time.Hour))
			},
		},
		{
			// A job lock, taken for a minute every five: free most of the
			// time, so never missing a leader.
			name: "JobLockFreeMostOfTheTimeIsNotLeaderless",
			kind: audit.KindEtcd,
			story: func(s *story) {
				for i := range 6 {
					when := at(time.Duration(i) * 5 * time.Minute)
					s.grant("A", int64(i+1), when, lease)
					s.release("A", when.Add(time.Minute))
				}
				s.tick(at(2 * time.Hour))
			},
		},
		{
			name: "TooShortAHistoryIsNotLeaderless",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 7, at(0), lease)
				s.release("A", at(5*time.Minute))
				s.tick(at(time.Hour))
			},
		},
		{
			// Renewing every 7 s of a 10 s lease leaves 30% to spare: one
			// finding, once the typical interval is known, for the tenure.
			name: "RenewingEverySevenSecondsOfTenIsTight",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.renewEvery("A", 1, at(0), 7*time.Second, time.Minute)
			},
			want: []audit.FindingKind{audit.FindingTightRenewal},
			check: func(t *testing.T, s *story) {
				f := s.finding(audit.FindingTightRenewal)
				if !f.At.Equal(at(28*time.Second)) || !strings.Contains(f.Summary, "every 7s") || !strings.Contains(f.Summary, "30%") {
					t.Fatalf("tight_renewal = %+v, want at the 4th renewal (28 s), every 7s, 30%% to spare", f)
				}
			},
		},
		{
			// client-go's defaults: renew every 2 s of 15. One slow
			// renewal is late, but the typical interval is not tight.
			name: "OneSlowRenewalIsLateNotTight",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.grant("A", 1, at(0), 15*time.Second)
				s.renewEvery("A", 1, at(0), 2*time.Second, 20*time.Second)
				s.observe(audit.Observation{Kind: audit.EventRenew, At: at(32 * time.Second), RenewedAt: at(32 * time.Second), Holder: "A", Token: audit.Int64(1)})
				s.renewEvery("A", 1, at(32*time.Second), 2*time.Second, 20*time.Second)
			},
			want: []audit.FindingKind{audit.FindingLateRenewal},
		},
		{
			// Renewals the collector did not see (it restarted) make an
			// interval longer than the lease: not a sample.
			name: "MissedRenewalsAreNotSampled",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 1, at(0), lease)
				for _, d := range []time.Duration{2, 4, 6, 30, 32, 34, 36} {
					s.renew("A", 1, at(d*time.Second))
				}
			},
			want: []audit.FindingKind{audit.FindingLateRenewal},
		},
		{
			name: "HolderClockTwoSecondsAheadIsSkewed",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.observe(audit.Observation{Kind: audit.EventGrant, At: at(0), RenewedAt: at(2 * time.Second), Holder: "A", Token: audit.Int64(1), LeaseDuration: lease})
				for d := 2 * time.Second; d <= 10*time.Second; d += 2 * time.Second {
					s.observe(audit.Observation{Kind: audit.EventRenew, At: at(d), RenewedAt: at(d + 2*time.Second), Holder: "A", Token: audit.Int64(1)})
				}
			},
			want: []audit.FindingKind{audit.FindingClockSkew},
			check: func(t *testing.T, s *story) {
				f := s.finding(audit.FindingClockSkew)
				if !f.At.Equal(at(0)) || !slices.Equal(f.Holders, []string{"A"}) || !strings.Contains(f.Summary, "2s ahead") || !strings.Contains(f.Summary, "20%") {
					t.Fatalf("clock_skew = %+v, want at the grant, A 2s ahead, 20%% of the lease", f)
				}
			},
		},
		{
			// Half a second is 5% of the lease; a clock behind looks like
			// a slow delivery and says nothing.
			name: "SmallSkewAndClocksBehindAreNotSkewed",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.observe(audit.Observation{Kind: audit.EventGrant, At: at(0), RenewedAt: at(500 * time.Millisecond), Holder: "A", Token: audit.Int64(1), LeaseDuration: lease})
				s.observe(audit.Observation{Kind: audit.EventRenew, At: at(6 * time.Second), RenewedAt: at(2 * time.Second), Holder: "A", Token: audit.Int64(1)})
			},
		},
		{
			// A Redis collector's renewal time is its own estimate, on its
			// own clock: no skew to tell.
			name: "EstimatedRenewalTimesAreNotSkewed",
			kind: audit.KindRedis,
			story: func(s *story) {
				s.observe(audit.Observation{Kind: audit.EventGrant, At: at(0), RenewedAt: at(3 * time.Second), Holder: "A", Token: audit.Int64(1), LeaseDuration: lease})
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStoryWith(t, tt.kind, health)
			tt.story(s)
			if got := s.findings(); !slices.Equal(got, tt.want) {
				t.Fatalf("findings = %v, want %v", got, tt.want)
			}
			for _, f := range s.out.Findings {
				if f.Severity != audit.SeverityWarning && f.Kind != audit.FindingLeaseExpired || f.Summary == "" {
					t.Fatalf("finding %+v: want a warning with a summary", f)
				}
			}
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}

// restart replaces the story's tracker with one restored from what a
// journal saved of its lock, through JSON as a store keeps it.
func (s *story) restart() {
	s.t.Helper()
	saved, ok := s.tr.State(s.key())
	if !ok {
		s.t.Fatal("no state for the lock")
	}
	raw, err := json.Marshal(saved)
	if err != nil {
		s.t.Fatal(err)
	}
	restored := audit.TrackState{Lock: saved.Lock, Recent: saved.Recent, Resources: saved.Resources} // resources are rows of their own
	if err := json.Unmarshal(raw, &restored); err != nil {
		s.t.Fatal(err)
	}
	s.tr = audit.NewTracker(health)
	s.tr.Restore([]audit.TrackState{restored})
	s.out = audit.Batch{}
}

// A tracker restored from what a journal saved remembers that flapping was
// just reported, and that a lock is due to be leaderless.
func TestTrackerHealthSurvivesARestart(t *testing.T) {
	t.Run("Flapping", func(t *testing.T) {
		s := newStoryWith(t, audit.KindEtcd, health)
		s.handovers(1, 7, at(0), 2*time.Minute) // flapping at 12 min
		s.restart()
		s.handovers(8, 2, at(14*time.Minute), 2*time.Minute)
		if got := s.findings(); len(got) != 0 {
			t.Fatalf("findings after the restart = %v, want none: flapping was reported 2 min before", got)
		}
	})
	t.Run("Leaderless", func(t *testing.T) {
		s := newStoryWith(t, audit.KindEtcd, health)
		s.grant("A", 1, at(0), 10*time.Second)
		s.release("A", at(30*time.Minute))
		s.restart()
		s.tick(at(31 * time.Minute))
		if got := s.findings(); !slices.Equal(got, []audit.FindingKind{audit.FindingLeaderless}) {
			t.Fatalf("findings after the restart = %v, want [leaderless]", got)
		}
	})
}
