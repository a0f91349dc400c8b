package recheck_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/recheck"
	"github.com/leasewatch/leasewatch/audit/sqlite"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

const (
	lease    = 10 * time.Second
	lockName = "/locks/orders"
)

// Faults a generated history may have injected, each as it landed: a fault
// chosen for a history that its dice never made happen is not listed.
const (
	faultExposure       = "exposure"        // a fenced resource accepted the old token after a grant, before it saw the new one
	faultBroken         = "broken_resource" // a resource accepted a token lower than one it had accepted
	faultZombie         = "zombie"          // a holder wrote after its tenure ended, before the next grant
	faultRegression     = "regression"      // a grant's token went back or was reused
	faultOverlap        = "overlap"         // a grant while the previous lease still ran
	faultUntokenedWrite = "untokened_write" // a write accepted without a token on a lock with tokens
	faultUntokenedGrant = "untokened_grant" // a grant without a token on a lock with tokens
	faultUnfencedLock   = "unfenced_lock"   // no grant carried a token
	faultBlind          = "blind"           // the collector was blind for a while
)

// faultKinds lists the faults the generator injects.
var faultKinds = []string{faultExposure, faultBroken, faultZombie, faultRegression, faultOverlap,
	faultUntokenedWrite, faultUntokenedGrant, faultUnfencedLock, faultBlind}

// sim generates one lock's history and drives a tracker through it the way
// a collector and protected resources would, in time order: grants,
// renewals, releases, expiries, overlaps, token regressions, writes that
// fenced resources accept or reject by their highest token (or, broken,
// accept anyway), zombies, blind windows.
type sim struct {
	r      *rand.Rand
	tr     *audit.Tracker
	out    *audit.Batch
	source string
	at     time.Time
	// chosen are the faults this history may have; landed, those it had.
	chosen, landed map[string]bool
	// highest is each resource's highest accepted token; broken resources
	// accept whatever comes.
	highest map[string]int64
	broken  map[string]bool
	// registerBroken says a resource accepted a write Register does not
	// allow: without a token, or under a token below one it had accepted.
	registerBroken bool
	lastToken      int64
}

var (
	holders   = []string{"worker-1", "worker-2", "worker-3"}
	resources = []string{"db", "cache", "queue"}
)

// tick moves the clock on by 1 ms to 2 s: every event has its own instant.
func (s *sim) tick() time.Time {
	s.at = s.at.Add(time.Millisecond + time.Duration(s.r.IntN(2000))*time.Millisecond)
	return s.at
}

func (s *sim) may(fault string, oneIn int) bool {
	return s.chosen[fault] && s.r.IntN(oneIn) == 0
}

func (s *sim) observe(ob audit.Observation) {
	ob.Lock = audit.LockKey{Source: s.source, Name: lockName}
	s.out.Append(s.tr.Step(audit.Input{Source: s.source, Kind: audit.KindEtcd, Observations: []audit.Observation{ob}}))
}

// write reports a write of holder under token (nil: none) at resource,
// accepted or rejected as the resource's fencing decides.
func (s *sim) write(holder string, token *int64, resource string) audit.WriteOutcome {
	at := s.tick()
	outcome := audit.WriteAccepted
	highest, seen := s.highest[resource]
	switch {
	case token == nil:
		s.registerBroken = true
	case seen && *token < highest && !s.broken[resource]:
		outcome = audit.WriteRejected
	case seen && *token < highest:
		s.registerBroken, s.landed[faultBroken] = true, true
		fallthrough
	default:
		s.highest[resource] = max(highest, *token)
	}
	s.out.Append(s.tr.ReportWrite(audit.WriteReport{Source: s.source, Lock: lockName, Resource: resource,
		Holder: holder, Token: token, Outcome: outcome, At: at}))
	return outcome
}

// tenure is one generated tenure as the sim knows it.
type tenure struct {
	holder  string
	token   *int64
	expires time.Time
}

