// Package ownershiptest is the contract suite of ownership.Elector, as
// audit/storetest is the stores': what every elector does, checked against
// a real backend through the Elector and Manager only. Each replica talks
// to the backend through a Proxy of its own, so that a test can make it a
// zombie (Pause) or kill it (Close) without resigning anything.
package ownershiptest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/collectors/ownership"
)

// Timing is the suite's lease timing: short, yet with room for a busy
// 2-core machine under -race.
var Timing = ownership.Timing{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 300 * time.Millisecond}

// bound is how long a dead holder's sources may take to move: the lease
// duration plus 2 s (the takeover bound), plus 3 s for a machine
// busy with the whole suite under -race, where a Kubernetes takeover that
// takes 3.4 s alone took 5.0 s. The suite logs the times it measures; the
// load tool holds the bound itself.
var bound = Timing.LeaseDuration + 2*time.Second + 3*time.Second

// Harness is what a backend supplies.
type Harness struct {
	// Target is the backend's host:port, which each replica's Proxy
	// forwards to.
	Target string
	// Scope returns a place of the test's own in the backend (a key prefix,
	// a namespace), so tests sharing one server do not meet.
	Scope func(t *testing.T) string
	// New returns an elector for the replica identity in scope that dials
	// the backend at addr (a Proxy's) with the given timing. The harness
	// closes its clients when the test ends.
	New func(t *testing.T, scope, identity, addr string, timing ownership.Timing) ownership.Elector
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	t.Run("ResignHandsOverAndTokensIncrease", func(t *testing.T) { testHandover(t, h) })
	t.Run("LostWhenBackendUnreachable", func(t *testing.T) { testZombie(t, h) })
	t.Run("FairSpreadFailoverAndReturn", func(t *testing.T) { testSpread(t, h) })
	t.Run("RestartedReplicaCountsOnce", func(t *testing.T) { testRestartCount(t, h) })
}

// replica is one elector behind its own proxy.
type replica struct {
	id    string
	proxy *Proxy
	el    ownership.Elector
}

func newReplica(t *testing.T, h Harness, scope, id string) *replica {
	t.Helper()
	p := NewProxy(t, h.Target)
	return &replica{id: id, proxy: p, el: h.New(t, scope, id, p.Addr(), Timing)}
}

func always(bool) bool { return true }

// campaign runs a Campaign in the background.
type campaign struct {
	done   chan struct{}
	term   *ownership.Term
	err    error
	cancel context.CancelFunc
}

func startCampaign(r *replica, source string) *campaign {
	ctx, cancel := context.WithCancel(context.Background())
	c := &campaign{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(c.done)
		c.term, c.err = r.el.Campaign(ctx, source, always)
	}()
	return c
}

// granted waits up to limit for c's grant and returns its term and how
// long it took.
func (c *campaign) granted(t *testing.T, what string, limit time.Duration) (*ownership.Term, time.Duration) {
	t.Helper()
	start := time.Now()
	select {
	case <-c.done:
	case <-time.After(limit):
		t.Fatalf("%s: no grant within %v", what, limit)
	}
	if c.err != nil {
		t.Fatalf("%s: %v", what, c.err)
	}
	return c.term, time.Since(start)
}

// pending fails the test when c was granted already.
func (c *campaign) pending(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.done:
		t.Fatalf("%s: granted (token %v, err %v) while another replica holds the source", what, tokenOf(c.term), c.err)
	default:
	}
}

func tokenOf(t *ownership.Term) any {
	if t == nil {
		return nil
	}
	return t.Token
}

func live(t *ownership.Term) bool {
	select {
	case <-t.Lost():
		return false
	default:
		return true
	}
}

