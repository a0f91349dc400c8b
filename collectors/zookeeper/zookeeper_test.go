package zookeeper

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

var acl = zk.WorldACL(zk.PermAll)

// ownNode returns the child of dir that the client's session owns, and its
// Stat: how a go-zookeeper holder finds its token (zk.Lock keeps its node's
// path to itself).
func ownNode(t *testing.T, c *client, dir string) (string, *zk.Stat) {
	t.Helper()
	names, _, err := c.Children(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		_, st, err := c.Exists(dir + "/" + n)
		if err == nil && st != nil && st.EphemeralOwner == c.SessionID() {
			return n, st
		}
	}
	t.Fatalf("no node of session 0x%x under %s", c.SessionID(), dir)
	return "", nil
}

func sessionHex(c *client) string { return zxidHex(c.SessionID()) }

// lockAsync starts l.Lock and returns a channel closed once it holds.
func lockAsync(t *testing.T, l *zk.Lock) chan struct{} {
	held := make(chan struct{})
	go func() {
		if err := l.Lock(); err != nil {
			t.Errorf("lock: %v", err)
			return
		}
		close(held)
	}()
	return held
}

func TestGoZookeeperLockGrantsReleasesAndWaiters(t *testing.T) {
	a, b, c := connect(t, 4*time.Second), connect(t, 4*time.Second), connect(t, 4*time.Second)
	const lock = "/t-mutex/locks/orders"
	mkdirs(t, a, lock)
	sk := newSink(t)
	runCollector(t, testConfig(t, "/t-mutex/locks"), sk)

	la, lb, lc := zk.NewLock(a.Conn, lock, acl), zk.NewLock(b.Conn, lock, acl), zk.NewLock(c.Conn, lock, acl)
	if err := la.Lock(); err != nil {
		t.Fatal(err)
	}
	nodeA, statA := ownNode(t, a, lock)
	grant := sk.WaitEvents(t, 5*time.Second, lock, 1, audit.EventGrant)[0]
	if grant.Token == nil || *grant.Token != statA.Czxid || grant.Holder != sessionHex(a) {
		t.Fatalf("grant = holder %q token %v, want %s and czxid %d", grant.Holder, grant.Token, sessionHex(a), statA.Czxid)
	}
	if !strings.HasPrefix(nodeA, "_c_") || grant.Detail["node"] != nodeA {
		t.Errorf("node = %v, want %s (go-zookeeper's protected name)", grant.Detail["node"], nodeA)
	}
	heldB := lockAsync(t, lb)
	collectortest.Eventually(t, 5*time.Second, "b waiting", func() bool { n, _, _ := a.Children(lock); return len(n) == 2 })
	heldC := lockAsync(t, lc)
	collectortest.Eventually(t, 5*time.Second, "c waiting", func() bool { n, _, _ := a.Children(lock); return len(n) == 3 })

	if err := la.Unlock(); err != nil {
		t.Fatal(err)
	}
	<-heldB
	_, statB := ownNode(t, b, lock)
	evs := sk.WaitEvents(t, 5*time.Second, lock, 2, audit.EventGrant)
	if g := evs[1]; *g.Token != statB.Czxid || g.Holder != sessionHex(b) || fmt.Sprint(g.Detail["waiters"]) != "1" ||
		fmt.Sprint(g.Detail["queue"]) != fmt.Sprint([]string{sessionHex(c)}) {
		t.Errorf("second grant = %q token %d waiters %v queue %v, want %s, %d and one waiter (c, %s)",
			g.Holder, *g.Token, g.Detail["waiters"], g.Detail["queue"], sessionHex(b), statB.Czxid, sessionHex(c))
	}
	if *evs[1].Token <= *evs[0].Token {
		t.Errorf("tokens %d then %d: czxid must increase", *evs[0].Token, *evs[1].Token)
	}
	rel := sk.Events(t, lock, audit.EventRelease)
	if len(rel) != 1 || rel[0].Inferred || rel[0].Holder != sessionHex(a) {
		t.Fatalf("releases = %+v, want a's, seen (its session lives on)", rel)
	}
	lb.Unlock()
	<-heldC
	sk.WaitEvents(t, 5*time.Second, lock, 3, audit.EventGrant) // a grant shorter than a read is not seen
	lc.Unlock()
	evs = sk.WaitEvents(t, 5*time.Second, lock, 6, audit.EventGrant, audit.EventRelease)
	want := []audit.EventKind{audit.EventGrant, audit.EventRelease, audit.EventGrant, audit.EventRelease, audit.EventGrant, audit.EventRelease}
	if got := collectortest.Kinds(evs); !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
}