// nextToken is the next grant's token: nil on an unfenced lock (or now and
// then on a fenced one), now and then one that goes back or repeats.
func (s *sim) nextToken(first bool) *int64 {
	switch {
	case s.chosen[faultUnfencedLock]:
		s.landed[faultUnfencedLock] = true
		return nil
	case !first && s.may(faultUntokenedGrant, 3):
		s.landed[faultUntokenedGrant] = true
		return nil
	case !first && s.may(faultRegression, 2):
		s.landed[faultRegression] = true
		s.lastToken = max(1, s.lastToken-int64(s.r.IntN(3)))
	default:
		s.lastToken += 1 + int64(s.r.IntN(3)) // sparse, as etcd revisions are
	}
	return audit.Int64(s.lastToken)
}

// hold renews and writes under t for a while; prev, the tenure before, may
// still write under its token (rejected by fenced resources that have seen
// the new one, accepted by those that have not: an exposure).
func (s *sim) hold(t *tenure, prev *tenure) {
	for range s.r.IntN(6) {
		switch n := s.r.IntN(10); {
		case n < 2:
			at := s.tick()
			t.expires = at.Add(lease)
			s.observe(audit.Observation{Kind: audit.EventRenew, At: at, Holder: t.holder, Token: t.token, RenewedAt: at, LeaseDuration: lease})
		case n < 3 && prev != nil && prev.token != nil && (s.chosen[faultExposure] || s.chosen[faultBroken]):
			res := resources[s.r.IntN(len(resources))]
			if s.write(prev.holder, prev.token, res) == audit.WriteAccepted && t.token != nil && *prev.token < *t.token {
				s.landed[faultExposure] = true
			}
		case n < 4 && s.may(faultUntokenedWrite, 2):
			s.write(t.holder, nil, resources[s.r.IntN(len(resources))])
			s.landed[faultUntokenedWrite] = true
		default:
			s.write(t.holder, t.token, resources[s.r.IntN(len(resources))])
		}
	}
}

// run generates a history of two to six tenures from start.
func (s *sim) run(start time.Time) {
	s.at = start
	for _, res := range resources {
		if s.chosen[faultBroken] && s.r.IntN(2) == 0 {
			s.broken[res] = true
		}
	}
	n := 2 + s.r.IntN(5)
	var prev *tenure
	ended := true // the previous tenure ended before the next grant
	for i := range n {
		if s.may(faultBlind, 3) {
			from := s.tick()
			s.out.Append(s.tr.Step(audit.Input{Source: s.source, Kind: audit.KindEtcd, Blind: &audit.Blind{From: from, To: s.tick(), Reason: "compaction"}}))
			s.landed[faultBlind] = true
		}
		t := &tenure{holder: holders[s.r.IntN(len(holders))], token: s.nextToken(i == 0)}
		at := s.tick()
		if !ended && at.Before(prev.expires) {
			s.landed[faultOverlap] = true
		}
		t.expires = at.Add(lease)
		s.observe(audit.Observation{Kind: audit.EventGrant, At: at, Holder: t.holder, Token: t.token, LeaseDuration: lease})
		s.hold(t, prev)
		ended = s.end(t, i == n-1)
		prev = t
	}
}

// end ends t, or leaves it to the next grant (right away, while its lease
// still runs, with an overlap fault, or after it ran out); it reports
// whether t ended.
func (s *sim) end(t *tenure, last bool) bool {
	switch n := s.r.IntN(4); {
	case !last && n == 0 && s.chosen[faultOverlap]:
		return false // the next grant comes within a tick or two, its lease still running
	case !last && n == 1:
		s.at = t.expires.Add(time.Duration(s.r.IntN(3)) * time.Second) // the next grant supersedes it after its lease ran out
		return false
	case n == 2:
		s.observe(audit.Observation{Kind: audit.EventExpire, At: s.tick(), Holder: t.holder, Token: t.token})
	default:
		s.observe(audit.Observation{Kind: audit.EventRelease, At: s.tick(), Holder: t.holder, Token: t.token})
	}
	if t.token != nil && s.may(faultZombie, 2) {
		// A zombie: it still believes it holds the lock, and writes.
		s.out.Append(s.tr.ReportBelief(audit.Belief{Source: s.source, Lock: lockName, Holder: t.holder, Token: *t.token, At: s.tick()}))
		if s.write(t.holder, t.token, resources[s.r.IntN(len(resources))]) == audit.WriteAccepted {
			s.landed[faultZombie] = true
		}
	}
	return true
}

