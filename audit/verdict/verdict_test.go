package verdict_test

import (
	"context"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// story drives a tracker the way a collector and protected resources would,
// stores what it produced in a real store, and judges the lock from there.
type story struct {
	t   *testing.T
	tr  *audit.Tracker
	out audit.Batch
}

const lease = 10 * time.Second

var key = audit.LockKey{Source: "src", Name: "orders"}

func newStory(t *testing.T) *story {
	return &story{t: t, tr: audit.NewTracker(audit.TrackerConfig{RenewMarginRatio: 0.25})}
}

func (s *story) observe(ob audit.Observation) {
	ob.Lock = key
	s.out.Append(s.tr.Step(audit.Input{Source: key.Source, Kind: audit.KindEtcd, Observations: []audit.Observation{ob}}))
}

func (s *story) grant(holder string, token int64, when time.Duration) {
	s.observe(audit.Observation{Kind: audit.EventGrant, At: at(when), Holder: holder, Token: audit.Int64(token), LeaseDuration: lease})
}

func (s *story) grantUnfenced(holder string, when time.Duration) {
	s.observe(audit.Observation{Kind: audit.EventGrant, At: at(when), Holder: holder, LeaseDuration: lease})
}

func (s *story) release(holder string, when time.Duration) {
	s.observe(audit.Observation{Kind: audit.EventRelease, At: at(when), Holder: holder})
}

// believe sends holder's belief that it acts under token.
func (s *story) believe(holder string, token int64, when time.Duration) {
	s.out.Append(s.tr.ReportBelief(audit.Belief{Source: key.Source, Lock: key.Name, Holder: holder, Token: token, At: at(when)}))
}

func (s *story) blind(from, to time.Duration) {
	s.out.Append(s.tr.Step(audit.Input{Source: key.Source, Kind: audit.KindEtcd, Blind: &audit.Blind{From: at(from), To: at(to), Reason: "compaction"}}))
}

// write reports a write of resource with token (0: none).
func (s *story) write(resource string, token int64, outcome audit.WriteOutcome, when time.Duration) {
	w := audit.WriteReport{Source: key.Source, Lock: key.Name, Resource: resource, Outcome: outcome, At: at(when)}
	if token != 0 {
		w.Token = audit.Int64(token)
	}
	s.out.Append(s.tr.ReportWrite(w))
}

// judge stores the story and judges the lock over the window from its
// start to an hour later.
func (s *story) judge(purpose verdict.Purpose) verdict.Verdict {
	s.t.Helper()
	return s.judgeWith(verdict.Load, verdict.Window{From: t0, To: at(time.Hour)}, purpose)
}

// judgeWith stores the story and judges the lock over w with load.
func (s *story) judgeWith(load func(context.Context, verdict.FactReader, audit.Lock, verdict.Window, verdict.Purpose, time.Time) (verdict.Verdict, error), w verdict.Window, purpose verdict.Purpose) verdict.Verdict {
	s.t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(s.t.TempDir(), "leasewatch.db"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { st.Close() })
	if err := st.Apply(ctx, s.out); err != nil {
		s.t.Fatal(err)
	}
	lock, err := st.LockByKey(ctx, key)
	if err != nil {
		s.t.Fatal(err)
	}
	v, err := load(ctx, st, lock, w, purpose, at(time.Hour))
	if err != nil {
		s.t.Fatal(err)
	}
	return v
}

// Load counts the stale writes that fencing stopped per resource instead of
// reading them; LoadListed reads them. Both judge the same: the same kind,
// reasons, counts and figures, over the same whole history. Only the IDs
// differ.
func TestLoadCountsTheStaleWritesLoadListedLists(t *testing.T) {
	s := newStory(t)
	fencedHandover(s)
	s.write("db", 1, audit.WriteRejected, 6*time.Second)
	s.write("cache", 1, audit.WriteRejected, 7*time.Second)
	whole := verdict.Window{To: at(time.Hour)}
	counted, listed := s.judgeWith(verdict.Load, whole, ""), s.judgeWith(verdict.LoadListed, whole, "")

	if !counted.Window.From.Equal(t0) || !listed.Window.From.Equal(t0) {
		t.Errorf("whole history from %v (counted) and %v (listed), want the first grant's %v", counted.Window.From, listed.Window.From, t0)
	}
	if counted.Kind != listed.Kind || !slices.Equal(codes(counted, true), codes(listed, true)) || !slices.Equal(codes(counted, false), codes(listed, false)) {
		t.Fatalf("counted %s %+v, listed %s %+v: want the same verdict", counted.Kind, counted.Reasons, listed.Kind, listed.Reasons)
	}
	if !slices.Equal(counted.Resources, listed.Resources) {
		t.Errorf("resources counted %+v, listed %+v", counted.Resources, listed.Resources)
	}
	stale := map[string]int{}
	for i, r := range counted.Reasons {
		l := listed.Reasons[i]
		if r.Code != verdict.ReasonStaleStopped {
			if r.Count != l.Count || !slices.Equal(r.Findings, l.Findings) {
				t.Errorf("%s: counted %d %v, listed %d %v", r.Code, r.Count, r.Findings, l.Count, l.Findings)
			}
			continue
		}
		stale[r.Resource] = r.Count
		if len(r.Findings) != 0 || len(l.Findings) != l.Count || r.Count != l.Count || r.Text != l.Text {
			t.Errorf("stale_stopped of %s: counted %d with IDs %v, listed %d with IDs %v; want the count, and the IDs listed only", r.Resource, r.Count, r.Findings, l.Count, l.Findings)
		}
	}
	if want := map[string]int{"cache": 1, "db": 2}; !maps.Equal(stale, want) {
		t.Errorf("stale writes stopped %v, want %v", stale, want)
	}
}

func codes(v verdict.Verdict, decides bool) []verdict.ReasonCode {
	var out []verdict.ReasonCode
	for _, r := range v.Reasons {
		if r.Decides == decides {
			out = append(out, r.Code)
		}
	}
	return out
}

// A handover the way fencing means it to go: the old holder's late write is
// rejected, the new holder's accepted.
func fencedHandover(s *story) {
	s.grant("a", 1, 0)
	s.write("db", 1, audit.WriteAccepted, time.Second)
	s.release("a", 2*time.Second)
	s.grant("b", 2, 3*time.Second)
	s.write("db", 1, audit.WriteRejected, 4*time.Second)
	s.write("db", 2, audit.WriteAccepted, 5*time.Second)
}

func TestVerdicts(t *testing.T) {
	for _, c := range []struct {
		name    string
		story   func(s *story)
		purpose verdict.Purpose
		want    verdict.Kind
		decides []verdict.ReasonCode
		others  []verdict.ReasonCode
	}{{
		name:    "a late write rejected and the new holder's accepted is fenced",
		story:   fencedHandover,
		want:    verdict.Fenced,
		decides: []verdict.ReasonCode{verdict.ReasonAllFenced},
		others:  []verdict.ReasonCode{verdict.ReasonStaleStopped},
	}, {
		name: "a late write that the cache accepted is unsafe",
		story: func(s *story) {
			fencedHandover(s)
			s.write("cache", 1, audit.WriteAccepted, 6*time.Second)
		},
		want:    verdict.Unsafe,
		decides: []verdict.ReasonCode{verdict.ReasonUnfencedWrite},
		others:  []verdict.ReasonCode{verdict.ReasonStaleStopped},
	}, {
		name: "a write accepted under a token no grant had is unsafe",
		story: func(s *story) {
			fencedHandover(s)
			s.write("ledger", math.MaxInt64, audit.WriteAccepted, 6*time.Second)
			s.release("b", 7*time.Second)
			s.grant("c", 3, 8*time.Second) // granted after the write, below its token
			s.write("ledger", 3, audit.WriteRejected, 9*time.Second)
			s.write("db", 3, audit.WriteAccepted, 9*time.Second)
		},
		want:    verdict.Unsafe,
		decides: []verdict.ReasonCode{verdict.ReasonUngrantedToken},
		others:  []verdict.ReasonCode{verdict.ReasonStaleStopped},
	}, {
		name: "a resource that accepts writes without a token is unsafe",
		story: func(s *story) {
			fencedHandover(s)
			s.write("queue", 0, audit.WriteAccepted, 6*time.Second)
		},
		want:    verdict.Unsafe,
		decides: []verdict.ReasonCode{verdict.ReasonUntokenedWrite},
		others:  []verdict.ReasonCode{verdict.ReasonStaleStopped},
	}, {
		name: "writes accepted while two holders overlapped are unsafe",
		story: func(s *story) {
			s.grant("a", 1, 0)
			s.grant("b", 2, 2*time.Second) // a's lease runs to 10 s
			s.write("db", 2, audit.WriteAccepted, 3*time.Second)
		},
		want:    verdict.Unsafe,
		decides: []verdict.ReasonCode{verdict.ReasonOverlapWrites},
	}, {
		name: "an overlap with no write meanwhile is a warning on a fenced lock",
		story: func(s *story) {
			s.grant("a", 1, 0)
			s.grant("b", 2, 2*time.Second)
			s.write("db", 2, audit.WriteAccepted, 20*time.Second)
		},
		want:    verdict.Fenced,
		decides: []verdict.ReasonCode{verdict.ReasonAllFenced},
		others:  []verdict.ReasonCode{verdict.ReasonOverlap},
	}, {
		name: "a write accepted under a token that went back is unsafe",
		story: func(s *story) {
			s.grant("a", 5, 0)
			s.release("a", time.Second)
			s.grant("b", 3, 2*time.Second)
			s.write("db", 3, audit.WriteAccepted, 3*time.Second)
		},
		want:    verdict.Unsafe,
		decides: []verdict.ReasonCode{verdict.ReasonRegressionWrites},
	}, {
		name: "a token that went back with nothing written under it is a warning",
		story: func(s *story) {
			s.grant("a", 5, 0)
			s.write("db", 5, audit.WriteAccepted, 500*time.Millisecond)
			s.release("a", time.Second)
			s.grant("b", 3, 2*time.Second)
		},
		want:    verdict.Fenced,
		decides: []verdict.ReasonCode{verdict.ReasonAllFenced},
		others:  []verdict.ReasonCode{verdict.ReasonRegression},
	}, {
		name: "a zombie holder whose late write an unfenced resource accepted is unsafe",
		story: func(s *story) {
			s.grant("a", 1, 0)
			s.write("db", 1, audit.WriteAccepted, time.Second)
			s.grant("b", 2, 20*time.Second) // a's lease ran out at 10 s
			s.write("db", 2, audit.WriteAccepted, 21*time.Second)
			s.believe("a", 1, 25*time.Second) // a wakes from a pause
			s.write("cache", 1, audit.WriteAccepted, 26*time.Second)
		},
		want:    verdict.Unsafe,
		decides: []verdict.ReasonCode{verdict.ReasonUnfencedWrite, verdict.ReasonZombieWrites},
	}, {
		name: "a zombie holder whose writes were all rejected is a warning on a fenced lock",
		story: func(s *story) {
			s.grant("a", 1, 0)
			s.write("db", 1, audit.WriteAccepted, time.Second)
			s.grant("b", 2, 20*time.Second)
			s.write("db", 2, audit.WriteAccepted, 21*time.Second)
			s.believe("a", 1, 25*time.Second)
			s.write("db", 1, audit.WriteRejected, 26*time.Second)
		},
		want:    verdict.Fenced,
		decides: []verdict.ReasonCode{verdict.ReasonAllFenced},
		others:  []verdict.ReasonCode{verdict.ReasonZombieHolder, verdict.ReasonStaleStopped},
	}, {
		name: "tokens that no resource reports on are unverified",
		story: func(s *story) {
			s.grant("a", 1, 0)
			s.release("a", time.Second)
			s.grant("b", 2, 2*time.Second)
		},
		want:    verdict.Unverified,
		decides: []verdict.ReasonCode{verdict.ReasonNoWrites},
	}, {
		name: "a lock without tokens is a hint, unverified",
		story: func(s *story) {
			s.grantUnfenced("a", 0)
			s.write("db", 0, audit.WriteAccepted, time.Second)
		},
		want:    verdict.Unverified,
		decides: []verdict.ReasonCode{verdict.ReasonNoTokens},
	}, {
		name: "a grant without a token among fenced ones is unverified",
		story: func(s *story) {
			fencedHandover(s)
			s.release("b", 6*time.Second)
			s.grantUnfenced("c", 7*time.Second)
		},
		want:    verdict.Unverified,
		decides: []verdict.ReasonCode{verdict.ReasonSomeUntokened},
		others:  []verdict.ReasonCode{verdict.ReasonStaleStopped},
	}, {
		name: "a blind collector leaves a fenced history unverified",
		story: func(s *story) {
			fencedHandover(s)
			s.blind(10*time.Second, 70*time.Second)
		},
		want:    verdict.Unverified,
		decides: []verdict.ReasonCode{verdict.ReasonBlind},
		others:  []verdict.ReasonCode{verdict.ReasonStaleStopped},
	}, {
		name: "a lock declared for efficiency expects its unfenced writes",
		story: func(s *story) {
			fencedHandover(s)
			s.write("cache", 1, audit.WriteAccepted, 6*time.Second)
		},
		purpose: verdict.PurposeEfficiency,
		want:    verdict.Efficiency,
		decides: []verdict.ReasonCode{verdict.ReasonEfficiency},
		others:  []verdict.ReasonCode{verdict.ReasonUnfencedWrite, verdict.ReasonStaleStopped},
	}, {
		name: "a tenure granted before the window counts in it",
		story: func(s *story) {
			s.grant("a", 1, -10*time.Minute)
			s.write("db", 1, audit.WriteAccepted, time.Second)
		},
		want:    verdict.Fenced,
		decides: []verdict.ReasonCode{verdict.ReasonAllFenced},
	}, {
		name: "a lock nobody held and nobody wrote under is unverified",
		story: func(s *story) {
			s.grant("a", 1, -2*time.Hour)
			s.release("a", -time.Hour-time.Minute)
		},
		want:    verdict.Unverified,
		decides: []verdict.ReasonCode{verdict.ReasonNoGrants},
	}} {
		t.Run(c.name, func(t *testing.T) {
			s := newStory(t)
			c.story(s)
			v := s.judge(c.purpose)
			if v.Kind != c.want {
				t.Errorf("verdict = %s, want %s; reasons %+v", v.Kind, c.want, v.Reasons)
			}
			if got := codes(v, true); !slices.Equal(got, c.decides) {
				t.Errorf("deciding reasons = %v, want %v", got, c.decides)
			}
			if got := codes(v, false); !slices.Equal(got, c.others) {
				t.Errorf("other reasons = %v, want %v", got, c.others)
			}
		})
	}
}

// The figures behind a verdict: token share, each resource's counts and
// exposure, overlaps, blind share and the longest wait for the next grant.
func TestFigures(t *testing.T) {
	s := newStory(t)
	fencedHandover(s) // b granted at 3 s; db first learns token 2 at 5 s
	s.write("cache", 1, audit.WriteAccepted, 6*time.Second)
	s.release("b", 10*time.Second)
	s.grantUnfenced("c", 25*time.Second) // 15 s after b's release
	s.grant("d", 3, 27*time.Second)      // overlaps c's lease by 8 s
	s.blind(40*time.Second, 76*time.Second)
	v := s.judge("")

	if v.Kind != verdict.Unsafe || v.Purpose != verdict.PurposeCorrectness {
		t.Errorf("verdict %s for %s, want unsafe for correctness", v.Kind, v.Purpose)
	}
	if v.Grants != 4 || v.Tokened != 3 || v.TokenShare() != 0.75 {
		t.Errorf("grants %d, tokened %d, share %v; want 4, 3, 0.75", v.Grants, v.Tokened, v.TokenShare())
	}
	var names []string
	for _, r := range v.Resources {
		names = append(names, r.Resource)
	}
	if !slices.Equal(names, []string{"cache", "db"}) {
		t.Fatalf("resources %v, want cache and db", names)
	}
	cache, db := v.Resources[0], v.Resources[1]
	if cache.Accepted != 1 || cache.Unfenced != 1 || !cache.LastReport.Equal(at(6*time.Second)) {
		t.Errorf("cache = %+v, want 1 accepted, unfenced, last at 6 s", cache)
	}
	if db.Accepted != 2 || db.Rejected != 1 || db.Stale != 1 || db.MaxExposure != 2*time.Second || db.TotalExposure < 2*time.Second {
		t.Errorf("db = %+v, want 2 accepted, 1 rejected and stale, exposure 2 s", db)
	}
	if v.Overlaps != 1 || v.OverlapTime != 8*time.Second {
		t.Errorf("overlaps %d for %v, want 1 for 8s", v.Overlaps, v.OverlapTime)
	}
	if v.Blind != 36*time.Second || v.BlindShare() != 0.01 {
		t.Errorf("blind %v (share %v), want 36s, 0.01", v.Blind, v.BlindShare())
	}
	if v.LongestGap != 15*time.Second || v.GapAfter.Holder != "b" {
		t.Errorf("longest gap %v after %q, want 15s after b", v.LongestGap, v.GapAfter.Holder)
	}
}

// The most specific purpose rule wins, the earlier on a tie; a lock no
// rule names is for correctness.
func TestPurposesFor(t *testing.T) {
	ps := verdict.Purposes{
		{Selector: audit.Selector{Source: "cache"}, Purpose: verdict.PurposeEfficiency},
		{Selector: audit.Selector{Source: "cache", Lock: "ledger-*"}, Purpose: verdict.PurposeCorrectness},
		{Selector: audit.Selector{Lock: "warm-*"}, Purpose: verdict.PurposeEfficiency},
		{Selector: audit.Selector{Lock: "warm-?"}, Purpose: verdict.PurposeCorrectness}, // as specific as warm-*: the earlier wins
	}
	for _, c := range []struct {
		source, name string
		want         verdict.Purpose
	}{
		{"cache", "thumbnails", verdict.PurposeEfficiency},
		{"cache", "ledger-eu", verdict.PurposeCorrectness},
		{"etcd", "warm-a", verdict.PurposeEfficiency},
		{"etcd", "orders", verdict.PurposeCorrectness},
	} {
		if got := ps.For(c.source, c.name); got != c.want {
			t.Errorf("For(%s, %s) = %s, want %s", c.source, c.name, got, c.want)
		}
	}
}
