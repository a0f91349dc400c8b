package audit_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

var (
	ahead  = audit.HolderKey{Source: "k8s", Holder: "ahead"}
	behind = audit.HolderKey{Source: "k8s", Holder: "behind"}
	node   = audit.HolderKey{Source: "k8s", Holder: "node-1"}
)

// renewal is a renewal of a holder whose clock runs offset ahead of the
// collector's, made at made (collector's clock) and delivered after delay.
func renewal(c *audit.HolderClocks, key audit.HolderKey, class audit.Class, offset, made, delay time.Duration) audit.ClockEstimate {
	return c.Observe(key, class, at(made+delay), at(made+offset))
}

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func wantEstimate(t *testing.T, got audit.ClockEstimate, offset, bound time.Duration, samples, minutes int) {
	t.Helper()
	if got.Offset != offset || got.Bound != bound || got.Samples != samples || got.Minutes != minutes {
		t.Fatalf("estimate of %s = offset %s, bound %s, %d samples in %d minutes; want %s, %s, %d in %d",
			got.Holder, got.Offset, got.Bound, got.Samples, got.Minutes, offset, bound, samples, minutes)
	}
}

// The least lag of the window is the estimate: a clock 300 ms ahead whose
// fastest renewal took 3 ms shows 297 ms, one 200 ms behind -202 ms; the
// bound is how far each minute's least lag spreads.
func TestHolderClocksEstimate(t *testing.T) {
	c := audit.NewHolderClocks(0)
	for i, d := range []float64{5, 3, 7} { // minute 0
		renewal(c, ahead, audit.ClassLock, ms(300), time.Duration(i)*2*time.Second, ms(d))
	}
	first := renewal(c, ahead, audit.ClassLock, ms(300), time.Minute+2*time.Second, ms(9))
	wantEstimate(t, first, ms(297), ms(297-291), 4, 2)
	got := renewal(c, ahead, audit.ClassLock, ms(300), time.Minute+4*time.Second, ms(4))
	wantEstimate(t, got, ms(297), ms(1), 5, 2)
	if !got.Bounded() || got.Last != at(time.Minute+4*time.Second+ms(4)) || got.Heartbeat {
		t.Fatalf("estimate = %+v, want bounded, last seen at 1m4.004s, of a lock", got)
	}
	if s := got.String(); s != "from 5 renewals in 2 of the last 10 minutes, each minute's within 1ms" {
		t.Fatalf("String() = %q", s)
	}

	b := renewal(c, behind, audit.ClassLock, ms(-200), 30*time.Second, ms(2))
	wantEstimate(t, b, ms(-202), 0, 1, 1)
	if b.Bounded() || b.String() != "from 1 renewal in 1 of the last 10 minutes" {
		t.Fatalf("one minute of renewals: %+v, %q; want unbounded", b, b.String())
	}

	// Ten minutes on, minute 0 has left the window.
	later, ok := c.Estimate(ahead, at(10*time.Minute+30*time.Second))
	if !ok {
		t.Fatal("no estimate within the window")
	}
	wantEstimate(t, later, ms(296), 0, 2, 1)
	if _, ok := c.Estimate(ahead, at(11*time.Minute)); ok {
		t.Fatal("an estimate with no renewal in the window")
	}
}

// A holder silent for a window is dropped at the next slot's first
// renewal; past the cap, a new holder is counted, not estimated.
func TestHolderClocksBounded(t *testing.T) {
	c := audit.NewHolderClocks(2)
	renewal(c, ahead, audit.ClassLock, ms(300), 0, ms(1))
	renewal(c, behind, audit.ClassLock, ms(-200), 0, ms(1))
	if e := renewal(c, node, audit.ClassHeartbeat, ms(10), 0, ms(1)); e.Samples != 0 {
		t.Fatalf("holder past the cap estimated: %+v", e)
	}
	if holders, dropped := c.Stats(); holders != 2 || dropped != 1 {
		t.Fatalf("stats = %d holders, %d dropped; want 2, 1", holders, dropped)
	}
	renewal(c, behind, audit.ClassLock, ms(-200), 10*time.Minute, ms(1))
	renewal(c, node, audit.ClassHeartbeat, ms(10), 10*time.Minute, ms(1))
	if holders, dropped := c.Stats(); holders != 2 || dropped != 1 {
		t.Fatalf("stats = %d holders, %d dropped; want 2 (ahead dropped, node kept), 1", holders, dropped)
	}
	if _, ok := c.Estimate(node, at(10*time.Minute)); !ok {
		t.Fatal("node not estimated once ahead made room")
	}
}