// generated is one generated history, stored.
type generated struct {
	source         string
	window         verdict.Window
	landed         []string
	registerBroken bool
}

// generate makes n histories, each over a source of its own and a stretch
// of time of its own, through one tracker, and stores them in one batch.
func generate(t *testing.T, st *sqlite.Store, seed uint64, n int) []generated {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	tr := audit.NewTracker(audit.TrackerConfig{RenewMarginRatio: 0.25})
	var out audit.Batch
	hs := make([]generated, 0, n)
	start := t0
	for i := range n {
		s := &sim{r: r, tr: tr, out: &out, source: fmt.Sprintf("src-%05d", i), chosen: map[string]bool{}, landed: map[string]bool{},
			highest: map[string]int64{}, broken: map[string]bool{}}
		// A third of the histories are clean; the others may have one to
		// three faults.
		if r.IntN(3) > 0 {
			for range 1 + r.IntN(3) {
				s.chosen[faultKinds[r.IntN(len(faultKinds))]] = true
			}
		}
		s.run(start)
		g := generated{source: s.source, window: verdict.Window{From: start, To: s.at.Add(time.Minute)}, registerBroken: s.registerBroken}
		for _, f := range faultKinds {
			if s.landed[f] {
				g.landed = append(g.landed, f)
			}
		}
		hs = append(hs, g)
		start = g.window.To.Add(time.Minute)
	}
	if err := st.Apply(context.Background(), out); err != nil {
		t.Fatalf("store the generated histories: %v", err)
	}
	return hs
}

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "leasewatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// histories is how many histories TestRecheckAgreesWithTheVerdict
// generates: 2,000, or 200 under the race detector, where the counts of
// each fault are left to the run without it.
func histories() int {
	if raceEnabled {
		return 200
	}
	return 2000
}

// checked is what the verdict and Porcupine said of one generated history.
type checked struct {
	verdict        verdict.Verdict
	lease, reg     bool   // whether Lease and Register hold, by Porcupine
	explained      int    // Explain's index of Lease's first break, -1 for none
	why            string // and why
	history        recheck.History
	registerBroken bool
}

