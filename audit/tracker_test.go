package audit_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
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
	out    audit.Batch
}

func newStory(t *testing.T, kind audit.SourceKind) *story {
	s := &story{t: t, tr: audit.NewTracker(audit.TrackerConfig{RenewMarginRatio: 0.25}), source: "src", kind: kind}
	s.clock = kind != audit.KindEtcd
	s.seq = kind == audit.KindKubernetes
	return s
}

func (s *story) key() audit.LockKey { return audit.LockKey{Source: s.source, Name: "orders"} }

func (s *story) observe(obs ...audit.Observation) {
	for i := range obs {
		obs[i].Lock = s.key()
	}
	s.out.Append(s.tr.Observe(audit.Input{Source: s.source, Kind: s.kind, Observations: obs, ExpireByClock: s.clock, SequentialTokens: s.seq}))
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
	s.out.Append(s.tr.Observe(audit.Input{Source: s.source, Kind: s.kind, At: when, Live: true, ExpireByClock: s.clock, SequentialTokens: s.seq}))
}

func (s *story) write(resource string, token int64, outcome audit.WriteOutcome, when time.Time) {
	s.out.Append(s.tr.ReportWrite(audit.WriteReport{Source: s.source, Lock: "orders", Resource: resource, Token: audit.Int64(token), Outcome: outcome, At: when}))
}

