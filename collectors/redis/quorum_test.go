package redis

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

func renderObs(obs []audit.Observation) string {
	var parts []string
	for _, ob := range obs {
		who := ob.Holder
		if who == "" {
			who = "?"
		}
		s := fmt.Sprintf("%s %s %s", ob.Kind, ob.Lock.Name, who)
		if ob.Token != nil {
			s += fmt.Sprintf(" #%d", *ob.Token)
		}
		if ob.Inferred {
			s += " (inferred)"
		}
		if ob.Evicted {
			s += " (evicted)"
		}
		if !ob.RenewedAt.IsZero() {
			s += " (renewed)"
		}
		if ob.Overtaken {
			s += " (overtaken)"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

type qstep struct {
	inst int
	ch   change
	want string
}

// ptr returns a pointer to a copy of h.
func ptr(h holding) *holding { return &h }

func grantOn(key string, h holding) change {
	return change{Kind: changeGrant, Key: key, H: &h, At: h.At}
}
func renewOn(key string, h holding) change {
	return change{Kind: changeRenew, Key: key, H: &h, At: h.At}
}
func endOn(key string, h holding, ms int, r endReason) change {
	return change{Kind: changeEnd, Key: key, H: &h, At: at(ms), Reason: r}
}

func TestRedlockQuorum(t *testing.T) {
	const k = "lock:r"
	tests := []struct {
		name  string
		steps []qstep
	}{
		{"GrantWhenTheQuorumthInstanceHoldsIt", []qstep{
			{0, grantOn(k, hold("V", 1, 8000)), ""},
			{1, grantOn(k, hold("V", 2, 8000)), "grant lock:r V"},
			{2, grantOn(k, hold("V", 3, 8000)), ""},
			// Renewals: the lock's deadline is when the second instance lets
			// go, so it moves once two instances have renewed.
			{0, renewOn(k, hold("V", 3001, 8000)), ""},
			{2, renewOn(k, hold("V", 3002, 8000)), "renew lock:r V (renewed)"},
			{1, renewOn(k, hold("V", 3003, 8000)), ""},
			// An instance's overtaken renewal is no renewal of the
			// quorum's: those are its deadline's moves.
			{1, change{Kind: changeRenew, Key: k, H: ptr(hold("V", 3003, 8000)), At: at(3004), Overtaken: true}, ""},
			// Unlock deletes on every instance: it ends once fewer than two hold it.
			{0, endOn(k, hold("V", 3003, 8000), 5000, endReleased), ""},
			{1, endOn(k, hold("V", 3003, 8000), 5001, endReleased), "release lock:r V"},
			{2, endOn(k, hold("V", 3003, 8000), 5002, endReleased), ""},
		}},
		{"MinorityAttemptRolledBackIsNoGrant", []qstep{
			// X holds instance 0 only (a leftover); W gets instance 1 only,
			// fails the quorum and deletes its key again.
			{0, grantOn(k, hold("X", 1, 2000)), ""},
			{1, grantOn(k, hold("W", 2, 8000)), ""},
			{1, endOn(k, hold("W", 2, 8000), 10, endReleased), ""},
			{0, endOn(k, hold("X", 1, 2000), 2001, endExpired), ""},
			// Then W succeeds on two.
			{0, grantOn(k, hold("W", 2100, 8000)), ""},
			{1, grantOn(k, hold("W", 2101, 8000)), "grant lock:r W"},
		}},
		{"WithOneInstanceDown", []qstep{
			{0, grantOn(k, hold("V", 1, 100)), ""},
			{2, grantOn(k, hold("V", 2, 100)), "grant lock:r V"},
			{0, endOn(k, hold("V", 1, 100), 101, endExpired), "expire lock:r V"},
			{2, endOn(k, hold("V", 2, 100), 102, endExpired), ""},
		}},
		{"EvictionBreakingTheQuorum", []qstep{
			{0, grantOn(k, hold("V", 1, 8000)), ""},
			{1, grantOn(k, hold("V", 2, 8000)), "grant lock:r V"},
			{1, endOn(k, hold("V", 2, 8000), 50, endEvicted), "expire lock:r V (evicted)"},
		}},
		{"VanishedHoldsNeverMakeAQuorum", []qstep{
			{0, change{Kind: changeGrant, Key: k, H: &holding{Vanished: true}, At: at(1), Inferred: true}, ""},
			{1, change{Kind: changeGrant, Key: k, H: &holding{Vanished: true}, At: at(1), Inferred: true}, ""},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCombiner("src", 3, 2)
			for i, st := range tt.steps {
				if got := renderObs(c.apply(st.inst, []change{st.ch})); got != st.want {
					t.Fatalf("step %d (instance %d): observations = %q, want %q", i, st.inst, got, st.want)
				}
			}
		})
	}
}

func TestSingleInstancePassesChangesThrough(t *testing.T) {
	const k = "lock:a"
	c := newCombiner("src", 1, 1)
	s := newInstanceState()
	steps := []struct {
		events  []event
		present bool
		h       holding
		want    string
	}{
		{evs(0, "set", "expire"), true, hold("A", 1, 8000), "grant lock:a A"},
		{evs(300, "expire"), true, hold("A", 301, 8000), "renew lock:a A (renewed)"},
		// Two renewals, one read: the first counts without its deadline.
		{append(evs(350, "expire"), evs(360, "expire")...), true, hold("A", 361, 8000), "renew lock:a A (overtaken), renew lock:a A (renewed)"},
		{append(evs(370, "expire"), evs(400, "del")...), false, holding{At: at(401)}, "renew lock:a A (overtaken), release lock:a A"},
		{evs(500, "set", "expire"), true, hold("B", 501, 100), "grant lock:a B"},
		{evs(610, "expired"), false, holding{At: at(611)}, "expire lock:a B"},
		{evs(700, "set", "expire"), true, hold("C", 701, 8000), "grant lock:a C"},
		{evs(800, "evicted"), false, holding{At: at(801)}, "expire lock:a C (evicted)"},
		// Locked and unlocked between two reads: a grant to an unknown
		// holder, then its end once the del event arrives.
		{evs(900, "set", "expire"), false, holding{At: at(901)}, "grant lock:a ? (inferred)"},
		{evs(902, "del"), false, holding{At: at(903)}, "release lock:a ?"},
	}
	for i, st := range steps {
		chs := s.applyEvents(k, st.events, st.present, st.h, holding{Vanished: true, At: st.h.At})
		if got := renderObs(c.apply(0, chs)); got != st.want {
			t.Fatalf("step %d: observations = %q, want %q", i, got, st.want)
		}
	}
	if held := slices.IndexFunc(c.held, func(m map[string]*holding) bool { return len(m) > 0 }); len(c.told) != 0 || held >= 0 {
		t.Fatalf("state left after every lock ended: told %v, held %v", c.told, c.held)
	}
}

func TestObservationDetails(t *testing.T) {
	c := newCombiner("src", 1, 1)
	h := hold("42:w1", 1, 8000)
	h.Holder, h.Token = "w1", int64p(42)
	ob := c.apply(0, []change{grantOn("lock:a", h)})[0]
	if ob.Holder != "w1" || *ob.Token != 42 || ob.LeaseDuration != 8*time.Second || ob.Detail["value"] != "42:w1" {
		t.Fatalf("grant = %+v", ob)
	}
	if !ob.At.Equal(at(1)) || !ob.RenewedAt.IsZero() {
		t.Fatalf("grant at %v renewed %v, want at the read and no renewal time", ob.At, ob.RenewedAt)
	}
	r := hold("42:w1", 3001, 8000)
	r.Holder = "w1"
	ren := c.apply(0, []change{renewOn("lock:a", r)})[0]
	// The tracker's expiry (RenewedAt + LeaseDuration) is the latest the
	// server's deadline can be.
	if got := ren.RenewedAt.Add(ren.LeaseDuration); !got.Equal(r.Hi) {
		t.Fatalf("renewal expires at %v, want %v", got, r.Hi)
	}
	if *ren.Token != 42 {
		t.Fatalf("renewal token = %d, want the grant's 42", *ren.Token)
	}

	q := newCombiner("src", 3, 2)
	q.apply(0, []change{grantOn("lock:r", hold("V", 1, 8000))})
	g := q.apply(1, []change{grantOn("lock:r", hold("V", 2, 8000))})[0]
	if g.Detail["instances"] != "2/3" {
		t.Fatalf("instances detail = %v, want 2/3", g.Detail["instances"])
	}
}

func TestResync(t *testing.T) {
	c := newCombiner("src", 1, 1)
	a, b := hold("A", 1, 8000), hold("B", 1, 8000)
	c.replace(0, map[string]*holding{"lock:a": &a, "lock:b": &b})
	obs, changed := c.resync(at(5), audit.EventObserved, false)
	if got, want := renderObs(obs), "observed lock:a A, observed lock:b B"; got != want || !changed {
		t.Fatalf("first snapshot = %q (changed %v), want %q", got, changed, want)
	}
	// Nothing moved: the same list, nothing changed.
	c.replace(0, map[string]*holding{"lock:a": ptr(hold("A", 1001, 7000)), "lock:b": ptr(hold("B", 1001, 7000))})
	obs, changed = c.resync(at(1005), audit.EventGrant, true)
	if got, want := renderObs(obs), "grant lock:a A (inferred), grant lock:b B (inferred)"; got != want || changed {
		t.Fatalf("unchanged snapshot = %q (changed %v), want %q", got, changed, want)
	}
	// a renewed unseen, b is gone (FLUSHALL), c is new.
	c.replace(0, map[string]*holding{"lock:a": ptr(hold("A", 3001, 8000)), "lock:c": ptr(hold("C", 3001, 8000))})
	obs, changed = c.resync(at(3005), audit.EventGrant, true)
	if got, want := renderObs(obs), "grant lock:a A (inferred) (renewed), release lock:b B (inferred), grant lock:c C (inferred)"; got != want || !changed {
		t.Fatalf("snapshot after changes = %q (changed %v), want %q", got, changed, want)
	}
	if _, ok := c.told["lock:b"]; ok {
		t.Fatal("lock:b is still told after it vanished")
	}
	// Gone once its deadline may have passed: expired, at the deadline.
	c.replace(0, map[string]*holding{"lock:a": ptr(hold("A", 3001, 8000))})
	obs, _ = c.resync(at(20000), audit.EventGrant, true)
	if got, want := renderObs(obs), "grant lock:a A (inferred), expire lock:c C (inferred)"; got != want {
		t.Fatalf("snapshot after c's deadline = %q, want %q", got, want)
	}
	if !obs[1].At.Equal(at(3001 + 8000)) {
		t.Fatalf("c expired at %v, want its deadline", obs[1].At.Sub(t0))
	}
}