// check judges and exports each generated history, a few at a time.
func check(t *testing.T, st *sqlite.Store, hs []generated) []checked {
	t.Helper()
	out := make([]checked, len(hs))
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(4)
	for i, h := range hs {
		g.Go(func() error {
			lock, err := st.LockByKey(ctx, audit.LockKey{Source: h.source, Name: lockName})
			if err != nil {
				return err
			}
			c := checked{registerBroken: h.registerBroken}
			if c.verdict, err = verdict.Load(ctx, st, lock, h.window, "", h.window.To); err != nil {
				return err
			}
			if c.history, err = recheck.Load(ctx, st, lock.ID, h.window, 0, h.window.To); err != nil {
				return err
			}
			c.lease, c.reg = recheck.Check(c.history, recheck.Lease), recheck.Check(c.history, recheck.Register)
			c.explained, c.why = recheck.Explain(c.history, recheck.Lease)
			out[i] = c
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Over 2,000 generated histories (histories), clean and with faults
// injected, Porcupine's check of each stored history against Lease says
// Illegal exactly when the lock's verdict over the same window is unsafe;
// Explain agrees with Porcupine; and Register is broken exactly where a
// resource accepted a token below its highest or none. Each fault lands in
// many histories, and those that can go either way do; an exposure alone
// keeps Register and breaks Lease.
func TestRecheckAgreesWithTheVerdict(t *testing.T) {
	st := openStore(t)
	hs := generate(t, st, 20261207, histories())
	type tally struct{ unsafe, safe int }
	byFault := map[string]*tally{}
	for _, f := range append([]string{"clean"}, faultKinds...) {
		byFault[f] = &tally{}
	}
	exposureOnly := 0
	for i, c := range check(t, st, hs) {
		g := hs[i]
		if unsafe := c.verdict.Kind == verdict.Unsafe; c.lease == unsafe {
			t.Fatalf("%s (faults %v): Porcupine says Lease holds: %v; the verdict is %s %v\nExplain: %d %s\n%s",
				g.source, g.landed, c.lease, c.verdict.Kind, codes(c.verdict), c.explained, c.why, dump(c.history))
		}
		if (c.explained < 0) != c.lease {
			t.Fatalf("%s: Porcupine says Lease holds: %v; Explain: %d %q", g.source, c.lease, c.explained, c.why)
		}
		if c.reg == c.registerBroken {
			t.Fatalf("%s (faults %v): Register holds: %v, want %v\n%s", g.source, g.landed, c.reg, !c.registerBroken, dump(c.history))
		}
		faults := g.landed
		if len(faults) == 0 {
			faults = []string{"clean"}
		}
		for _, f := range faults {
			if c.lease {
				byFault[f].safe++
			} else {
				byFault[f].unsafe++
			}
		}
		if slices.Equal(g.landed, []string{faultExposure}) && !c.lease && c.reg {
			exposureOnly++
		}
	}
	for _, f := range append([]string{"clean"}, faultKinds...) {
		t.Logf("%-16s unsafe %4d, not unsafe %4d", f, byFault[f].unsafe, byFault[f].safe)
	}
	// A clean history is never unsafe; a fault that can go either way
	// did, often.
	if c := byFault["clean"]; c.unsafe > 0 || c.safe < histories()/5 {
		t.Errorf("clean histories: %d unsafe, %d not: want none unsafe, and at least %d", c.unsafe, c.safe, histories()/5)
	}
	if raceEnabled {
		return
	}
	for _, f := range []string{faultRegression, faultOverlap, faultUntokenedGrant, faultUntokenedWrite, faultBlind} {
		if n := byFault[f]; n.unsafe < 5 || n.safe < 5 {
			t.Errorf("%s: %d histories unsafe, %d not: want at least 5 of each", f, n.unsafe, n.safe)
		}
	}
	for _, f := range []string{faultExposure, faultBroken, faultZombie} {
		if n := byFault[f]; n.unsafe < 20 {
			t.Errorf("%s: %d histories unsafe: want at least 20", f, n.unsafe)
		}
	}
	if n := byFault[faultUnfencedLock]; n.safe < 20 {
		t.Errorf("unfenced locks: %d not unsafe: want at least 20", n.safe)
	}
	if exposureOnly < 10 {
		t.Errorf("%d histories with only an exposure keep Register and break Lease: want at least 10", exposureOnly)
	}
}

func codes(v verdict.Verdict) []verdict.ReasonCode {
	var out []verdict.ReasonCode
	for _, r := range v.Reasons {
		if r.Decides {
			out = append(out, r.Code)
		}
	}
	return out
}

// dump lists a history's operations, for a failure's message.
func dump(h recheck.History) string {
	s := ""
	for i, op := range h.Operations {
		out := ""
		if op.Output != nil {
			out = " -> " + string(*op.Output)
		}
		token := "-"
		if op.Input.Token != nil {
			token = fmt.Sprint(*op.Input.Token)
		}
		s += fmt.Sprintf("%3d %s %-5s #%d %s token %s %s%s expires %s\n", i, time.Unix(0, op.Input.At).UTC().Format("15:04:05.000"),
			op.Input.Kind, op.Input.Seq, op.Input.Holder, token, op.Input.Resource, out, time.Unix(0, op.Input.Expires).UTC().Format("15:04:05.000"))
	}
	return s
}