// testHandover: one owner at a time; resign hands over at once; tokens
// strictly increase across a handover, a re-grant to the same replica and a
// takeover after the holder's process is gone.
func testHandover(t *testing.T, h Harness) {
	scope := h.Scope(t)
	a, b := newReplica(t, h, scope, "replica-a"), newReplica(t, h, scope, "replica-b")
	const src = "orders/prod cluster" // not a valid key or Lease name as it is

	ta, _ := startCampaign(a, src).granted(t, "first grant to a", bound)
	cb := startCampaign(b, src)
	defer cb.cancel()
	cb.pending(t, "b while a holds")

	if err := ta.Resign(context.Background()); err != nil {
		t.Fatalf("a resigns: %v", err)
	}
	// At once: well within a lease duration, at most a few retries.
	tb, took := cb.granted(t, "b after a resigned", 4*Timing.RetryPeriod+time.Second)
	t.Logf("handover after a resign took %v", took)
	if live(ta) {
		t.Fatal("a's term not over after Resign")
	}
	if tb.Token <= ta.Token {
		t.Fatalf("token after handover = %d, want > %d", tb.Token, ta.Token)
	}

	ca := startCampaign(a, src)
	defer ca.cancel()
	ca.pending(t, "a while b holds")
	if err := tb.Resign(context.Background()); err != nil {
		t.Fatalf("b resigns: %v", err)
	}
	ta2, _ := ca.granted(t, "a again after b resigned", 4*Timing.RetryPeriod+time.Second)
	if ta2.Token <= tb.Token {
		t.Fatalf("token of the re-grant to a = %d, want > %d", ta2.Token, tb.Token)
	}

	// a's process is gone: its connections drop and it resigns nothing.
	cb2 := startCampaign(b, src)
	defer cb2.cancel()
	cb2.pending(t, "b while a holds again")
	killed := time.Now()
	a.proxy.Close()
	tb2, _ := cb2.granted(t, "b taking over from a dead a", bound)
	if took := time.Since(killed); took > bound {
		t.Fatalf("takeover took %v, want at most %v", took, bound)
	}
	if tb2.Token <= ta2.Token {
		t.Fatalf("token after takeover = %d, want > %d", tb2.Token, ta2.Token)
	}
	t.Logf("tokens %d < %d < %d < %d; takeover %v after the kill", ta.Token, tb.Token, ta2.Token, tb2.Token, time.Since(killed))
	_ = tb2.Resign(context.Background())
}

// testZombie: a holder that cannot reach the backend gives its term up
// within the renew deadline, before the standby is granted the source; the
// standby then takes over, and the zombie's late traffic takes nothing back.
func testZombie(t *testing.T, h Harness) {
	scope := h.Scope(t)
	a, b := newReplica(t, h, scope, "replica-a"), newReplica(t, h, scope, "replica-b")
	const src = "payments"
	ta, _ := startCampaign(a, src).granted(t, "grant to a", bound)
	cb := startCampaign(b, src)
	defer cb.cancel()

	paused := time.Now()
	a.proxy.Pause()
	select {
	case <-ta.Lost():
	case <-time.After(Timing.RenewDeadline + Timing.RetryPeriod*2 + time.Second):
		t.Fatalf("a's term not lost %v after its backend became unreachable", time.Since(paused))
	}
	lostAfter := time.Since(paused)
	cb.pending(t, "b when a's term was lost") // a stopped before b could be granted
	tb, _ := cb.granted(t, "b taking over from the zombie", bound)
	t.Logf("zombie lost its term %v after the pause; b granted %v after it", lostAfter, time.Since(paused))
	if tb.Token <= ta.Token {
		t.Fatalf("token after the takeover = %d, want > %d", tb.Token, ta.Token)
	}

	a.proxy.Resume()
	// The zombie's held renewals arrive now; a new campaign of its own must
	// wait behind b, for as long as b holds the source.
	ctx, cancel := context.WithTimeout(context.Background(), Timing.LeaseDuration)
	defer cancel()
	term, err := a.el.Campaign(ctx, src, always)
	if err == nil {
		// A grant is right only once b's lease ran out: b's process was
		// starved of its renewals for a whole lease, which the loaded
		// machine can do. Then b has lost its term too (its RenewDeadline
		// is shorter than the lease that a waited out).
		select {
		case <-tb.Lost():
			t.Logf("b went %v without a renewal, so the zombie's new campaign was granted (token %d) after b's lease: the check of the held renewals proves nothing this run", Timing.LeaseDuration, term.Token)
			_ = term.Resign(context.Background())
			return
		case <-time.After(Timing.RetryPeriod):
			t.Fatalf("zombie granted again (token %d) while b holds the source", term.Token)
		}
	}
	if !live(tb) {
		t.Fatal("b's term lost after the zombie came back")
	}
	_ = tb.Resign(context.Background())
}

// testRestartCount: a replica killed and started again under its identity
// counts once among the members at once, though its dead process's
// membership is still within its lease; so the others' shares do not
// shrink and hand sources over for nothing.
func testRestartCount(t *testing.T, h Harness) {
	scope := h.Scope(t)
	a, b := newReplica(t, h, scope, "replica-a"), newReplica(t, h, scope, "replica-b")
	members := func(r *replica) (n, rank int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), Timing.RenewDeadline)
		defer cancel()
		n, rank, err := r.el.Members(ctx)
		if err != nil {
			t.Fatalf("%s counts the members: %v", r.id, err)
		}
		return n, rank
	}
	waitMembers := func(r *replica, want int) {
		t.Helper()
		for deadline := time.Now().Add(bound); ; {
			if n, _ := members(r); n == want {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("%s counts %d members after %v, want %d", r.id, n, bound, want)
			}
			time.Sleep(20 * time.Millisecond) // polling the backend, not waiting for time to pass
		}
	}
	waitMembers(a, 2)

	killed := time.Now()
	b.proxy.Close() // b's process is gone; its membership stays until its lease runs out
	b2 := newReplica(t, h, scope, "replica-b")
	if n, rank := members(a); n != 2 || rank != 0 {
		t.Fatalf("a counts %d members, rank %d, with b restarted; want 2, rank 0", n, rank)
	}
	if n, rank := members(b2); n != 2 || rank != 1 {
		t.Fatalf("the restarted b counts %d members, rank %d; want 2, rank 1", n, rank)
	}
	if since := time.Since(killed); since >= Timing.LeaseDuration {
		t.Fatalf("counted %v after the kill, past the dead process's lease (%v): the test proves nothing", since, Timing.LeaseDuration)
	}
}

