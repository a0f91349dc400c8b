package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// story drives a tracker the way a collector and a protected resource would,
// and keeps everything it produced.
type story struct {
	t      *testing.T
	tr     *audit.Tracker
	source string
	kind   audit.SourceKind
	clock  bool // expire by clock, like Kubernetes and Redis
	seq    bool // sequential tokens, like leaseTransitions
	// holderClock: renewal times are the holder's clock, like renewTime.
	holderClock bool
	perTenure   bool // a token names one tenure, like an etcd CreateRevision
	out         audit.Batch
}

func newStory(t *testing.T, kind audit.SourceKind) *story {
	return newStoryWith(t, kind, audit.TrackerConfig{RenewMarginRatio: 0.25})
}

// newStoryWith is newStory with a tracker configured by cfg. Inputs look as
// kind's collector makes them.
func newStoryWith(t *testing.T, kind audit.SourceKind, cfg audit.TrackerConfig) *story {
	s := &story{t: t, tr: audit.NewTracker(cfg), source: "src", kind: kind}
	s.clock = kind != audit.KindEtcd
	s.seq = kind == audit.KindKubernetes
	s.holderClock = kind == audit.KindKubernetes
	s.perTenure = kind == audit.KindEtcd
	return s
}

func (s *story) key() audit.LockKey { return audit.LockKey{Source: s.source, Name: "orders"} }

func (s *story) observe(obs ...audit.Observation) {
	for i := range obs {
		obs[i].Lock = s.key()
	}
	s.out.Append(s.tr.Step(audit.Input{Source: s.source, Kind: s.kind, Observations: obs, ExpireByClock: s.clock, SequentialTokens: s.seq, HolderClock: s.holderClock, TokenPerTenure: s.perTenure}))
}

func (s *story) grant(holder string, token int64, when time.Time, lease time.Duration) {
	s.observe(audit.Observation{Kind: audit.EventGrant, At: when, Holder: holder, Token: audit.Int64(token), LeaseDuration: lease})
}

func (s *story) grantUnfenced(holder string, when time.Time, lease time.Duration) {
	s.observe(audit.Observation{Kind: audit.EventGrant, At: when, Holder: holder, LeaseDuration: lease})
}

func (s *story) renew(holder string, token int64, when time.Time) {
	s.observe(audit.Observation{Kind: audit.EventRenew, At: when, Holder: holder, Token: audit.Int64(token)})
}

func (s *story) release(holder string, when time.Time) {
	s.observe(audit.Observation{Kind: audit.EventRelease, At: when, Holder: holder})
}

func (s *story) expire(holder string, when time.Time) {
	s.observe(audit.Observation{Kind: audit.EventExpire, At: when, Holder: holder})
}

// tick moves the clock; the collector vouches that it has seen everything up
// to then.
func (s *story) tick(when time.Time) {
	s.live(when)
	s.out.Append(s.tr.Tick(when))
}

func (s *story) live(when time.Time) {
	s.out.Append(s.tr.Step(audit.Input{Source: s.source, Kind: s.kind, At: when, Live: true, ExpireByClock: s.clock, SequentialTokens: s.seq, TokenPerTenure: s.perTenure}))
}

func (s *story) write(resource string, token int64, outcome audit.WriteOutcome, when time.Time) {
	s.out.Append(s.tr.ReportWrite(audit.WriteReport{Source: s.source, Lock: "orders", Resource: resource, Token: audit.Int64(token), Outcome: outcome, At: when}))
}

func (s *story) blind(from, to time.Time) {
	s.out.Append(s.tr.Step(audit.Input{Source: s.source, Kind: s.kind, Blind: &audit.Blind{From: from, To: to, Reason: "compaction"}}))
}

func (s *story) findings() []audit.FindingKind {
	var kinds []audit.FindingKind
	for _, f := range s.out.Findings {
		kinds = append(kinds, f.Kind)
	}
	return kinds
}

func (s *story) events() []audit.EventKind {
	var kinds []audit.EventKind
	for _, e := range s.out.Events {
		kinds = append(kinds, e.Kind)
	}
	return kinds
}

func (s *story) finding(kind audit.FindingKind) audit.Finding {
	s.t.Helper()
	for _, f := range s.out.Findings {
		if f.Kind == kind {
			return f
		}
	}
	s.t.Fatalf("no %s finding; findings = %v", kind, s.findings())
	return audit.Finding{}
}