// A renewal older than the window of the slot it would land in says
// nothing of the window; the slot's own renewals stay.
func TestHolderClocksOutOfOrder(t *testing.T) {
	c := audit.NewHolderClocks(0)
	renewal(c, ahead, audit.ClassLock, ms(300), 10*time.Minute, ms(8))
	got := renewal(c, ahead, audit.ClassLock, ms(300), 0, ms(1)) // the same slot, ten minutes earlier
	wantEstimate(t, got, ms(292), 0, 1, 1)
	got = renewal(c, ahead, audit.ClassLock, ms(300), 9*time.Minute+30*time.Second, ms(2)) // earlier, in the window
	wantEstimate(t, got, ms(298), ms(6), 2, 2)
}

// The tracker's renewals and the readers' pages meet under one lock: run
// with -race.
func TestHolderClocksConcurrent(t *testing.T) {
	c := audit.NewHolderClocks(0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			renewal(c, audit.HolderKey{Source: "k8s", Holder: fmt.Sprint("node-", i%50)}, audit.ClassHeartbeat, ms(5), time.Duration(i)*time.Second, ms(1))
		}
	}()
	for range 200 {
		c.Largest(at(time.Hour), audit.ClockFilter{Limit: 10})
		c.Estimate(ahead, at(time.Hour))
	}
	<-done
	if top, total := c.Largest(at(2000*time.Second), audit.ClockFilter{}); total != 50 || top[0].Offset != ms(4) {
		t.Fatalf("after the renewals: %d holders, the first %+v; want 50 at 4ms", total, top[0])
	}
}

// Largest lists the largest offsets either way first, filtered, and counts
// all it selects.
func TestHolderClocksLargest(t *testing.T) {
	c := audit.NewHolderClocks(0)
	renewal(c, ahead, audit.ClassLock, ms(300), 0, ms(1))
	renewal(c, behind, audit.ClassLock, ms(-200), 0, ms(1))
	renewal(c, node, audit.ClassHeartbeat, ms(-500), 0, ms(1))
	other := audit.HolderKey{Source: "other", Holder: "ahead"}
	renewal(c, other, audit.ClassLock, ms(301), 0, ms(2)) // 299 ms: ties with ahead, after it by source
	list := func(f audit.ClockFilter) string {
		top, total := c.Largest(at(time.Minute), f)
		var b strings.Builder
		fmt.Fprintf(&b, "%d:", total)
		for _, e := range top {
			fmt.Fprintf(&b, " %s/%s=%s", e.Source, e.Holder, e.Offset)
		}
		return b.String()
	}
	for _, tt := range []struct {
		f    audit.ClockFilter
		want string
	}{
		{audit.ClockFilter{}, "4: k8s/node-1=-501ms k8s/ahead=299ms other/ahead=299ms k8s/behind=-201ms"},
		{audit.ClockFilter{Limit: 2}, "4: k8s/node-1=-501ms k8s/ahead=299ms"},
		{audit.ClockFilter{Limit: 1, Class: audit.ClassLock}, "3: k8s/ahead=299ms"},
		{audit.ClockFilter{Class: audit.ClassHeartbeat}, "1: k8s/node-1=-501ms"},
		{audit.ClockFilter{Source: "other"}, "1: other/ahead=299ms"},
		{audit.ClockFilter{Holder: "ahead"}, "2: k8s/ahead=299ms other/ahead=299ms"},
	} {
		if got := list(tt.f); got != tt.want {
			t.Errorf("Largest(%+v) = %q, want %q", tt.f, got, tt.want)
		}
	}
	if top, total := c.Largest(at(11*time.Minute), audit.ClockFilter{}); len(top) != 0 || total != 0 {
		t.Fatalf("Largest past the window = %v, %d; want none", top, total)
	}
}

// Beyond: ahead by more than the threshold and, once bounded, than the
// bound.
func TestClockEstimateBeyond(t *testing.T) {
	for _, tt := range []struct {
		e    audit.ClockEstimate
		want bool
	}{
		{audit.ClockEstimate{Offset: 2 * time.Second, Samples: 1, Minutes: 1}, true},
		{audit.ClockEstimate{Offset: time.Second, Samples: 1, Minutes: 1}, false}, // the threshold itself
		{audit.ClockEstimate{Offset: 2 * time.Second, Bound: 1999 * time.Millisecond, Samples: 9, Minutes: 3}, true},
		{audit.ClockEstimate{Offset: 2 * time.Second, Bound: 2 * time.Second, Samples: 9, Minutes: 3}, false},
		{audit.ClockEstimate{Offset: -2 * time.Second, Samples: 1, Minutes: 1}, false},
		{audit.ClockEstimate{Offset: 2 * time.Second}, false}, // no renewal
	} {
		if got := tt.e.Beyond(time.Second); got != tt.want {
			t.Errorf("%+v.Beyond(1s) = %v, want %v", tt.e, got, tt.want)
		}
	}
}