// ledger checks the Managers' reports: one owner per source at a time, and
// tokens strictly increasing per source.
type ledger struct {
	mu       sync.Mutex
	owner    map[string]string
	token    map[string]int64
	problems []string
}

func newLedger() *ledger {
	return &ledger{owner: make(map[string]string), token: make(map[string]int64)}
}

func (l *ledger) acquired(replica, src string, token int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o := l.owner[src]; o != "" {
		l.problems = append(l.problems, fmt.Sprintf("%s granted to %s while %s holds it", src, replica, o))
	}
	if last, ok := l.token[src]; ok && token <= last {
		l.problems = append(l.problems, fmt.Sprintf("%s granted to %s with token %d, not above %d", src, replica, token, last))
	}
	l.owner[src], l.token[src] = replica, token
}

func (l *ledger) lost(replica, src string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.owner[src] == replica {
		delete(l.owner, src)
	}
}

// spread returns how many sources each replica owns, and how many are owned.
func (l *ledger) spread() (map[string]int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	per := make(map[string]int)
	for _, o := range l.owner {
		per[o]++
	}
	return per, len(l.owner)
}

func (l *ledger) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.problems {
		t.Error(p)
	}
}

// managed is a replica run by a Manager.
type managed struct {
	*replica
	cancel context.CancelFunc
	done   chan struct{}
}

func startManaged(t *testing.T, h Harness, scope, id string, sources []string, l *ledger) *managed {
	r := newReplica(t, h, scope, id)
	ctx, cancel := context.WithCancel(context.Background())
	m := &managed{replica: r, cancel: cancel, done: make(chan struct{})}
	mgr := ownership.NewManager(r.el, ownership.ManagerConfig{
		Sources: sources, RetryPeriod: Timing.RetryPeriod,
		OnAcquired: func(src string, token int64) { l.acquired(id, src, token) },
		OnLost:     func(src string) { l.lost(id, src) },
	})
	go func() { defer close(m.done); mgr.Run(ctx) }()
	t.Cleanup(func() { m.stop() })
	return m
}

func (m *managed) stop() {
	m.cancel()
	<-m.done
}

// waitSpread polls until every source has an owner and each replica in want
// owns exactly its count, and returns how long that took.
func waitSpread(t *testing.T, l *ledger, sources int, want map[string]int, start time.Time, limit time.Duration) time.Duration {
	t.Helper()
	for {
		per, owned := l.spread()
		ok := owned == sources
		for id, n := range want {
			ok = ok && per[id] == n
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("after %v: %d of %d sources owned, spread %v, want %v", limit, owned, sources, per, want)
		}
		time.Sleep(20 * time.Millisecond) // polling the ledger, not waiting for time to pass
	}
}

// testSpread: 3 replicas share 7 sources, 3, 2 and 2 (the replica whose
// identity sorts first takes the one over); a killed replica's sources
// move to the others within the bound, 4 and 3; when it returns it gets
// its share back.
func testSpread(t *testing.T, h Harness) {
	scope := h.Scope(t)
	sources := []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7"}
	l := newLedger()
	defer l.check(t)
	a := startManaged(t, h, scope, "replica-a", sources, l)
	b := startManaged(t, h, scope, "replica-b", sources, l)
	c := startManaged(t, h, scope, "replica-c", sources, l)
	took := waitSpread(t, l, 7, map[string]int{a.id: 3, b.id: 2, c.id: 2}, time.Now(), 4*bound)
	t.Logf("fair spread after %v", took)

	// c's process is gone: its connections drop, it resigns nothing (its
	// Manager stops, which stands for the process doing nothing more).
	killed := time.Now()
	c.proxy.Close()
	c.stop()
	moved := waitSpread(t, l, 7, map[string]int{a.id: 4, b.id: 3}, killed, bound)
	t.Logf("a killed replica's sources moved within %v (bound %v)", moved, bound)

	c2 := startManaged(t, h, scope, "replica-c", sources, l)
	took = waitSpread(t, l, 7, map[string]int{a.id: 3, b.id: 2, c2.id: 2}, time.Now(), 4*bound)
	t.Logf("the returning replica got its share within %v", took)
}