func TestTrackerFindings(t *testing.T) {
	const lease = 10 * time.Second
	tests := []struct {
		name  string
		kind  audit.SourceKind
		story func(s *story)
		want  []audit.FindingKind
		check func(t *testing.T, s *story)
	}{
		{
			name: "CleanHandoverHasNoFindings",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 41, at(0), lease)
				s.renew("A", 41, at(3*time.Second))
				s.release("A", at(5*time.Second))
				s.grant("B", 42, at(5*time.Second), lease)
			},
			want: nil,
		},
		{
			// A restored backup handed out an old revision again.
			name: "TokenRegression",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 42, at(0), lease)
				s.release("A", at(time.Second))
				s.grant("B", 41, at(2*time.Second), lease)
			},
			want: []audit.FindingKind{audit.FindingTokenRegression},
			check: func(t *testing.T, s *story) {
				f := s.finding(audit.FindingTokenRegression)
				if f.Severity != audit.SeverityCritical || !reflect.DeepEqual(f.Tokens, []int64{42, 41}) || !reflect.DeepEqual(f.Holders, []string{"A", "B"}) {
					t.Fatalf("finding = %+v, want critical, tokens [42 41], holders [A B]", f)
				}
			},
		},
		{
			// A Kubernetes holder restarts under its old identity after its lease
			// expired; client-go keeps leaseTransitions, so the token repeats.
			name: "TokenReuseAfterSameIdentityReacquires",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.grant("pod-a", 3, at(0), lease)
				s.tick(at(11 * time.Second))
				s.grant("pod-a", 3, at(20*time.Second), lease)
			},
			want: []audit.FindingKind{audit.FindingLeaseExpired, audit.FindingTokenReuse},
			check: func(t *testing.T, s *story) {
				if f := s.finding(audit.FindingTokenReuse); f.Severity != audit.SeverityCritical {
					t.Fatalf("severity = %s, want critical", f.Severity)
				}
				st, _ := s.tr.State(s.key())
				if len(st.Recent) != 2 || st.Recent[0].End != audit.EndExpired || !st.Recent[1].Held() {
					t.Fatalf("tenures = %+v, want an expired tenure then a held one", st.Recent)
				}
			},
		},
		{
			name: "TokenSkipOnSequentialTokens",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.grant("A", 3, at(0), lease)
				s.grant("B", 5, at(30*time.Second), lease) // after A expired: no overlap
			},
			want: []audit.FindingKind{audit.FindingLeaseExpired, audit.FindingTokenSkip},
			check: func(t *testing.T, s *story) {
				if f := s.finding(audit.FindingTokenSkip); f.Severity != audit.SeverityWarning || !reflect.DeepEqual(f.Tokens, []int64{3, 5}) {
					t.Fatalf("finding = %+v, want warning with tokens [3 5]", f)
				}
			},
		},
		{
			name: "EtcdRevisionsSkipWithoutFinding",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 10, at(0), lease)
				s.release("A", at(time.Second))
				s.grant("B", 17, at(time.Second), lease)
			},
			want: nil,
		},
		{
			// B takes over while A's lease still had 6 s to run: both may act.
			name: "OverlapWhilePreviousLeaseValid",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.grant("B", 2, at(4*time.Second), lease)
			},
			want: []audit.FindingKind{audit.FindingOverlap},
			check: func(t *testing.T, s *story) {
				f := s.finding(audit.FindingOverlap)
				if !f.At.Equal(at(4*time.Second)) || !f.Until.Equal(at(10*time.Second)) {
					t.Fatalf("overlap = %s..%s, want %s..%s", f.At, f.Until, at(4*time.Second), at(10*time.Second))
				}
				st, _ := s.tr.State(s.key())
				if st.Recent[0].End != audit.EndSuperseded {
					t.Fatalf("A's end = %q, want superseded", st.Recent[0].End)
				}
			},
		},
		{
			// A lock with no lease (a lease table's row held until deleted):
			// B granted while the backend still shows A's row held is an
			// overlap, open-ended; granted without that word, a handover.
			name: "OverlapWhileBackendStillShowsPreviousHolder",
			kind: audit.SourceKind("postgres"),
			story: func(s *story) {
				s.grant("A", 1, at(0), 0)
				s.observe(audit.Observation{Kind: audit.EventGrant, At: at(time.Second), Holder: "B", Token: audit.Int64(2), StillHeld: true})
				s.grant("C", 3, at(2*time.Second), 0)
			},
			want: []audit.FindingKind{audit.FindingOverlap},
			check: func(t *testing.T, s *story) {
				f := s.finding(audit.FindingOverlap)
				if !f.At.Equal(at(time.Second)) || !f.Until.IsZero() || !reflect.DeepEqual(f.Holders, []string{"A", "B"}) {
					t.Fatalf("overlap = %+v, want at %s, open, of A and B", f, at(time.Second))
				}
			},
		},
		{
			// A's lease ran out at 10 s, as B was granted: A expired, even
			// though no tick came in between.
			name: "NoOverlapAfterPreviousLeaseRanOut",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.grant("B", 2, at(10*time.Second), lease)
			},
			want: []audit.FindingKind{audit.FindingLeaseExpired},
			check: func(t *testing.T, s *story) {
				st, _ := s.tr.State(s.key())
				if a := st.Recent[0]; a.End != audit.EndExpired || !a.EndedAt.Equal(at(10*time.Second)) {
					t.Fatalf("A's tenure = %+v, want expired at %s", a, at(10*time.Second))
				}
			},
		},
		{
			// A pauses, its lease passes to B, and A's late write lands because
			// the resource never checked: the protection failed.
			name: "UnfencedWriteOfOldTokenAfterNewGrant",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 41, at(0), lease)
				s.write("ledger", 41, audit.WriteAccepted, at(time.Second))
				s.expire("A", at(10*time.Second))
				s.grant("B", 42, at(10*time.Second), lease)
				s.write("ledger", 42, audit.WriteAccepted, at(11*time.Second))
				s.write("ledger", 41, audit.WriteAccepted, at(12*time.Second))
			},
			want: []audit.FindingKind{audit.FindingLeaseExpired, audit.FindingExposure, audit.FindingUnfencedWrite},
			check: func(t *testing.T, s *story) {
				f := s.finding(audit.FindingUnfencedWrite)
				if f.Severity != audit.SeverityCritical || f.Resource != "ledger" || !reflect.DeepEqual(f.Tokens, []int64{41, 42}) {
					t.Fatalf("finding = %+v, want critical on ledger with tokens [41 42]", f)
				}
			},
		},
		{
			name: "UnfencedWriteAfterTenureEndedWithoutNewGrant",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 41, at(0), lease)
				s.expire("A", at(10*time.Second))
				s.write("ledger", 41, audit.WriteAccepted, at(13*time.Second))
			},
			want: []audit.FindingKind{audit.FindingLeaseExpired, audit.FindingUnfencedWrite},
		},
		{
			// Grant 41 to A, A pauses, grant 42 to B, A's write with 41 is
			// rejected: fencing worked and shows a zombie holder.
			name: "PausedHolderWriteRejected",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 41, at(0), lease)
				s.expire("A", at(10*time.Second))
				s.grant("B", 42, at(10*time.Second), lease)
				s.write("ledger", 42, audit.WriteAccepted, at(10500*time.Millisecond))
				s.write("ledger", 41, audit.WriteRejected, at(12*time.Second))
			},
			want: []audit.FindingKind{audit.FindingLeaseExpired, audit.FindingStaleWrite},
			check: func(t *testing.T, s *story) {
				f := s.finding(audit.FindingStaleWrite)
				if f.Severity != audit.SeverityInfo || !reflect.DeepEqual(f.Holders, []string{"A"}) {
					t.Fatalf("finding = %+v, want info naming A", f)
				}
			},
		},
		{
			// A's stale write reaches leasewatch before the collector
			// reports B's grant: the resource's highest token says enough.
			name: "RejectedWriteReportedBeforeTheNewGrant",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 41, at(0), lease)
				s.out.Append(s.tr.ReportWrite(audit.WriteReport{Source: s.source, Lock: "orders", Resource: "ledger", Token: audit.Int64(41),
					HighestToken: audit.Int64(42), Outcome: audit.WriteRejected, At: at(12 * time.Second)}))
				s.expire("A", at(10*time.Second))
				s.grant("B", 42, at(10*time.Second), lease)
			},
			want: []audit.FindingKind{audit.FindingStaleWrite, audit.FindingLeaseExpired},
			check: func(t *testing.T, s *story) {
				if f := s.finding(audit.FindingStaleWrite); !reflect.DeepEqual(f.Tokens, []int64{41, 42}) || f.Resource != "ledger" {
					t.Fatalf("stale_write = %+v, want tokens 41 and 42 at ledger", f)
				}
			},
		},
		{
			// The cache takes A's token 41 at 12 s; the collector reports
			// B's grant of 42 at 10 s only afterwards. The write A made at
			// 9 s, while it held the lock, was fine.
			name: "AcceptedWriteReportedBeforeTheNewGrant",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 41, at(0), lease)
				s.write("cache", 41, audit.WriteAccepted, at(9*time.Second))
				s.write("cache", 41, audit.WriteAccepted, at(12*time.Second))
				s.release("A", at(10*time.Second))
				s.grant("B", 42, at(10*time.Second), lease)
				s.write("cache", 42, audit.WriteAccepted, at(14*time.Second))
			},
			want: []audit.FindingKind{audit.FindingUnfencedWrite, audit.FindingExposure},
			check: func(t *testing.T, s *story) {
				f := s.finding(audit.FindingUnfencedWrite)
				if !f.At.Equal(at(12*time.Second)) || !reflect.DeepEqual(f.Tokens, []int64{41, 42}) || f.Resource != "cache" || f.Severity != audit.SeverityCritical {
					t.Fatalf("unfenced_write = %+v, want the 12 s write of token 41 against 42, critical", f)
				}
			},
		},
		{
			// The resource keeps taking token 41 for 3 s after 42 was granted.
			name: "ExposureUntilResourceLearnsNewToken",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 41, at(0), lease)
				s.write("ledger", 41, audit.WriteAccepted, at(time.Second))
				s.release("A", at(2*time.Second))
				s.grant("B", 42, at(2*time.Second), lease)
				s.write("ledger", 42, audit.WriteAccepted, at(5*time.Second))
				s.write("ledger", 42, audit.WriteAccepted, at(6*time.Second))
			},
			want: []audit.FindingKind{audit.FindingExposure},
			check: func(t *testing.T, s *story) {
				f := s.finding(audit.FindingExposure)
				if !f.At.Equal(at(2*time.Second)) || !f.Until.Equal(at(5*time.Second)) || f.Resource != "ledger" || f.Severity != audit.SeverityInfo {
					t.Fatalf("exposure = %+v, want ledger %s..%s info", f, at(2*time.Second), at(5*time.Second))
				}
			},
		},
		{
			name: "LateRenewal",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.renew("A", 1, at(5*time.Second))  // 50% left: fine
				s.renew("A", 1, at(13*time.Second)) // 2 s of 10 s left: late
			},
			want: []audit.FindingKind{audit.FindingLateRenewal},
			check: func(t *testing.T, s *story) {
				st, _ := s.tr.State(s.key())
				if cur := st.Recent[0]; cur.Renewals != 2 || !cur.ExpiresAt.Equal(at(23*time.Second)) {
					t.Fatalf("tenure = %+v, want 2 renewals, expiring at %s", cur, at(23*time.Second))
				}
			},
		},
		{
			name: "LeaseExpiredByBackend",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 7, at(0), lease)
				s.expire("A", at(10*time.Second))
			},
			want: []audit.FindingKind{audit.FindingLeaseExpired},
		},
		{
			// Kubernetes never says a lease expired: the tracker's clock does.
			name: "LeaseExpiredByTrackerClock",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.tick(at(9 * time.Second))
				s.tick(at(10 * time.Second))
			},
			want: []audit.FindingKind{audit.FindingLeaseExpired},
			check: func(t *testing.T, s *story) {
				e := s.out.Events[len(s.out.Events)-1]
				if e.Kind != audit.EventExpire || !e.Inferred || !e.At.Equal(at(10*time.Second)) {
					t.Fatalf("last event = %+v, want an inferred expire at %s", e, at(10*time.Second))
				}
			},
		},
		{
			name: "EtcdLeaseIsNotExpiredByTrackerClock",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.tick(at(time.Minute))
			},
			want: nil,
		},
		{
			name: "UnfencedLockReportedOnce",
			kind: audit.KindRedis,
			story: func(s *story) {
				s.grantUnfenced("A", at(0), lease)
				s.release("A", at(time.Second))
				s.grantUnfenced("B", at(2*time.Second), lease)
			},
			want: []audit.FindingKind{audit.FindingUnfencedLock},
		},
		{
			name: "BlindWindowOnEveryLockOfTheSource",
			kind: audit.KindEtcd,
			story: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.blind(at(time.Second), at(time.Minute))
			},
			want: []audit.FindingKind{audit.FindingBlindWindow},
			check: func(t *testing.T, s *story) {
				f := s.finding(audit.FindingBlindWindow)
				if !f.At.Equal(at(time.Second)) || !f.Until.Equal(at(time.Minute)) {
					t.Fatalf("blind window = %s..%s, want %s..%s", f.At, f.Until, at(time.Second), at(time.Minute))
				}
				if got := s.events(); got[len(got)-1] != audit.EventBlind {
					t.Fatalf("events = %v, want a blind event last", got)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStory(t, tt.kind)
			tt.story(s)
			if got := s.findings(); !slices.Equal(got, tt.want) {
				t.Fatalf("findings = %v, want %v", got, tt.want)
			}
			for _, f := range s.out.Findings {
				if f.Severity != f.Kind.Severity() || f.Summary == "" {
					t.Fatalf("finding %+v: want severity %s and a summary", f, f.Kind.Severity())
				}
			}
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}

func TestTrackerEvents(t *testing.T) {
	const lease = 10 * time.Second
	t.Run("ObservedAtStartHasNoGrantTime", func(t *testing.T) {
		s := newStory(t, audit.KindEtcd)
		s.observe(audit.Observation{Kind: audit.EventObserved, At: at(0), Holder: "A", Token: audit.Int64(5), LeaseDuration: lease})
		st, _ := s.tr.State(s.key())
		if got := s.events(); !slices.Equal(got, []audit.EventKind{audit.EventObserved}) {
			t.Fatalf("events = %v, want [observed]", got)
		}
		if !st.Lock.AcquiredAt.IsZero() || !st.Recent[0].Observed || st.Lock.State != audit.StateHeld {
			t.Fatalf("lock = %+v tenure = %+v, want held, unknown acquired_at, observed tenure", st.Lock, st.Recent[0])
		}
	})
	t.Run("SnapshotRepeatingTheHolderChangesNothing", func(t *testing.T) {
		s := newStory(t, audit.KindEtcd)
		s.grant("A", 5, at(0), lease)
		before := len(s.out.Events)
		s.out.Append(s.tr.Step(audit.Input{Source: s.source, Kind: s.kind, TokenPerTenure: s.perTenure, Snapshot: true, Observations: []audit.Observation{
			{Lock: s.key(), Kind: audit.EventGrant, At: at(time.Second), Holder: "A", Token: audit.Int64(5), LeaseDuration: lease, Inferred: true},
		}}))
		if len(s.out.Events) != before {
			t.Fatalf("events = %v, want no new event", s.events()[before:])
		}
	})
	t.Run("SnapshotEndsLocksThatVanishedWhileBlind", func(t *testing.T) {
		s := newStory(t, audit.KindEtcd)
		s.grant("A", 5, at(0), lease)
		s.out.Append(s.tr.Step(audit.Input{Source: s.source, Kind: s.kind, TokenPerTenure: s.perTenure, Snapshot: true, At: at(time.Minute),
			Blind: &audit.Blind{From: at(time.Second), To: at(time.Minute)}}))
		last := s.out.Events[len(s.out.Events)-1]
		if last.Kind != audit.EventExpire || !last.Inferred {
			t.Fatalf("last event = %+v, want an inferred expire (the lease had run out)", last)
		}
	})
	t.Run("InferredGrantAfterBlindDoesNotClaimOverlap", func(t *testing.T) {
		s := newStory(t, audit.KindEtcd)
		s.grant("A", 5, at(0), lease)
		s.out.Append(s.tr.Step(audit.Input{Source: s.source, Kind: s.kind, TokenPerTenure: s.perTenure, Snapshot: true, Blind: &audit.Blind{From: at(time.Second), To: at(2 * time.Second)},
			Observations: []audit.Observation{{Lock: s.key(), Kind: audit.EventGrant, At: at(2 * time.Second), Holder: "B", Token: audit.Int64(9), LeaseDuration: lease, Inferred: true}}}))
		if got := s.findings(); !slices.Equal(got, []audit.FindingKind{audit.FindingBlindWindow}) {
			t.Fatalf("findings = %v, want only the blind window", got)
		}
		if got := s.events(); !slices.Equal(got, []audit.EventKind{audit.EventGrant, audit.EventBlind, audit.EventRelease, audit.EventGrant}) {
			t.Fatalf("events = %v", got)
		}
	})
	t.Run("RenewWithoutGrantIsAnInferredGrant", func(t *testing.T) {
		s := newStory(t, audit.KindKubernetes)
		s.renew("A", 1, at(0))
		if e := s.out.Events[0]; e.Kind != audit.EventGrant || !e.Inferred {
			t.Fatalf("event = %+v, want inferred grant", e)
		}
	})
	t.Run("ReleaseClearsHolder", func(t *testing.T) {
		s := newStory(t, audit.KindEtcd)
		s.grant("A", 5, at(0), lease)
		s.release("A", at(time.Second))
		st, _ := s.tr.State(s.key())
		if st.Lock.State != audit.StateFree || st.Lock.Holder != "" || st.Recent[0].End != audit.EndReleased {
			t.Fatalf("lock = %+v, want free with no holder", st.Lock)
		}
	})
	t.Run("ClockExpiryThenBackendConfirmationIsOneExpiry", func(t *testing.T) {
		s := newStory(t, audit.KindRedis)
		s.grant("A", 5, at(0), lease)
		s.tick(at(11 * time.Second))
		s.expire("A", at(11500*time.Millisecond))
		if got := s.events(); !slices.Equal(got, []audit.EventKind{audit.EventGrant, audit.EventExpire}) {
			t.Fatalf("events = %v, want one grant and one expire", got)
		}
	})
}

func TestTrackerRestoreResumes(t *testing.T) {
	const lease = 10 * time.Second
	s := newStory(t, audit.KindEtcd)
	s.grant("A", 41, at(0), lease)
	s.write("ledger", 41, audit.WriteAccepted, at(time.Second))

	// Restore a fresh tracker from the last saved state of each lock, as the
	// recorder does after a restart.
	last := map[audit.LockKey]audit.TrackState{}
	for _, st := range s.out.Locks {
		last[st.Lock.Key()] = st
	}
	// And each resource's last saved row, as a store keeps them apart.
	for _, r := range s.out.Resources {
		st := last[r.Lock]
		if st.Resources == nil {
			st.Resources = map[string]*audit.ResourceState{}
		}
		st.Resources[r.Resource] = &r.State
		last[r.Lock] = st
	}
	var states []audit.TrackState
	for _, st := range last {
		states = append(states, st)
	}
	s.tr = audit.NewTracker(audit.TrackerConfig{})
	s.tr.Restore(states)
	s.out = audit.Batch{}

	s.expire("A", at(10*time.Second))
	s.grant("B", 42, at(10*time.Second), lease)
	s.write("ledger", 41, audit.WriteRejected, at(11*time.Second))
	s.write("ledger", 42, audit.WriteAccepted, at(12*time.Second))
	want := []audit.FindingKind{audit.FindingLeaseExpired, audit.FindingStaleWrite, audit.FindingExposure}
	if got := s.findings(); !slices.Equal(got, want) {
		t.Fatalf("findings after restore = %v, want %v", got, want)
	}
	if got := s.out.Tenures[len(s.out.Tenures)-1].Seq; got != 2 {
		t.Fatalf("B's tenure seq = %d, want 2", got)
	}
}

// Every grant carries who held the lock before, so that no consumer of a
// commit has to work it out from the batch's tenures: the holder of the
// tenure before, however it ended, and none for a lock's first grant. A
// tracker restored from the store knows it from the tenures it restored.
func TestTrackerGrantCarriesThePreviousHolder(t *testing.T) {
	const lease = 10 * time.Second
	lastGrant := func(t *testing.T, s *story) audit.Event {
		t.Helper()
		for i := len(s.out.Events) - 1; i >= 0; i-- {
			if e := s.out.Events[i]; e.Kind == audit.EventGrant || e.Kind == audit.EventObserved {
				return e
			}
		}
		t.Fatalf("no grant; events = %v", s.events())
		return audit.Event{}
	}
	for _, tt := range []struct {
		name  string
		story func(s *story)
		want  audit.PreviousHolder
	}{
		{"FirstGrant", func(s *story) { s.grant("A", 5, at(0), lease) }, audit.PreviousHolder{}},
		{"FirstSight", func(s *story) {
			s.observe(audit.Observation{Kind: audit.EventObserved, At: at(0), Holder: "A", Token: audit.Int64(5), LeaseDuration: lease})
		}, audit.PreviousHolder{}},
		{"AfterRelease", func(s *story) {
			s.grant("A", 5, at(0), lease)
			s.release("A", at(time.Second))
			s.grant("B", 6, at(2*time.Second), lease)
		}, audit.PreviousHolder{Holder: "A", Known: true}},
		{"AfterExpiry", func(s *story) {
			s.grant("A", 5, at(0), lease)
			s.expire("A", at(lease))
			s.grant("B", 6, at(11*time.Second), lease)
		}, audit.PreviousHolder{Holder: "A", Known: true}},
		{"AfterSupersede", func(s *story) {
			s.grant("A", 5, at(0), lease)
			s.grant("B", 6, at(time.Second), lease)
		}, audit.PreviousHolder{Holder: "A", Known: true}},
		{"SameHolderAgain", func(s *story) {
			s.grant("A", 5, at(0), lease)
			s.release("A", at(time.Second))
			s.grant("A", 6, at(2*time.Second), lease)
		}, audit.PreviousHolder{Holder: "A", Known: true}},
		{"InferredGrant", func(s *story) {
			s.grant("A", 5, at(0), lease)
			s.renew("B", 6, at(time.Second)) // B's grant was not seen
		}, audit.PreviousHolder{Holder: "A", Known: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newStory(t, audit.KindEtcd)
			tt.story(s)
			if got := lastGrant(t, s).Previous; got != tt.want {
				t.Fatalf("previous holder = %+v, want %+v; events = %v", got, tt.want, s.events())
			}
		})
	}
	t.Run("AfterRestoreFromTheStore", func(t *testing.T) {
		ctx := context.Background()
		store := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
		s := newStory(t, audit.KindEtcd)
		s.grant("A", 5, at(0), lease)
		s.release("A", at(time.Second))
		if err := store.Apply(ctx, s.out); err != nil {
			t.Fatal(err)
		}
		states, _, err := store.Restore(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.tr = audit.NewTracker(audit.TrackerConfig{RenewMarginRatio: 0.25})
		s.tr.Restore(states)
		s.out = audit.Batch{}
		s.grant("B", 6, at(2*time.Second), lease)
		if got, want := lastGrant(t, s).Previous, (audit.PreviousHolder{Holder: "A", Known: true}); got != want {
			t.Fatalf("previous holder after a restore = %+v, want %+v", got, want)
		}
	})
}

func TestTrackerEtcdTenureIsNamedByToken(t *testing.T) {
	const lease = 10 * time.Second
	// After a blind window the snapshot shows the leader's proclaimed value:
	// same key (same CreateRevision), so the same tenure, not a new grant.
	s := newStory(t, audit.KindEtcd)
	s.grant("694d leader-a", 7, at(0), lease)
	s.out.Append(s.tr.Step(audit.Input{Source: s.source, Kind: s.kind, TokenPerTenure: s.perTenure, Snapshot: true, Blind: &audit.Blind{From: at(time.Second), To: at(2 * time.Second)},
		Observations: []audit.Observation{{Lock: s.key(), Kind: audit.EventGrant, At: at(2 * time.Second), Holder: "694d leader-a (draining)", Token: audit.Int64(7), LeaseDuration: lease, Inferred: true}}}))
	s.release("694d leader-a", at(3*time.Second))
	if got := s.findings(); !slices.Equal(got, []audit.FindingKind{audit.FindingBlindWindow}) {
		t.Fatalf("findings = %v, want only the blind window", got)
	}
	if got := s.events(); !slices.Equal(got, []audit.EventKind{audit.EventGrant, audit.EventBlind, audit.EventRelease}) {
		t.Fatalf("events = %v, want grant, blind, release", got)
	}
}

func TestTrackerNoExposureWhenResourceIsAhead(t *testing.T) {
	// The resource's clock put its first write with token 42 a few
	// milliseconds before the collector saw the grant: there was no window.
	s := newStory(t, audit.KindEtcd)
	s.grant("A", 41, at(0), 10*time.Second)
	s.write("ledger", 41, audit.WriteAccepted, at(time.Second))
	s.release("A", at(2*time.Second))
	s.grant("B", 42, at(2*time.Second), 10*time.Second)
	s.write("ledger", 42, audit.WriteAccepted, at(2*time.Second-8*time.Millisecond))
	if got := s.findings(); len(got) != 0 {
		t.Fatalf("findings = %v, want none", got)
	}
	st, _ := s.tr.State(s.key())
	if p := st.Resources["ledger"].Pending; len(p) != 0 {
		t.Fatalf("pending grants = %+v, want the window closed", p)
	}
}

func TestTrackerLockDeletedWhileHeld(t *testing.T) {
	s := newStory(t, audit.KindKubernetes)
	s.grant("pod-a", 1, at(0), 15*time.Second)
	s.observe(audit.Observation{Kind: audit.EventRelease, At: at(3 * time.Second), Holder: "pod-a", Token: audit.Int64(1), Deleted: true})
	if got := s.findings(); !slices.Equal(got, []audit.FindingKind{audit.FindingLockDeleted}) {
		t.Fatalf("findings = %v, want [lock_deleted]", got)
	}
	if f := s.finding(audit.FindingLockDeleted); f.Severity != audit.SeverityWarning {
		t.Fatalf("severity = %s, want warning", f.Severity)
	}
}

func TestTrackerHeartbeatsAreNotUnfencedLocks(t *testing.T) {
	s := newStory(t, audit.KindKubernetes)
	s.observe(audit.Observation{Kind: audit.EventGrant, At: at(0), Holder: "node-1", LeaseDuration: 40 * time.Second, Class: audit.ClassHeartbeat})
	if got := s.findings(); len(got) != 0 {
		t.Fatalf("findings = %v, want none for a heartbeat", got)
	}
}

func TestTrackerLockEvictedUnderMemoryPressure(t *testing.T) {
	s := newStory(t, audit.KindRedis)
	s.grant("client-a", 9, at(0), 30*time.Second)
	s.observe(audit.Observation{Kind: audit.EventExpire, At: at(2 * time.Second), Holder: "client-a", Token: audit.Int64(9), Evicted: true})
	if got := s.findings(); !slices.Equal(got, []audit.FindingKind{audit.FindingLeaseExpired, audit.FindingLockEvicted}) {
		t.Fatalf("findings = %v, want [lease_expired lock_evicted]", got)
	}
}

func TestTrackerClockExpiryWaitsForTheCollector(t *testing.T) {
	// The collector stops at 5 s (a restart, an outage). Past the lease the
	// tracker must not call the lease expired: the renewals made meanwhile
	// are still to be replayed.
	s := newStory(t, audit.KindKubernetes)
	s.grant("pod-a", 1, at(0), 10*time.Second)
	s.live(at(5 * time.Second))
	s.out.Append(s.tr.Tick(at(time.Minute)))
	if got := s.events(); !slices.Equal(got, []audit.EventKind{audit.EventGrant}) {
		t.Fatalf("events while the collector is away = %v, want only the grant", got)
	}
	// The replay brings the renewals; then the collector is live again.
	for renewed := 5 * time.Second; renewed <= 55*time.Second; renewed += 5 * time.Second {
		s.observe(audit.Observation{Kind: audit.EventRenew, At: at(61 * time.Second), RenewedAt: at(renewed), Holder: "pod-a", Token: audit.Int64(1)})
	}
	s.tick(at(62 * time.Second))
	if got := s.findings(); len(got) != 0 {
		t.Fatalf("findings = %v, want none: the holder never stopped renewing", got)
	}
	s.tick(at(66 * time.Second))
	if got := s.findings(); !slices.Equal(got, []audit.FindingKind{audit.FindingLeaseExpired}) {
		t.Fatalf("findings = %v, want lease_expired once the collector vouches past 65 s", got)
	}
}

func TestTrackerJudgesLateReportsByTheirOwnTime(t *testing.T) {
	// A's write with token 18 happened before B's grant of 19, but its report
	// reached leasewatch after the collector had seen the grant: no finding.
	s := newStory(t, audit.KindRedis)
	s.grant("A", 18, at(0), 2*time.Second)
	s.release("A", at(time.Second))
	s.grant("B", 19, at(time.Second+20*time.Millisecond), 2*time.Second)
	s.write("payments", 18, audit.WriteAccepted, at(time.Second-2*time.Millisecond))
	if got := s.findings(); len(got) != 0 {
		t.Fatalf("findings = %v, want none", got)
	}
	// The same write landing after B's grant is unfenced.
	s.write("payments", 18, audit.WriteAccepted, at(1500*time.Millisecond))
	if got := s.findings(); !slices.Equal(got, []audit.FindingKind{audit.FindingUnfencedWrite}) {
		t.Fatalf("findings = %v, want [unfenced_write]", got)
	}
}

func TestTrackerUnknownInferredGrantIsNotUnfenced(t *testing.T) {
	// A key written and gone before the collector could read it: an
	// inferred grant with no holder and no token proves nothing about fencing.
	s := newStory(t, audit.KindRedis)
	s.observe(audit.Observation{Kind: audit.EventGrant, At: at(0), Inferred: true, LeaseDuration: time.Second})
	if got := s.findings(); len(got) != 0 {
		t.Fatalf("findings = %v, want none", got)
	}
}

// TestTrackerRenewalsTravelApart checks which steps change a lock in full and
// which only renew it (Batch.Renewed), the split the recorder's deferred
// renewal writes rest on.
func TestTrackerRenewalsTravelApart(t *testing.T) {
	tr := audit.NewTracker(audit.TrackerConfig{})
	key := audit.LockKey{Source: "src", Name: "orders"}
	observe := func(ob audit.Observation) audit.Batch {
		ob.Lock = key
		return tr.Step(audit.Input{Source: "src", Kind: audit.KindKubernetes, Observations: []audit.Observation{ob}, ExpireByClock: true})
	}
	write := func(token int64, when time.Time) audit.Batch {
		return tr.ReportWrite(audit.WriteReport{Source: "src", Lock: "orders", Resource: "db", Token: audit.Int64(token), Outcome: audit.WriteAccepted, At: when})
	}
	type split struct{ locks, renewed, tenures, events, resources int }
	for _, step := range []struct {
		name string
		do   func() audit.Batch
		want split
	}{
		{"grant", func() audit.Batch {
			return observe(audit.Observation{Kind: audit.EventGrant, At: at(0), Holder: "a", Token: audit.Int64(1), LeaseDuration: 10 * time.Second})
		}, split{locks: 1, tenures: 1, events: 1}},
		{"renewal", func() audit.Batch {
			return observe(audit.Observation{Kind: audit.EventRenew, At: at(2 * time.Second), Holder: "a", Token: audit.Int64(1)})
		}, split{renewed: 1, events: 1}},
		{"a renewal the tracker already has", func() audit.Batch {
			return observe(audit.Observation{Kind: audit.EventRenew, At: at(2 * time.Second), Holder: "a", Token: audit.Int64(1)})
		}, split{}},
		{"an overtaken renewal", func() audit.Batch {
			return observe(audit.Observation{Kind: audit.EventRenew, At: at(2 * time.Second), Holder: "a", Token: audit.Int64(1), Overtaken: true})
		}, split{renewed: 1, events: 1}},
		{"a first write to a resource", func() audit.Batch { return write(1, at(3*time.Second)) }, split{resources: 1, events: 1}},
		{"a write that teaches the resource nothing", func() audit.Batch { return write(1, at(4*time.Second)) }, split{events: 1}},
		{"a late renewal, with its finding", func() audit.Batch {
			return observe(audit.Observation{Kind: audit.EventRenew, At: at(11 * time.Second), Holder: "a", Token: audit.Int64(1)})
		}, split{renewed: 1, events: 1}},
		{"a renewal that also reclassifies the lock writes the renewed tenure", func() audit.Batch {
			return observe(audit.Observation{Kind: audit.EventRenew, At: at(11500 * time.Millisecond), Holder: "a", Token: audit.Int64(1), Class: audit.ClassHeartbeat})
		}, split{locks: 1, tenures: 1, events: 1}},
		{"release", func() audit.Batch {
			return observe(audit.Observation{Kind: audit.EventRelease, At: at(12 * time.Second), Holder: "a"})
		},
			split{locks: 1, tenures: 1, events: 1}},
	} {
		b := step.do()
		got := split{len(b.Locks), len(b.Renewed), len(b.Tenures), len(b.Events), len(b.Resources)}
		if got != step.want {
			t.Errorf("%s: %+v; want %+v", step.name, got, step.want)
		}
		for _, r := range b.Renewed {
			st, _ := tr.State(key)
			cur := st.Recent[len(st.Recent)-1]
			want := audit.Renewal{Lock: key, Seq: cur.Seq, Renewals: cur.Renewals, RenewedAt: cur.LastRenewedAt, ExpiresAt: cur.ExpiresAt, LeaseDuration: cur.LeaseDuration}
			if r != want || !st.Lock.RenewedAt.Equal(r.RenewedAt) || !st.Lock.ExpiresAt.Equal(r.ExpiresAt) {
				t.Errorf("%s: renewal %+v, want %+v, as the tracker has the lock and its held tenure", step.name, r, want)
			}
		}
	}
}

// TestReplayRenewalRebuildsState replays renew events onto lock rows older
// than them, as a restart after a crash between syncs does, and gets the
// tracker's own state back, whatever happened in between.
func TestReplayRenewalRebuildsState(t *testing.T) {
	tr := audit.NewTracker(audit.TrackerConfig{})
	key := audit.LockKey{Source: "src", Name: "orders"}
	rows := map[audit.LockKey]audit.TrackState{} // what a journal wrote in full
	var events []audit.Event
	synced := 0 // events up to here are in rows
	// The lock's resource rows.
	resources := map[string]*audit.ResourceState{}
	step := func(b audit.Batch) {
		events = append(events, b.Events...)
		for _, st := range b.Locks {
			rows[st.Lock.Key()] = st
			synced = len(events)
		}
		for _, r := range b.Resources {
			resources[r.Resource] = &r.State
		}
	}
	renew := func(holder string, token int64, when time.Time) {
		step(tr.Step(audit.Input{Source: "src", Kind: audit.KindKubernetes, Observations: []audit.Observation{
			{Lock: key, Kind: audit.EventRenew, At: when.Add(time.Millisecond), RenewedAt: when, Holder: holder, Token: audit.Int64(token)}}}))
	}
	overtaken := func(holder string, token int64, when time.Time) {
		step(tr.Step(audit.Input{Source: "src", Kind: audit.KindRedis, Observations: []audit.Observation{
			{Lock: key, Kind: audit.EventRenew, At: when, Holder: holder, Token: audit.Int64(token), Overtaken: true}}}))
	}
	grant := func(holder string, token int64, when time.Time) {
		step(tr.Step(audit.Input{Source: "src", Kind: audit.KindKubernetes, Observations: []audit.Observation{
			{Lock: key, Kind: audit.EventGrant, At: when, Holder: holder, Token: audit.Int64(token), LeaseDuration: 10 * time.Second}}}))
	}
	grant("a", 1, at(0))
	renew("a", 1, at(2*time.Second))
	overtaken("a", 1, at(3*time.Second))
	renew("a", 1, at(4*time.Second))
	step(tr.ReportWrite(audit.WriteReport{Source: "src", Lock: "orders", Resource: "db", Token: audit.Int64(1), Outcome: audit.WriteAccepted, At: at(5 * time.Second)}))
	renew("a", 1, at(6*time.Second))
	grant("b", 2, at(8*time.Second)) // a's renewals now belong to an ended tenure
	renew("b", 2, at(9*time.Second))
	// The same holder and token again, as a Kubernetes re-acquire after an
	// expiry: b's earlier renewal must not land on the new tenure.
	step(tr.Step(audit.Input{Source: "src", Kind: audit.KindKubernetes, Observations: []audit.Observation{
		{Lock: key, Kind: audit.EventExpire, At: at(20 * time.Second), Holder: "b"}}}))
	grant("b", 2, at(21*time.Second))
	renew("b", 2, at(23*time.Second))
	overtaken("b", 2, at(24*time.Second))
	// A write: its resource's row only, the lock's rows as the grant left them.
	step(tr.ReportWrite(audit.WriteReport{Source: "src", Lock: "orders", Resource: "db", Token: audit.Int64(2), Outcome: audit.WriteAccepted, At: at(24500 * time.Millisecond)}))
	renew("b", 2, at(25*time.Second))
	overtaken("b", 2, at(26*time.Second))
	overtaken("b", 2, at(27*time.Second))

	// Replaying from the last full write of the lock rebuilds the tracker's
	// state; so does replaying every event from the start, as those the rows
	// hold already change nothing. Events read back from a store carry
	// their details as JSON numbers.
	want, _ := tr.State(key)
	for _, r := range want.Resources {
		r.Accepted = nil // memory only: no row keeps them
	}
	for _, from := range []int{synced, 0} {
		for _, stored := range []bool{false, true} {
			restored := audit.NewTracker(audit.TrackerConfig{})
			saved := rows[key]
			saved.Resources = resources
			restored.Restore([]audit.TrackState{saved})
			for _, e := range events[from:] {
				if stored {
					e.Detail, e.Renewal = jsonRoundTrip(t, rowcodec.WithRenewal(e)), audit.RenewalDetail{}
				}
				if rn, ok := restored.ReplayRenewal(e); ok && (rn.Lock != key || rn.Seq != e.Seq && e.Seq != 0) {
					t.Fatalf("replaying %+v: renewal %+v, want the lock's held tenure", e, rn)
				}
			}
			st, _ := restored.State(key)
			if !reflect.DeepEqual(st, want) {
				t.Errorf("replayed from event %d (read back from a store: %v):\n got %+v\nwant %+v", from, stored, st, want)
			}
		}
	}
	if cur := want.Recent[len(want.Recent)-1]; cur.Renewals != 5 || !cur.LastRenewedAt.Equal(at(25*time.Second)) {
		t.Fatalf("tracker's held tenure = %+v, want five renewals, the last timed one at 25s", cur)
	}
}

func jsonRoundTrip(t *testing.T, d map[string]any) map[string]any {
	t.Helper()
	if d == nil {
		return nil
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out map[string]any
	if err := dec.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTrackerRenewalDetailTyped: a renew event carries its margin and the
// backend's renewal time typed, and no detail of its own beside the
// collector's: a map and a formatted time for every heartbeat were most of
// what a renewal allocated.
func TestTrackerRenewalDetailTyped(t *testing.T) {
	s := newStory(t, audit.KindKubernetes)
	renew := func(when, renewed time.Time) audit.Event {
		t.Helper()
		s.observe(audit.Observation{Kind: audit.EventRenew, At: when, Holder: "a", Token: audit.Int64(1), RenewedAt: renewed})
		return s.out.Events[len(s.out.Events)-1]
	}
	s.grant("a", 1, at(0), 10*time.Second)
	renewed := at(2500*time.Millisecond - time.Microsecond)
	e := renew(at(2500*time.Millisecond), renewed)
	want := audit.RenewalDetail{Margin: 750, RenewedAt: renewed.UnixNano(), HasMargin: true, HasRenewedAt: true}
	if e.Kind != audit.EventRenew || e.Renewal != want || e.Detail != nil {
		t.Fatalf("renewal = %+v, want margin 0.75 and renewed_at typed (%+v), no detail", e, want)
	}
	if m, ok := e.MarginRatio(); !ok || m != 0.75 {
		t.Errorf("MarginRatio() = %v, %v; want 0.75", m, ok)
	}
}

// TestTrackerOvertakenRenewals: a renewal whose deadline a read of a later
// one had already shown counts, and changes nothing else; one that arrives
// after its tenure ended (the tracker's clock expired it while the collector
// lagged) counts on that tenure, placed no later than its end.
func TestTrackerOvertakenRenewals(t *testing.T) {
	s := newStory(t, audit.KindRedis)
	overtaken := func(holder string, when time.Time) {
		s.observe(audit.Observation{Kind: audit.EventRenew, At: when, Holder: holder, Token: audit.Int64(1), Overtaken: true})
	}
	s.grant("a", 1, at(0), 2*time.Second)
	s.renew("a", 1, at(1000*time.Millisecond))
	before, _ := s.tr.State(s.key())
	overtaken("a", at(1100*time.Millisecond))
	after, _ := s.tr.State(s.key())
	cur, was := after.Recent[len(after.Recent)-1], before.Recent[len(before.Recent)-1]
	if cur.Renewals != was.Renewals+1 || !cur.LastRenewedAt.Equal(was.LastRenewedAt) || !cur.ExpiresAt.Equal(was.ExpiresAt) || !after.Lock.RenewedAt.Equal(before.Lock.RenewedAt) {
		t.Fatalf("after an overtaken renewal: tenure %+v, want %+v with one more renewal and nothing else moved", cur, was)
	}
	e := s.out.Events[len(s.out.Events)-1]
	if e.Kind != audit.EventRenew || !e.At.Equal(at(1100*time.Millisecond)) || e.Detail["overtaken"] != true || e.Detail["renewal"] != int64(2) {
		t.Fatalf("overtaken renewal's event = %+v, want a renew at 1.1s marked overtaken, renewal 2", e)
	}
	if m, ok := e.MarginRatio(); ok {
		t.Errorf("overtaken renewal's event has a margin %v, but its time is unknown", m)
	}

	// The lease runs out by the tracker's clock, b takes the lock, and
	// then a's last renewals arrive.
	s.tick(at(3100 * time.Millisecond))
	s.grant("b", 2, at(3200*time.Millisecond), 2*time.Second)
	n := len(s.out.Tenures)
	overtaken("a", at(3300*time.Millisecond))
	st, _ := s.tr.State(s.key())
	a, b := st.Recent[len(st.Recent)-2], st.Recent[len(st.Recent)-1]
	if a.Holder != "a" || a.Held() || a.Renewals != 3 || b.Renewals != 0 {
		t.Fatalf("after a's renewal arrived late: a %+v, b %+v; want a's ended tenure with 3 renewals, none for b", a, b)
	}
	e = s.out.Events[len(s.out.Events)-1]
	if e.Kind != audit.EventRenew || e.Holder != "a" || !e.At.Equal(a.EndedAt) {
		t.Errorf("a's late renewal's event = %+v, want a renew of a placed at its end %v", e, a.EndedAt)
	}
	if len(s.out.Tenures) != n+1 || s.out.Tenures[n].Seq != a.Seq || s.out.Tenures[n].Renewals != 3 {
		t.Errorf("tenures written for a's late renewal = %+v, want a's tenure with 3 renewals", s.out.Tenures[n:])
	}
	m := len(s.out.Events)
	overtaken("c", at(3400*time.Millisecond))
	if len(s.out.Events) != m {
		t.Errorf("an overtaken renewal of a holder the lock never had made events %v", s.events()[m:])
	}
}

// Tick looks at the locks only once the earliest lease can have run out. A
// lock granted, or renewed with a shorter lease, after a Tick that saw only
// long leases, or states restored from the journal, are still expired on
// time.
func TestTrackerTickExpiresLeasesThatCameAfterItLooked(t *testing.T) {
	tr := audit.NewTracker(audit.TrackerConfig{})
	observe := func(name string, kind audit.EventKind, when time.Time, lease time.Duration) {
		t.Helper()
		tr.Step(audit.Input{Source: "src", Kind: audit.KindRedis, ExpireByClock: true, Live: true, At: when,
			Observations: []audit.Observation{{Lock: audit.LockKey{Source: "src", Name: name}, Kind: kind, At: when,
				Holder: "h-" + name, Token: audit.Int64(1), LeaseDuration: lease}}})
	}
	expired := func(now time.Time) []string {
		tr.Step(audit.Input{Source: "src", Kind: audit.KindRedis, ExpireByClock: true, Live: true, At: now})
		var names []string
		for _, e := range tr.Tick(now).Events {
			if e.Kind == audit.EventExpire {
				names = append(names, e.Lock.Name)
			}
		}
		return names
	}
	observe("long", audit.EventGrant, at(0), time.Hour)
	if got := expired(at(time.Second)); len(got) != 0 {
		t.Fatalf("expired at 1s: %v, want none", got)
	}
	observe("short", audit.EventGrant, at(2*time.Second), 2*time.Second)
	if got := expired(at(5 * time.Second)); !slices.Equal(got, []string{"short"}) {
		t.Fatalf("expired at 5s: %v, want [short], granted after the last look with a 2s lease", got)
	}
	observe("long", audit.EventRenew, at(6*time.Second), time.Second)
	if got := expired(at(8 * time.Second)); !slices.Equal(got, []string{"long"}) {
		t.Fatalf("expired at 8s: %v, want [long], renewed with a 1s lease", got)
	}

	// A restored tracker has not looked yet.
	observe("again", audit.EventGrant, at(10*time.Second), time.Hour)
	if got := expired(at(11 * time.Second)); len(got) != 0 {
		t.Fatalf("expired at 11s: %v, want none", got)
	}
	st, _ := tr.State(audit.LockKey{Source: "src", Name: "again"})
	st.Recent[len(st.Recent)-1].ExpiresAt = at(12 * time.Second)
	tr.Restore([]audit.TrackState{st})
	if got := expired(at(13 * time.Second)); !slices.Equal(got, []string{"again"}) {
		t.Fatalf("expired at 13s after a restore: %v, want [again]", got)
	}
}

// tenureEnd is how a tenure ended, for the tests of end reasons: End is
// empty, and At zero, while it is held.
type tenureEnd struct {
	Holder string
	End    audit.EndReason
	At     time.Time
}

func (s *story) ends() []tenureEnd {
	st, _ := s.tr.State(s.key())
	var out []tenureEnd
	for _, ten := range st.Recent {
		out = append(out, tenureEnd{ten.Holder, ten.End, ten.EndedAt})
	}
	return out
}

// tickOnly moves the tracker's clock without the collector vouching for
// anything new, as a Recorder's ticker does between the collector's Live
// inputs.
func (s *story) tickOnly(when time.Time) { s.out.Append(s.tr.Tick(when)) }

// TestTrackerEndsDoNotDependOnTicks races the tracker's clock against the
// observation that follows a lease's end: each story runs with a tick between
// the lease's end and the observation, with a tick after it, and with no tick
// at all, and every order must end every tenure the same way, at the same
// time, with the same findings.
func TestTrackerEndsDoNotDependOnTicks(t *testing.T) {
	const lease = 10 * time.Second
	ms := func(n int) time.Time { return at(time.Duration(n) * time.Millisecond) }
	renewAt := func(s *story, holder string, token int64, renewed, seen time.Time) {
		s.observe(audit.Observation{Kind: audit.EventRenew, At: seen, RenewedAt: renewed, Holder: holder, Token: audit.Int64(token)})
	}
	races := []struct {
		name     string
		kind     audit.SourceKind
		setup    func(s *story) // what happened before the race
		tick     time.Time      // the tick that comes first, after the lease ran out
		then     func(s *story) // the observation that races the clock
		after    time.Time      // the tick that comes after it
		stalled  bool           // the collector vouches for nothing after setup: the ticks only move the clock
		want     []tenureEnd
		findings []audit.FindingKind // sorted
	}{
		{
			// A renewed at 2 s, so its lease ran out at 12 s; B's grant
			// reaches the tracker 342 ms later.
			name: "GrantAfterTheLeaseRanOut",
			kind: audit.KindKubernetes,
			setup: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.renew("A", 1, at(2*time.Second))
			},
			tick:     ms(12100),
			then:     func(s *story) { s.grant("B", 2, ms(12342), lease) },
			after:    ms(13000),
			want:     []tenureEnd{{"A", audit.EndExpired, ms(12000)}, {"B", "", time.Time{}}},
			findings: []audit.FindingKind{audit.FindingLeaseExpired},
		},
		{
			// At the very instant the lease runs out it is no longer valid:
			// an expiry, not an overlap.
			name: "GrantAtTheInstantTheLeaseRanOut",
			kind: audit.KindKubernetes,
			setup: func(s *story) {
				s.grant("A", 1, at(0), lease)
			},
			tick:     ms(10000),
			then:     func(s *story) { s.grant("B", 2, ms(10000), lease) },
			after:    ms(10500),
			want:     []tenureEnd{{"A", audit.EndExpired, ms(10000)}, {"B", "", time.Time{}}},
			findings: []audit.FindingKind{audit.FindingLeaseExpired},
		},
		{
			// The one order that is not a race: B was granted while A's lease
			// ran, so A was superseded, with an overlap, whenever ticks come.
			name: "GrantWhileTheLeaseRan",
			kind: audit.KindKubernetes,
			setup: func(s *story) {
				s.grant("A", 1, at(0), lease)
			},
			tick:     ms(9000),
			then:     func(s *story) { s.grant("B", 2, ms(9500), lease) },
			after:    ms(11000),
			want:     []tenureEnd{{"A", audit.EndSuperseded, ms(9500)}, {"B", "", time.Time{}}},
			findings: []audit.FindingKind{audit.FindingOverlap},
		},
		{
			// A release the collector sees after the lease ran out is too
			// late: the lock was free for anyone from 10 s.
			name: "ReleaseAfterTheLeaseRanOut",
			kind: audit.KindKubernetes,
			setup: func(s *story) {
				s.grant("A", 1, at(0), lease)
			},
			tick:     ms(10100),
			then:     func(s *story) { s.release("A", ms(10300)) },
			after:    ms(11000),
			want:     []tenureEnd{{"A", audit.EndExpired, ms(10000)}},
			findings: []audit.FindingKind{audit.FindingLeaseExpired},
		},
		{
			name: "ReleaseWhileTheLeaseRan",
			kind: audit.KindKubernetes,
			setup: func(s *story) {
				s.grant("A", 1, at(0), lease)
			},
			tick:  ms(9000),
			then:  func(s *story) { s.release("A", ms(9900)) },
			after: ms(11000),
			want:  []tenureEnd{{"A", audit.EndReleased, ms(9900)}},
		},
		{
			// client-go's release writes renewTime, by the holder's clock, as
			// the lease's: A released at 9.9 s, and the collector got it at
			// 10.3 s, having vouched only for 9 s.
			name: "ReleaseInTimeDeliveredLate",
			kind: audit.KindKubernetes,
			setup: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.live(ms(9000))
			},
			tick:    ms(10100),
			stalled: true,
			then: func(s *story) {
				s.observe(audit.Observation{Kind: audit.EventRelease, At: ms(10300), RenewedAt: ms(9900), Holder: "A", Token: audit.Int64(1)})
			},
			after: ms(11000),
			want:  []tenureEnd{{"A", audit.EndReleased, ms(10300)}},
		},
		{
			// A renews at 10.5 s by its own clock, half a second after its
			// lease ran out by the same clock: the lease expired, and A took
			// the lock anew (client-go keeps leaseTransitions, hence the
			// reused token).
			name: "RenewalAfterTheLeaseRanOut",
			kind: audit.KindKubernetes,
			setup: func(s *story) {
				s.grant("A", 1, at(0), lease)
			},
			tick:     ms(10200),
			then:     func(s *story) { renewAt(s, "A", 1, ms(10500), ms(10600)) },
			after:    ms(11000),
			want:     []tenureEnd{{"A", audit.EndExpired, ms(10000)}, {"A", "", time.Time{}}},
			findings: []audit.FindingKind{audit.FindingLeaseExpired, audit.FindingTokenReuse},
		},
		{
			// A renewed in time (9.8 s) but the collector got it late. The
			// collector had vouched only up to 9 s, so no tick expires A.
			name: "RenewalInTimeDeliveredLate",
			kind: audit.KindKubernetes,
			setup: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.live(ms(9000))
			},
			tick:     ms(10200),
			stalled:  true,
			then:     func(s *story) { renewAt(s, "A", 1, ms(9800), ms(10400)) },
			after:    ms(11000),
			want:     []tenureEnd{{"A", "", time.Time{}}},
			findings: []audit.FindingKind{audit.FindingLateRenewal},
		},
		{
			// Redis's own expired notification comes after the lease's end:
			// the tenure ended when the lease did, not when the news arrived.
			name: "BackendExpiryAfterTheLeaseRanOut",
			kind: audit.KindRedis,
			setup: func(s *story) {
				s.grant("A", 1, at(0), lease)
			},
			tick:     ms(10100),
			then:     func(s *story) { s.expire("A", ms(10400)) },
			after:    ms(11000),
			want:     []tenureEnd{{"A", audit.EndExpired, ms(10000)}},
			findings: []audit.FindingKind{audit.FindingLeaseExpired},
		},
		{
			// The collector vouched for 11 s, past A's lease, then went blind;
			// the snapshot after the blind window shows B.
			name: "SnapshotAfterABlindWindowThatBeganAfterTheLeaseRanOut",
			kind: audit.KindKubernetes,
			setup: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.live(ms(11000))
			},
			tick: ms(11000),
			then: func(s *story) {
				s.out.Append(s.tr.Step(audit.Input{Source: s.source, Kind: s.kind, At: at(time.Minute), Snapshot: true, Live: true, ExpireByClock: true, SequentialTokens: true,
					Blind:        &audit.Blind{From: ms(11000), To: at(time.Minute)},
					Observations: []audit.Observation{{Lock: s.key(), Kind: audit.EventGrant, At: at(time.Minute), RenewedAt: at(58 * time.Second), Holder: "B", Token: audit.Int64(2), LeaseDuration: lease, Inferred: true}}}))
			},
			after:    at(61 * time.Second),
			want:     []tenureEnd{{"A", audit.EndExpired, ms(10000)}, {"B", "", time.Time{}}},
			findings: []audit.FindingKind{audit.FindingBlindWindow, audit.FindingLeaseExpired},
		},
		{
			// The same, but the snapshot shows A holding a renewed lease: the
			// collector had seen it run out before going blind, so A holds
			// the lock anew.
			name: "SnapshotShowsTheHolderAgainAfterItsLeaseRanOut",
			kind: audit.KindKubernetes,
			setup: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.live(ms(11000))
			},
			tick: ms(11000),
			then: func(s *story) {
				s.out.Append(s.tr.Step(audit.Input{Source: s.source, Kind: s.kind, At: at(time.Minute), Snapshot: true, Live: true, ExpireByClock: true, SequentialTokens: true,
					Blind:        &audit.Blind{From: ms(11000), To: at(time.Minute)},
					Observations: []audit.Observation{{Lock: s.key(), Kind: audit.EventGrant, At: at(time.Minute), RenewedAt: at(58 * time.Second), Holder: "A", Token: audit.Int64(1), LeaseDuration: lease, Inferred: true}}}))
			},
			after:    at(61 * time.Second),
			want:     []tenureEnd{{"A", audit.EndExpired, ms(10000)}, {"A", "", time.Time{}}},
			findings: []audit.FindingKind{audit.FindingBlindWindow, audit.FindingLeaseExpired, audit.FindingTokenReuse},
		},
		{
			// Blind from 5 s, before the lease ran out: the renewals that the
			// snapshot shows happened unseen, and no tick may expire A.
			name: "SnapshotAfterABlindWindowThatBeganWhileTheLeaseRan",
			kind: audit.KindKubernetes,
			setup: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.live(ms(5000))
			},
			tick:    ms(30000),
			stalled: true,
			then: func(s *story) {
				s.out.Append(s.tr.Step(audit.Input{Source: s.source, Kind: s.kind, At: at(time.Minute), Snapshot: true, Live: true, ExpireByClock: true, SequentialTokens: true,
					Blind:        &audit.Blind{From: ms(5000), To: at(time.Minute)},
					Observations: []audit.Observation{{Lock: s.key(), Kind: audit.EventGrant, At: at(time.Minute), RenewedAt: at(58 * time.Second), Holder: "A", Token: audit.Int64(1), LeaseDuration: lease, Inferred: true}}}))
			},
			after:    at(61 * time.Second),
			want:     []tenureEnd{{"A", "", time.Time{}}},
			findings: []audit.FindingKind{audit.FindingBlindWindow},
		},
		{
			// A full snapshot without the lock, after its lease ran out.
			name: "SnapshotWithoutTheLockAfterItsLeaseRanOut",
			kind: audit.KindKubernetes,
			setup: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.live(ms(10500))
			},
			tick: ms(10500),
			then: func(s *story) {
				s.out.Append(s.tr.Step(audit.Input{Source: s.source, Kind: s.kind, At: at(time.Minute), Snapshot: true, Live: true, ExpireByClock: true, SequentialTokens: true}))
			},
			after:    at(61 * time.Second),
			want:     []tenureEnd{{"A", audit.EndExpired, ms(10000)}},
			findings: []audit.FindingKind{audit.FindingLeaseExpired},
		},
		{
			// A write with A's token at 12 s, after A's lease ran out at
			// 10 s and the collector vouched for 11 s: unfenced, tick or not.
			name: "WriteAfterTheLeaseRanOut",
			kind: audit.KindKubernetes,
			setup: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.live(ms(11000))
			},
			tick:     ms(11000),
			then:     func(s *story) { s.write("ledger", 1, audit.WriteAccepted, ms(12000)) },
			after:    ms(12500),
			want:     []tenureEnd{{"A", audit.EndExpired, ms(10000)}},
			findings: []audit.FindingKind{audit.FindingLeaseExpired, audit.FindingUnfencedWrite},
		},
		{
			// etcd deletes a key whose lease ran out, and the collector
			// reports that: until it does, the lease is the backend's to
			// end, not the clock's (the expiry the tracker has is only the
			// collector's last TTL reading). A grant of another key without
			// it ends A as superseded, tick or not.
			name: "EtcdGrantWithoutTheBackendsExpiry",
			kind: audit.KindEtcd,
			setup: func(s *story) {
				s.grant("A", 41, at(0), lease)
			},
			tick:  ms(11000),
			then:  func(s *story) { s.grant("B", 42, ms(12000), lease) },
			after: ms(13000),
			want:  []tenureEnd{{"A", audit.EndSuperseded, ms(12000)}, {"B", "", time.Time{}}},
		},
	}
	orders := []struct {
		name string
		run  func(s *story, tick, after func(), then func(*story))
	}{
		{"TickThenObservation", func(s *story, tick, _ func(), then func(*story)) { tick(); then(s) }},
		{"ObservationThenTick", func(s *story, _, after func(), then func(*story)) { then(s); after() }},
		{"ObservationWithNoTick", func(s *story, _, _ func(), then func(*story)) { then(s) }},
	}
	for _, r := range races {
		for _, order := range orders {
			t.Run(r.name+"/"+order.name, func(t *testing.T) {
				s := newStory(t, r.kind)
				r.setup(s)
				tick, after := func() { s.tick(r.tick) }, func() { s.tick(r.after) }
				if r.stalled {
					tick, after = func() { s.tickOnly(r.tick) }, func() { s.tickOnly(r.after) }
				}
				order.run(s, tick, after, r.then)
				if got := s.ends(); !slices.Equal(got, r.want) {
					t.Errorf("tenures = %+v, want %+v", got, r.want)
				}
				got := s.findings()
				slices.Sort(got)
				if !slices.Equal(got, r.findings) {
					t.Errorf("findings = %v, want %v", got, r.findings)
				}
				// An expiry's event and finding are at the lease's end too.
				for _, e := range s.ends() {
					if e.End != audit.EndExpired {
						continue
					}
					if !slices.ContainsFunc(s.out.Events, func(ev audit.Event) bool { return ev.Kind == audit.EventExpire && ev.At.Equal(e.At) }) {
						t.Errorf("no expire event at %v; events = %v", e.At, s.events())
					}
					if f := s.finding(audit.FindingLeaseExpired); !f.At.Equal(e.At) {
						t.Errorf("lease_expired at %v, want %v", f.At, e.At)
					}
				}
			})
		}
	}
}