// clock_skew is judged by the holder's clock estimate: its renewals of
// another lock count, and a lag that moved more than the offset within the
// window is not a skew.
func TestTrackerClockSkewFromEstimate(t *testing.T) {
	health := audit.TrackerConfig{Health: audit.HealthConfig{ClockSkewRatio: 0.1}}
	const lease = 10 * time.Second
	grant := func(s *story, lock string, when, renewed time.Time) {
		s.out.Append(s.tr.Step(audit.Input{Source: s.source, Kind: s.kind, ExpireByClock: true, SequentialTokens: true, HolderClock: true,
			Observations: []audit.Observation{{Lock: audit.LockKey{Source: s.source, Name: lock}, Kind: audit.EventGrant,
				At: when, RenewedAt: renewed, Holder: "A", Token: audit.Int64(1), LeaseDuration: lease}}}))
	}
	t.Run("AheadOnAnotherLockIsSkewed", func(t *testing.T) {
		// A's renewal of jobs was written 2 s after it was seen; its grant
		// of orders came 1 s late, but is on the same clock.
		s := newStoryWith(t, audit.KindKubernetes, health)
		grant(s, "jobs", at(0), at(2*time.Second))
		grant(s, "orders", at(10*time.Second), at(9*time.Second))
		if got := len(s.out.Findings); got != 2 {
			t.Fatalf("findings = %v, want clock_skew on jobs and on orders", s.findings())
		}
		f := s.out.Findings[1]
		if f.Kind != audit.FindingClockSkew || f.Lock.Name != "orders" || !strings.Contains(f.Summary, "at least 2s ahead") ||
			!strings.Contains(f.Summary, "from 2 renewals in 1 of the last 10 minutes") {
			t.Fatalf("finding = %+v, want orders' clock_skew, 2s ahead from 2 renewals", f)
		}
	})
	t.Run("AheadWithinItsBoundIsNotSkewed", func(t *testing.T) {
		// A minute of renewals 3 s late, then one written 1.5 s after it
		// was seen: a step of 4.5 s, of one clock or the other.
		s := newStoryWith(t, audit.KindKubernetes, health)
		s.observe(audit.Observation{Kind: audit.EventGrant, At: at(3 * time.Second), RenewedAt: at(0), Holder: "A", Token: audit.Int64(1), LeaseDuration: lease})
		for d := 2 * time.Second; d < 60*time.Second; d += 2 * time.Second {
			s.observe(audit.Observation{Kind: audit.EventRenew, At: at(d + 3*time.Second), RenewedAt: at(d), Holder: "A", Token: audit.Int64(1)})
		}
		s.observe(audit.Observation{Kind: audit.EventRenew, At: at(62 * time.Second), RenewedAt: at(63500 * time.Millisecond), Holder: "A", Token: audit.Int64(1)})
		if got := s.findings(); len(got) != 0 {
			t.Fatalf("findings = %v, want none: 1.5 s ahead within a bound of 4.5 s", got)
		}
	})
}

const benchHolders = 100_000

// fillClocks is 100,000 node heartbeats renewed every 10 s for a window.
func fillClocks() (*audit.HolderClocks, []audit.HolderKey) {
	keys := make([]audit.HolderKey, benchHolders)
	for i := range keys {
		keys[i] = audit.HolderKey{Source: "k8s", Holder: fmt.Sprintf("node-%06d", i)}
	}
	c := audit.NewHolderClocks(0)
	for round := range 60 {
		for i, k := range keys {
			made := time.Duration(round)*10*time.Second + time.Duration(i)*100*time.Microsecond
			renewal(c, k, audit.ClassHeartbeat, ms(float64(i%400-200)), made, ms(float64(1+i%7)))
		}
	}
	return c, keys
}

// BenchmarkHolderClocksMemory reports the heap kept per holder of
// fillClocks', holder names aside.
func BenchmarkHolderClocksMemory(b *testing.B) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c, keys := fillClocks()
		runtime.GC()
		runtime.ReadMemStats(&after)
		names := benchHolders * (16 + 16) // each key's strings, which the tracker keeps anyway
		b.ReportMetric(float64(int(after.HeapAlloc-before.HeapAlloc)-names)/benchHolders, "B/holder")
		runtime.KeepAlive(c)
		runtime.KeepAlive(keys)
	}
}

// BenchmarkHolderClocks: an Observe, and a page of the 100 largest, of
// fillClocks' holders.
func BenchmarkHolderClocks(b *testing.B) {
	c, keys := fillClocks()
	now := at(10 * time.Minute)
	b.Run("Observe", func(b *testing.B) {
		i := 0
		for b.Loop() {
			c.Observe(keys[i%benchHolders], audit.ClassHeartbeat, now, now.Add(-time.Millisecond))
			i++
		}
	})
	b.Run("Largest100", func(b *testing.B) {
		for b.Loop() {
			c.Largest(now, audit.ClockFilter{Limit: 100})
		}
	})
}
