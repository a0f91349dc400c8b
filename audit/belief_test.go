package audit_test

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/storetest"
)

// believe is a holder's heartbeat: it acts under token at when. It returns
// what the tracker made of it.
func (s *story) believe(holder string, token int64, when time.Time) audit.Batch {
	b := s.tr.ReportBelief(audit.Belief{Source: s.source, Lock: "orders", Holder: holder, Token: token, At: when})
	s.out.Append(b)
	return b
}

func (s *story) eventsOf(kind audit.EventKind) []audit.Event {
	var out []audit.Event
	for _, e := range s.out.Events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// wantNothing fails unless a belief's batch is empty: no event, no lock or
// tenure to write, no finding.
func wantNothing(t *testing.T, what string, b audit.Batch) {
	t.Helper()
	if !b.Empty() {
		t.Fatalf("%s: batch = %+v, want nothing recorded", what, b)
	}
}

func TestTrackerZombieHolders(t *testing.T) {
	const lease = 2 * time.Second
	tests := []struct {
		name    string
		kind    audit.SourceKind
		story   func(s *story)
		want    []audit.FindingKind
		beliefs int // zombie_belief events
		check   func(t *testing.T, s *story)
	}{{
		name: "HeartbeatsOfTheHeldTenureRecordNothing",
		kind: audit.KindEtcd,
		story: func(s *story) {
			s.grant("A", 41, at(0), lease)
			for i := range 5 {
				wantNothing(s.t, "belief of the held tenure", s.believe("A", 41, at(time.Duration(i)*300*time.Millisecond)))
			}
			s.release("A", at(1500*time.Millisecond))
			// Sent before the release, arriving after it.
			wantNothing(s.t, "belief made before the release", s.believe("A", 41, at(1400*time.Millisecond)))
		},
	}, {
		name: "PausedHolderGoesOnBelievingAfterItsLeaseExpired",
		kind: audit.KindEtcd,
		story: func(s *story) {
			s.grant("A", 41, at(0), lease)
			s.believe("A", 41, at(time.Second))
			// A pauses; etcd expires its lease and B takes the lock.
			s.expire("A", at(2*time.Second))
			s.grant("B", 42, at(3*time.Second), lease)
			s.believe("B", 42, at(3500*time.Millisecond))
			// A wakes up still acting under 41, every second.
			s.believe("A", 41, at(4500*time.Millisecond))
			s.believe("A", 41, at(5500*time.Millisecond))
			s.believe("A", 41, at(6500*time.Millisecond))
		},
		want:    []audit.FindingKind{audit.FindingLeaseExpired, audit.FindingZombieHolder},
		beliefs: 3,
		check: func(t *testing.T, s *story) {
			f := s.finding(audit.FindingZombieHolder)
			if !f.At.Equal(at(2*time.Second)) || !f.Until.Equal(at(4500*time.Millisecond)) ||
				!slices.Equal(f.Tokens, []int64{41}) || !slices.Equal(f.Holders, []string{"A"}) || f.Severity != audit.SeverityWarning {
				t.Fatalf("finding = %+v, want a warning from the expiry at 2s until the first zombie belief at 4.5s, of A under 41", f)
			}
			last := s.eventsOf(audit.EventZombieBelief)[2]
			if !last.At.Equal(at(6500*time.Millisecond)) || last.Holder != "A" || *last.Token != 41 || last.Detail["after_ms"] != int64(4500) || last.Detail["end"] != "expired" {
				t.Fatalf("last zombie belief = %+v, want A under 41 at 6.5s, 4.5 s after its lease expired", last)
			}
		},
	}, {
		name: "SupersededHolderActsBesideTheNewOne",
		kind: audit.KindEtcd,
		story: func(s *story) {
			s.grant("A", 41, at(0), 10*time.Second)
			s.grant("B", 42, at(3*time.Second), 10*time.Second) // A's lease runs to 10 s
			s.believe("A", 41, at(4*time.Second))
		},
		want:    []audit.FindingKind{audit.FindingOverlap, audit.FindingZombieHolder},
		beliefs: 1,
		check: func(t *testing.T, s *story) {
			if f := s.finding(audit.FindingZombieHolder); !f.At.Equal(at(3 * time.Second)) {
				t.Fatalf("zombie since %v, want the superseding grant at 3s", f.At)
			}
		},
	}, {
		name: "LeaseRanOutByTheClockWhileTheCollectorVouched",
		kind: audit.KindKubernetes,
		story: func(s *story) {
			s.grant("A", 7, at(0), lease)
			s.live(at(5 * time.Second)) // nothing renewed A's lease, no tick yet
			s.believe("A", 7, at(5*time.Second))
		},
		want:    []audit.FindingKind{audit.FindingLeaseExpired, audit.FindingZombieHolder},
		beliefs: 1,
		check: func(t *testing.T, s *story) {
			if f := s.finding(audit.FindingZombieHolder); !f.At.Equal(at(lease)) || !f.Until.Equal(at(5*time.Second)) {
				t.Fatalf("zombie_holder = %+v, want from the lease's end at 2s until 5s", f)
			}
		},
	}, {
		name: "LeasePastItsTimeIsNotJudgedWhileTheCollectorLags",
		kind: audit.KindKubernetes,
		story: func(s *story) {
			s.grant("A", 7, at(0), lease)
			// The collector has not vouched past the grant: a renewal may be on its way.
			wantNothing(s.t, "belief past the lease, collector behind", s.believe("A", 7, at(5*time.Second)))
		},
	}, {
		name: "ATokenNewerThanEveryGrantWaitsForTheCollector",
		kind: audit.KindEtcd,
		story: func(s *story) {
			s.grant("A", 41, at(0), lease)
			s.release("A", at(time.Second))
			wantNothing(s.t, "belief of a grant not reported yet", s.believe("B", 50, at(2*time.Second)))
		},
	}, {
		name: "ATokenNeverSeenOlderThanAGrantIsAZombie",
		kind: audit.KindEtcd,
		story: func(s *story) {
			s.grant("B", 41, at(time.Second), lease)
			s.believe("A", 30, at(1500*time.Millisecond))
			wantNothing(s.t, "belief before the newer grant", s.believe("C", 35, at(500*time.Millisecond)))
		},
		want:    []audit.FindingKind{audit.FindingZombieHolder},
		beliefs: 1,
		check: func(t *testing.T, s *story) {
			f := s.finding(audit.FindingZombieHolder)
			if !f.At.Equal(at(time.Second)) || !slices.Equal(f.Tokens, []int64{30, 41}) || !slices.Equal(f.Holders, []string{"A", "B"}) {
				t.Fatalf("finding = %+v, want from 41's grant at 1s, tokens 30 and 41, holders A and B", f)
			}
		},
	}, {
		name: "TwoZombiesOfOneLockEachGetAFinding",
		kind: audit.KindEtcd,
		story: func(s *story) {
			s.grant("A", 41, at(0), lease)
			s.expire("A", at(2*time.Second))
			s.grant("B", 42, at(2*time.Second), lease)
			s.expire("B", at(4*time.Second))
			s.grant("C", 43, at(4*time.Second), lease)
			for i := range 3 {
				s.believe("A", 41, at(5*time.Second+time.Duration(i)*time.Second))
				s.believe("B", 42, at(5*time.Second+time.Duration(i)*time.Second))
			}
		},
		want:    []audit.FindingKind{audit.FindingLeaseExpired, audit.FindingLeaseExpired, audit.FindingZombieHolder, audit.FindingZombieHolder},
		beliefs: 6,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStory(t, tt.kind)
			tt.story(s)
			if got := s.findings(); !slices.Equal(got, tt.want) {
				t.Fatalf("findings = %v, want %v", got, tt.want)
			}
			if got := len(s.eventsOf(audit.EventZombieBelief)); got != tt.beliefs {
				t.Fatalf("zombie_belief events = %d, want %d", got, tt.beliefs)
			}
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}

// A belief of a lock the tracker has never seen creates no lock.
func TestTrackerBeliefOfAnUnknownLock(t *testing.T) {
	s := newStory(t, audit.KindEtcd)
	wantNothing(t, "belief of an unknown lock", s.believe("A", 1, at(0)))
	if _, ok := s.tr.Lock(s.key()); ok {
		t.Fatal("the belief created the lock")
	}
}

// A tracker restored from what a journal saved remembers which zombie
// tenures were reported: the zombie's next heartbeat is an event only.
func TestTrackerZombieSurvivesARestart(t *testing.T) {
	s := newStoryWith(t, audit.KindEtcd, health)
	s.grant("A", 41, at(0), 2*time.Second)
	s.expire("A", at(2*time.Second))
	s.grant("B", 42, at(3*time.Second), 2*time.Second)
	s.believe("A", 41, at(4*time.Second))
	saved, _ := s.tr.State(s.key())
	if want := []audit.ZombieMark{{Seq: 1, AfterMS: 2000}}; !reflect.DeepEqual(saved.Zombies, want) {
		t.Fatalf("saved zombies = %+v, want %+v", saved.Zombies, want)
	}
	s.restart()
	s.believe("A", 41, at(5*time.Second))
	if got := s.findings(); len(got) != 0 || len(s.eventsOf(audit.EventZombieBelief)) != 1 {
		t.Fatalf("after the restart: findings %v, events %v; want no finding and one zombie_belief", got, s.events())
	}
}

// countingJournal counts the batches written through it.
type countingJournal struct {
	audit.Journal
	applies atomic.Int64
}

func (j *countingJournal) Apply(ctx context.Context, b audit.Batch) error {
	j.applies.Add(1)
	return j.Journal.Apply(ctx, b)
}

// Through the recorder into SQLite: a heartbeat of the held tenure commits
// nothing; a zombie's is stored with its finding before it is answered.
func TestRecorderBeliefs(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
	j := &countingJournal{Journal: st}
	rec := storetest.StartRecorder(t, j, audit.WithTickInterval(time.Hour))
	ctx := context.Background()
	if err := rec.Record(ctx, storetest.GrantInput("A", 41, at(0), "")); err != nil {
		t.Fatal(err)
	}
	before := j.applies.Load()
	for i := range 10 {
		if err := rec.ReportBeliefs(ctx, []audit.Belief{{Source: "src", Lock: "orders", Holder: "A", Token: 41, At: at(time.Duration(i) * time.Second)}}); err != nil {
			t.Fatalf("ReportBeliefs: %v", err)
		}
	}
	if n := j.applies.Load() - before; n != 0 {
		t.Fatalf("heartbeats of the held tenure wrote %d batches, want none", n)
	}
	if err := rec.Record(ctx, storetest.GrantInput("B", 42, at(20*time.Second), "")); err != nil {
		t.Fatal(err)
	}
	if err := rec.ReportBeliefs(ctx, []audit.Belief{{Source: "src", Lock: "orders", Holder: "A", Token: 41, At: at(21 * time.Second)}}); err != nil {
		t.Fatalf("ReportBeliefs: %v", err)
	}
	if got := storetest.EventKinds(t, st); !slices.Equal(got, []audit.EventKind{audit.EventGrant, audit.EventGrant, audit.EventZombieBelief}) {
		t.Fatalf("events = %v, want two grants and the zombie belief", got)
	}
	found, err := st.Findings(ctx, audit.FindingFilter{Kind: audit.FindingZombieHolder})
	if err != nil || len(found) != 1 {
		t.Fatalf("zombie_holder findings = %v (%v), want 1", found, err)
	}
}

// With replicas, a belief of a source this recorder does not own is
// refused as write reports are: EFENCED, nothing judged.
func TestRecorderRefusesBeliefsOfSourcesItDoesNotOwn(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "lw.db"))
	rec := storetest.StartRecorder(t, st, audit.WithOwnership())
	err := rec.ReportBeliefs(context.Background(), []audit.Belief{{Source: "src", Lock: "orders", Token: 1, At: at(0)}})
	if audit.ErrorCode(err) != audit.EFENCED {
		t.Fatalf("ReportBeliefs of a source not owned = %v, want %s", err, audit.EFENCED)
	}
}

// Six zombie tenures whose holders beat in turn, 100 times each: one
// zombie_holder finding per tenure, however many beliefs and zombies, and
// a few zombie_belief events per zombie, the last saying how long it went
// on, rather than one per heartbeat.
func TestTrackerZombiesReportedOncePerTenure(t *testing.T) {
	s := newStory(t, audit.KindEtcd)
	const zombies = 6
	for i := range zombies + 1 {
		s.grant(fmt.Sprint("holder-", i), int64(41+i), at(time.Duration(i)*time.Second), time.Second)
	}
	start := at(zombies * time.Second)
	for beat := range 100 {
		for i := range zombies {
			s.believe(fmt.Sprint("holder-", i), int64(41+i), start.Add(time.Duration(beat)*time.Second))
		}
	}
	var raised int
	for _, k := range s.findings() {
		if k == audit.FindingZombieHolder {
			raised++
		}
	}
	if raised != zombies {
		t.Fatalf("%d zombie_holder findings, want %d", raised, zombies)
	}
	events := s.eventsOf(audit.EventZombieBelief)
	if len(events) > zombies*20 {
		t.Fatalf("%d zombie_belief events for %d zombies of 100 beliefs each, want at most 20 each", len(events), zombies)
	}
	// holder-0's tenure ended at 1s; its last belief, at 105s, is 104 s
	// later: the last event says within a fifth.
	var last audit.Event
	for _, e := range events {
		if e.Holder == "holder-0" {
			last = e
		}
	}
	if after := last.Detail["after_ms"].(int64); after < 104_000*4/5 || after > 104_000 {
		t.Fatalf("holder-0's last zombie_belief after %d ms, want within a fifth of 104000", after)
	}
}

// Beliefs under ever older tokens, none of them a tenure the tracker
// remembers, are one zombie: the forgotten tenures before the grant that
// shows them.
func TestTrackerForgottenZombiesAreOne(t *testing.T) {
	s := newStory(t, audit.KindEtcd)
	s.grant("B", 1000, at(0), time.Minute)
	for i := range 600 {
		s.believe("", int64(1+i), at(time.Second+time.Duration(i)*time.Millisecond))
	}
	if got := s.findings(); !slices.Equal(got, []audit.FindingKind{audit.FindingZombieHolder}) {
		t.Fatalf("findings = %d of %v..., want one zombie_holder", len(got), got[:min(len(got), 3)])
	}
}