// TestTrackerClientGoHolderCrashedWithoutReleasing is the case seen in
// production: a client-go leader election on a loaded machine, whose leader
// crashed without releasing. Its lease (15 s, renewed every 2 s) ran out; the
// recorder's ticker ran while the collector had vouched only for a moment
// before that; the new leader's grant arrived 342 ms after the lease ran out,
// before the next tick. It was recorded as superseded, with no finding.
func TestTrackerClientGoHolderCrashedWithoutReleasing(t *testing.T) {
	const lease = 15 * time.Second
	s := newStory(t, audit.KindKubernetes)
	s.grant("pod-a", 4, at(0), lease)
	var last time.Time
	for renewed := 2 * time.Second; renewed <= 20*time.Second; renewed += 2 * time.Second {
		// renewTime is pod-a's clock; the collector gets it a little later.
		s.observe(audit.Observation{Kind: audit.EventRenew, At: at(renewed + 30*time.Millisecond), RenewedAt: at(renewed), Holder: "pod-a", Token: audit.Int64(4)})
		s.tick(at(renewed + 250*time.Millisecond))
		last = at(renewed)
	}
	expiry := last.Add(lease)
	s.live(expiry.Add(-200 * time.Millisecond))    // the last probe answered before the expiry
	s.tickOnly(expiry.Add(100 * time.Millisecond)) // nothing to expire yet, as far as the collector vouched
	s.observe(audit.Observation{Kind: audit.EventGrant, At: expiry.Add(342 * time.Millisecond), RenewedAt: expiry.Add(300 * time.Millisecond),
		Holder: "pod-b", Token: audit.Int64(5), LeaseDuration: lease})
	s.tick(expiry.Add(600 * time.Millisecond))

	want := []tenureEnd{{"pod-a", audit.EndExpired, expiry}, {"pod-b", "", time.Time{}}}
	if got := s.ends(); !slices.Equal(got, want) {
		t.Fatalf("tenures = %+v, want %+v", got, want)
	}
	if got := s.findings(); !slices.Equal(got, []audit.FindingKind{audit.FindingLeaseExpired}) {
		t.Fatalf("findings = %v, want [lease_expired]", got)
	}
	if f := s.finding(audit.FindingLeaseExpired); !f.At.Equal(expiry) || !slices.Equal(f.Holders, []string{"pod-a"}) {
		t.Fatalf("lease_expired = %+v, want pod-a's at %v", f, expiry)
	}
	for _, e := range s.out.Events {
		if e.Kind == audit.EventGrant && e.Holder == "pod-b" && e.Detail["superseded"] != nil {
			t.Fatalf("pod-b's grant %+v says it superseded pod-a, whose lease had run out", e)
		}
	}
}