func (s *story) blind(from, to time.Time) {
	s.out.Append(s.tr.Observe(audit.Input{Source: s.source, Kind: s.kind, Blind: &audit.Blind{From: from, To: to, Reason: "compaction"}}))
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
			want: []audit.FindingKind{audit.FindingTokenSkip},
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
			name: "NoOverlapAfterPreviousLeaseRanOut",
			kind: audit.KindKubernetes,
			story: func(s *story) {
				s.grant("A", 1, at(0), lease)
				s.grant("B", 2, at(10*time.Second), lease)
			},
			want: nil,
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
		s.out.Append(s.tr.Observe(audit.Input{Source: s.source, Kind: s.kind, Snapshot: true, Observations: []audit.Observation{
			{Lock: s.key(), Kind: audit.EventGrant, At: at(time.Second), Holder: "A", Token: audit.Int64(5), LeaseDuration: lease, Inferred: true},
		}}))
		if len(s.out.Events) != before {
			t.Fatalf("events = %v, want no new event", s.events()[before:])
		}
	})
	t.Run("SnapshotEndsLocksThatVanishedWhileBlind", func(t *testing.T) {
		s := newStory(t, audit.KindEtcd)
		s.grant("A", 5, at(0), lease)
		s.out.Append(s.tr.Observe(audit.Input{Source: s.source, Kind: s.kind, Snapshot: true, At: at(time.Minute),
			Blind: &audit.Blind{From: at(time.Second), To: at(time.Minute)}}))
		last := s.out.Events[len(s.out.Events)-1]
		if last.Kind != audit.EventExpire || !last.Inferred {
			t.Fatalf("last event = %+v, want an inferred expire (the lease had run out)", last)
		}
	})
	t.Run("InferredGrantAfterBlindDoesNotClaimOverlap", func(t *testing.T) {
		s := newStory(t, audit.KindEtcd)
		s.grant("A", 5, at(0), lease)
		s.out.Append(s.tr.Observe(audit.Input{Source: s.source, Kind: s.kind, Snapshot: true, Blind: &audit.Blind{From: at(time.Second), To: at(2 * time.Second)},
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

func TestTrackerEtcdTenureIsNamedByToken(t *testing.T) {
	const lease = 10 * time.Second
	// After a blind window the snapshot shows the leader's proclaimed value:
	// same key (same CreateRevision), so the same tenure, not a new grant.
	s := newStory(t, audit.KindEtcd)
	s.grant("694d leader-a", 7, at(0), lease)
	s.out.Append(s.tr.Observe(audit.Input{Source: s.source, Kind: s.kind, Snapshot: true, Blind: &audit.Blind{From: at(time.Second), To: at(2 * time.Second)},
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
	for renewed := 7 * time.Second; renewed <= 56*time.Second; renewed += 7 * time.Second {
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
		return tr.Observe(audit.Input{Source: "src", Kind: audit.KindKubernetes, Observations: []audit.Observation{ob}, ExpireByClock: true})
	}
	write := func(token int64, when time.Time) audit.Batch {
		return tr.ReportWrite(audit.WriteReport{Source: "src", Lock: "orders", Resource: "db", Token: audit.Int64(token), Outcome: audit.WriteAccepted, At: when})
	}
	type split struct{ locks, renewed, tenures, events int }
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
		{"a first write to a resource", func() audit.Batch { return write(1, at(3*time.Second)) }, split{locks: 1, events: 1}},
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
		got := split{len(b.Locks), len(b.Renewed), len(b.Tenures), len(b.Events)}
		if got != step.want {
			t.Errorf("%s: %d locks, %d renewed, %d tenures, %d events; want %+v", step.name, got.locks, got.renewed, got.tenures, got.events, step.want)
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
	step := func(b audit.Batch) {
		events = append(events, b.Events...)
		for _, st := range b.Locks {
			rows[st.Lock.Key()] = st
			synced = len(events)
		}
	}
	renew := func(holder string, token int64, when time.Time) {
		step(tr.Observe(audit.Input{Source: "src", Kind: audit.KindKubernetes, Observations: []audit.Observation{
			{Lock: key, Kind: audit.EventRenew, At: when.Add(time.Millisecond), RenewedAt: when, Holder: holder, Token: audit.Int64(token)}}}))
	}
	overtaken := func(holder string, token int64, when time.Time) {
		step(tr.Observe(audit.Input{Source: "src", Kind: audit.KindRedis, Observations: []audit.Observation{
			{Lock: key, Kind: audit.EventRenew, At: when, Holder: holder, Token: audit.Int64(token), Overtaken: true}}}))
	}
	grant := func(holder string, token int64, when time.Time) {
		step(tr.Observe(audit.Input{Source: "src", Kind: audit.KindKubernetes, Observations: []audit.Observation{
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
	step(tr.Observe(audit.Input{Source: "src", Kind: audit.KindKubernetes, Observations: []audit.Observation{
		{Lock: key, Kind: audit.EventExpire, At: at(20 * time.Second), Holder: "b"}}}))
	grant("b", 2, at(21*time.Second))
	renew("b", 2, at(23*time.Second))
	overtaken("b", 2, at(24*time.Second))
	// A full write of the lock's rows, which hold the overtaken renewal.
	step(tr.ReportWrite(audit.WriteReport{Source: "src", Lock: "orders", Resource: "db", Token: audit.Int64(2), Outcome: audit.WriteAccepted, At: at(24500 * time.Millisecond)}))
	renew("b", 2, at(25*time.Second))
	overtaken("b", 2, at(26*time.Second))
	overtaken("b", 2, at(27*time.Second))

	// Replaying from the last full write of the lock rebuilds the tracker's
	// state; so does replaying every event from the start, as those the rows
	// hold already change nothing. Events read back from a store carry
	// their details as JSON numbers.
	want, _ := tr.State(key)
	for _, from := range []int{synced, 0} {
		for _, stored := range []bool{false, true} {
			restored := audit.NewTracker(audit.TrackerConfig{})
			restored.Restore([]audit.TrackState{rows[key]})
			for _, e := range events[from:] {
				if stored {
					e.Detail = jsonRoundTrip(t, e.Detail)
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
	if _, ok := e.Detail["margin_ratio"]; ok {
		t.Errorf("overtaken renewal's event has a margin %v, but its time is unknown", e.Detail["margin_ratio"])
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
		tr.Observe(audit.Input{Source: "src", Kind: audit.KindRedis, ExpireByClock: true, Live: true, At: when,
			Observations: []audit.Observation{{Lock: audit.LockKey{Source: "src", Name: name}, Kind: kind, At: when,
				Holder: "h-" + name, Token: audit.Int64(1), LeaseDuration: lease}}})
	}
	expired := func(now time.Time) []string {
		tr.Observe(audit.Input{Source: "src", Kind: audit.KindRedis, ExpireByClock: true, Live: true, At: now})
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