// Curator's recipes name their nodes _c_<uuid>-lock-<seq> (InterProcessMutex,
// LeaderSelector) and _c_<uuid>-latch-<seq> (LeaderLatch), with the host's
// address or the participant id as data: the same layout made by hand.
func TestCuratorLayoutsMutexAndLatch(t *testing.T) {
	a, b := connect(t, 4*time.Second), connect(t, 4*time.Second)
	mkdirs(t, a, "/t-curator/mutex")
	mkdirs(t, a, "/t-curator/latch")
	sk := newSink(t)
	runCollector(t, testConfig(t, "/t-curator"), sk)

	create := func(c *client, p string, data string) string {
		t.Helper()
		got, err := c.Create(p, []byte(data), zk.FlagEphemeral|zk.FlagSequence, acl)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	create(a, "/t-curator/mutex/_c_f290140d-9856-42ad-b9bf-348ffc086062-lock-", "10.0.0.7")
	waiter := create(b, "/t-curator/mutex/_c_0b8a2d1c-1111-4a2b-9c3d-2e4f5a6b7c8d-lock-", "10.0.0.8")
	latchA := create(a, "/t-curator/latch/_c_7d1e0c5a-2222-4b3c-8d4e-5f6a7b8c9d0e-latch-", "replica-a")
	create(b, "/t-curator/latch/_c_3c2b1a09-3333-4c4d-9e5f-6a7b8c9d0e1f-latch-", "replica-b")

	m := sk.WaitEvents(t, 5*time.Second, "/t-curator/mutex", 1, audit.EventGrant)[0]
	if m.Holder != sessionHex(a)+" 10.0.0.7" {
		t.Errorf("mutex holder = %q, want a's session and address", m.Holder)
	}
	l := sk.WaitEvents(t, 5*time.Second, "/t-curator/latch", 1, audit.EventGrant)[0]
	if l.Holder != sessionHex(a)+" replica-a" {
		t.Errorf("latch leader = %q, want a's session and id", l.Holder)
	}
	// The leader resigns: its node goes, the next latch node leads.
	if err := a.Delete(latchA, -1); err != nil {
		t.Fatal(err)
	}
	evs := sk.WaitEvents(t, 5*time.Second, "/t-curator/latch", 2, audit.EventGrant)
	if evs[1].Holder != sessionHex(b)+" replica-b" || *evs[1].Token <= *evs[0].Token {
		t.Errorf("second leader = %q token %d, want b's with a higher token than %d", evs[1].Holder, *evs[1].Token, *evs[0].Token)
	}
	// A timed acquire that gives up deletes its own waiting node: no grant.
	if err := b.Delete(waiter, -1); err != nil {
		t.Fatal(err)
	}
	_, st, err := a.Exists("/t-curator/mutex")
	if err != nil {
		t.Fatal(err)
	}
	collectortest.Eventually(t, 5*time.Second, "the cursor past b's delete", func() bool {
		pos, _ := sk.Cursor(testSource)
		cur, _ := strconv.ParseInt(pos, 10, 64)
		return cur >= st.Pzxid
	})
	if got := collectortest.Kinds(sk.Events(t, "/t-curator/mutex")); !slices.Equal(got, []audit.EventKind{audit.EventGrant}) {
		t.Errorf("mutex events = %v, want one grant (b only waited, then gave up)", got)
	}
}

// A client that closes its session and one whose session the server
// expires both lose their node without deleting it; the collector tells
// them apart by probing the sessions, and a release by the session living
// on.
func TestSessionCloseExpiryAndRelease(t *testing.T) {
	a, b, c := connect(t, time.Second), connect(t, time.Second), connect(t, time.Second)
	for _, d := range []string{"/t-ends/expired", "/t-ends/closed", "/t-ends/released"} {
		mkdirs(t, a, d)
	}
	sk := newSink(t)
	runCollector(t, testConfig(t, "/t-ends"), sk)
	for _, x := range []struct {
		c    *client
		lock string
	}{{a, "/t-ends/expired"}, {b, "/t-ends/closed"}, {c, "/t-ends/released"}} {
		if err := zk.NewLock(x.c.Conn, x.lock, acl).Lock(); err != nil {
			t.Fatal(err)
		}
		sk.WaitEvents(t, 5*time.Second, x.lock, 1, audit.EventGrant)
	}
	time.Sleep(300 * time.Millisecond) // a few probes see every owner connected

	a.cut()
	b.Close()
	node, _ := ownNode(t, c, "/t-ends/released")
	if err := c.Delete("/t-ends/released/"+node, -1); err != nil {
		t.Fatal(err)
	}

	exp := sk.WaitEvents(t, 10*time.Second, "/t-ends/expired", 1, audit.EventExpire, audit.EventRelease)[0]
	if exp.Kind != audit.EventExpire {
		t.Errorf("cut client's end = %s (%v), want expire", exp.Kind, exp.Detail["reason"])
	}
	cl := sk.WaitEvents(t, 5*time.Second, "/t-ends/closed", 1, audit.EventExpire, audit.EventRelease)[0]
	if cl.Kind != audit.EventRelease || !cl.Inferred || !strings.Contains(cl.Detail["reason"].(string), "closed") {
		t.Errorf("closed session's end = %s inferred=%v (%v), want an inferred release naming the close", cl.Kind, cl.Inferred, cl.Detail["reason"])
	}
	rel := sk.WaitEvents(t, 5*time.Second, "/t-ends/released", 1, audit.EventExpire, audit.EventRelease)[0]
	if rel.Kind != audit.EventRelease || rel.Inferred {
		t.Errorf("release = %s inferred=%v (%v), want a seen release", rel.Kind, rel.Inferred, rel.Detail["reason"])
	}
	if grant := sk.Events(t, "/t-ends/expired", audit.EventGrant)[0]; grant.TTL != time.Second {
		t.Errorf("lease of the expired grant = %v, want the session's negotiated 1s", grant.TTL)
	}
}

// Deleting and recreating a lock directory restarts its sequence numbers,
// not its tokens.
func TestTokensRiseAcrossARecreatedDirectory(t *testing.T) {
	a := connect(t, 4*time.Second)
	const lock = "/t-recreate/m"
	mkdirs(t, a, lock)
	sk := newSink(t)
	runCollector(t, testConfig(t, "/t-recreate"), sk)
	for i := range 2 {
		l := zk.NewLock(a.Conn, lock, acl)
		if err := l.Lock(); err != nil {
			t.Fatal(err)
		}
		sk.WaitEvents(t, 5*time.Second, lock, i+1, audit.EventGrant)
		l.Unlock()
		sk.WaitEvents(t, 5*time.Second, lock, i+1, audit.EventRelease)
		if err := a.Delete(lock, -1); err != nil {
			t.Fatal(err)
		}
		mkdirs(t, a, lock)
	}
	gs := sk.Events(t, lock, audit.EventGrant)
	if fmt.Sprint(gs[0].Detail["sequence"]) != "0" || fmt.Sprint(gs[1].Detail["sequence"]) != "0" {
		t.Errorf("sequences = %v, %v, want 0 both times", gs[0].Detail["sequence"], gs[1].Detail["sequence"])
	}
	if *gs[1].Token <= *gs[0].Token {
		t.Errorf("tokens %d then %d, want a rise", *gs[0].Token, *gs[1].Token)
	}
}

// Names, holders and data that no page should show raw are recorded as
// audit.Text makes them.
func TestHostileNamesAndHolders(t *testing.T) {
	a := connect(t, 4*time.Second)
	dir := "/t-hostile/evil\u202edcba\\x"
	mkdirs(t, a, dir)
	sk := newSink(t)
	runCollector(t, testConfig(t, "/t-hostile"), sk)
	data := "\xff\xfe\x1b[31mred\u2066" + strings.Repeat("x", 3000)
	if _, err := a.Create(dir+"/guid-lock-", []byte(data), zk.FlagEphemeral|zk.FlagSequence, acl); err != nil {
		t.Fatal(err)
	}
	name := audit.Text(dir)
	g := sk.WaitEvents(t, 5*time.Second, name, 1, audit.EventGrant)[0]
	if want := audit.Text(sessionHex(a) + " " + data); g.Holder != want {
		t.Errorf("holder = %q, want %q", g.Holder, want)
	}
	if len([]rune(g.Holder)) > audit.MaxText || strings.ContainsAny(g.Holder, "\x1b\u2066\u202e") {
		t.Errorf("holder %q is not bounded and escaped", g.Holder)
	}
}

// A paused holder keeps its connection open while its session expires:
// cons still lists the session, but the server has answered it nothing for
// longer than a live client goes between pings.
func TestPausedHolderExpires(t *testing.T) {
	p, other := connect(t, time.Second), connect(t, time.Second)
	const lock = "/t-paused/m"
	mkdirs(t, other, lock)
	sk := newSink(t)
	runCollector(t, testConfig(t, "/t-paused"), sk)
	if err := zk.NewLock(p.Conn, lock, acl).Lock(); err != nil {
		t.Fatal(err)
	}
	sk.WaitEvents(t, 5*time.Second, lock, 1, audit.EventGrant)
	time.Sleep(500 * time.Millisecond) // probes learn the server's clock
	p.freeze(t)
	end := sk.WaitEvents(t, 10*time.Second, lock, 1, audit.EventExpire, audit.EventRelease)[0]
	if end.Kind != audit.EventExpire || !strings.Contains(end.Detail["reason"].(string), "lresp") {
		t.Errorf("paused holder's end = %s (%v), want an expiry judged by lresp", end.Kind, end.Detail["reason"])
	}
}