// A write accepted under a token no grant had: raised once the collector
// has vouched for every change up to the write, or once a grant after the
// write carries a lower token; a token the collector has yet to deliver the
// grant of is no finding.
func TestTrackerUngrantedToken(t *testing.T) {
	const forged = math.MaxInt64
	t.Run("CollectorVouchedForTheWritesTime", func(t *testing.T) {
		s := newStory(t, audit.KindRedis)
		s.grant("A", 41, at(0), time.Minute)
		s.live(at(2 * time.Second))
		s.write("ledger", forged, audit.WriteAccepted, at(time.Second))
		if got := s.findings(); !slices.Equal(got, []audit.FindingKind{audit.FindingUngrantedToken}) {
			t.Fatalf("findings = %v, want [ungranted_token]", got)
		}
		if f := s.finding(audit.FindingUngrantedToken); f.Severity != audit.SeverityCritical || f.Resource != "ledger" || !slices.Equal(f.Tokens, []int64{forged}) {
			t.Fatalf("finding = %+v, want a critical one naming ledger and the token", f)
		}
	})
	t.Run("ALaterGrantCarriesALowerToken", func(t *testing.T) {
		s := newStory(t, audit.KindEtcd)
		s.grant("A", 41, at(0), time.Minute)
		s.write("ledger", forged, audit.WriteAccepted, at(time.Second))
		if got := s.findings(); len(got) != 0 {
			t.Fatalf("findings before the next grant = %v, want none: its grant may be on its way", got)
		}
		s.release("A", at(2*time.Second))
		s.grant("B", 42, at(3*time.Second), time.Minute)
		if got := s.findings(); !slices.Equal(got, []audit.FindingKind{audit.FindingUngrantedToken}) {
			t.Fatalf("findings = %v, want [ungranted_token]", got)
		}
	})
	t.Run("TheGrantArrivesAfterTheWrite", func(t *testing.T) {
		s := newStory(t, audit.KindEtcd)
		s.grant("A", 41, at(0), time.Minute)
		s.write("ledger", 42, audit.WriteAccepted, at(2*time.Second))
		s.grant("B", 42, at(time.Second), time.Minute) // the collector lagged
		s.grant("C", 43, at(3*time.Second), time.Minute)
		if got := s.findings(); slices.Contains(got, audit.FindingUngrantedToken) {
			t.Fatalf("findings = %v, want no ungranted_token", got)
		}
	})
	t.Run("ALaggingCollectorDeliversTheGrantsTogether", func(t *testing.T) {
		// The collector missed B's and C's grants and delivers both in one
		// input, stamped when it saw them, seconds after C's write: B's lower
		// token must not condemn the write before C's grant is read.
		s := newStory(t, audit.KindEtcd)
		s.grant("A", 41, at(0), time.Minute)
		s.write("ledger", 43, audit.WriteAccepted, at(time.Second))
		s.observe(
			audit.Observation{Kind: audit.EventGrant, At: at(5 * time.Second), Holder: "B", Token: audit.Int64(42), LeaseDuration: time.Minute},
			audit.Observation{Kind: audit.EventGrant, At: at(5 * time.Second), Holder: "C", Token: audit.Int64(43), LeaseDuration: time.Minute},
		)
		if got := s.findings(); slices.Contains(got, audit.FindingUngrantedToken) {
			t.Fatalf("findings = %v, want no ungranted_token", got)
		}
	})
	t.Run("TheResourcesClockBehindTheCollectors", func(t *testing.T) {
		// B writes right after its grant, on a clock 300 ms behind: the
		// write reads as made before the grant, within the collector's
		// vouched time, and before the grant's.
		s := newStory(t, audit.KindRedis)
		s.grant("A", 41, at(0), time.Minute)
		s.live(at(10 * time.Second))
		s.write("ledger", 42, audit.WriteAccepted, at(9800*time.Millisecond))
		s.grant("B", 42, at(10100*time.Millisecond), time.Minute)
		if got := s.findings(); slices.Contains(got, audit.FindingUngrantedToken) {
			t.Fatalf("findings = %v, want no ungranted_token", got)
		}
	})
}
