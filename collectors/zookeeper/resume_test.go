package zookeeper

import (
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// A restart that finds nothing changed records nothing; one that finds the
// lock changed hands records one blind window since the cursor and the new
// holder, inferred.
func TestRestartResumesFromItsCursor(t *testing.T) {
	a, b := connect(t, 4*time.Second), connect(t, 4*time.Second)
	const lock = "/t-resume/m"
	mkdirs(t, a, lock)
	db := filepath.Join(t.TempDir(), "leasewatch.db")
	sk := openSink(t, db)
	cr := runCollector(t, testConfig(t, "/t-resume"), sk)
	la := zk.NewLock(a.Conn, lock, acl)
	if err := la.Lock(); err != nil {
		t.Fatal(err)
	}
	sk.WaitEvents(t, 5*time.Second, lock, 1, audit.EventGrant)
	cr.Stop(t)
	sk.Close()

	sk = openSink(t, db)
	cr = runCollector(t, testConfig(t, "/t-resume"), sk)
	time.Sleep(300 * time.Millisecond) // a few polls: nothing to record
	if in := sk.Inputs(); len(in) != 0 {
		t.Fatalf("resume over an unchanged tree recorded %d inputs, want none: %+v", len(in), in)
	}
	cr.Stop(t)
	sk.Close()

	lb := zk.NewLock(b.Conn, lock, acl)
	held := lockAsync(t, lb)
	la.Unlock()
	<-held
	_, statB := ownNode(t, b, lock)

	sk = openSink(t, db)
	runCollector(t, testConfig(t, "/t-resume"), sk)
	evs := sk.Events(t, lock)
	want := []audit.EventKind{audit.EventGrant, audit.EventBlind, audit.EventRelease, audit.EventGrant}
	if got := collectortest.Kinds(evs); !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	if g := evs[3]; !g.Inferred || *g.Token != statB.Czxid || g.Holder != sessionHex(b) {
		t.Errorf("grant after the restart = %+v, want b's, inferred, token %d", g, statB.Czxid)
	}
	if r := evs[1].Detail["reason"]; !strings.Contains(r.(string), "changed while the collector was stopped") {
		t.Errorf("blind reason = %v", r)
	}
}

// A server outage is one blind window, from the last read before it to the
// re-read after the collector's session is back; the lock's tenure, which
// survived it, is kept.
func TestServerOutageIsOneBlindWindow(t *testing.T) {
	srv := need(t)
	a := connect(t, 4*time.Second)
	const lock = "/t-outage/m"
	mkdirs(t, a, lock)
	sk := newSink(t)
	cfg := testConfig(t, "/t-outage")
	cfg.SessionTimeout = 4 * time.Second
	runCollector(t, cfg, sk)
	if err := zk.NewLock(a.Conn, lock, acl).Lock(); err != nil {
		t.Fatal(err)
	}
	sk.WaitEvents(t, 5*time.Second, lock, 1, audit.EventGrant)

	down := time.Now()
	srv.Stop()
	gone := time.Now() // the process has exited: nothing could be seen until it is back
	if err := srv.Relaunch(); err != nil {
		t.Fatal(err)
	}
	blind := sk.WaitEvents(t, 15*time.Second, lock, 1, audit.EventBlind)
	time.Sleep(500 * time.Millisecond) // no second window follows
	var windows []*audit.Blind
	for _, in := range sk.Inputs() {
		if in.Blind != nil {
			windows = append(windows, in.Blind)
		}
	}
	if len(windows) != 1 || len(sk.Events(t, lock, audit.EventBlind)) != 1 {
		t.Fatalf("blind windows = %+v (events %d), want exactly one", windows, len(blind))
	}
	// A stopping server may still answer reads until it exits: the window
	// starts at the last read before the exit.
	if w := windows[0]; w.From.Before(down.Add(-time.Second)) || w.From.After(gone) || w.To.Before(gone) {
		t.Errorf("blind window %v .. %v does not cover the server's exit at %v (stopped at %v)", w.From, w.To, gone, down)
	}
	if g := sk.Events(t, lock, audit.EventGrant); len(g) != 1 {
		t.Errorf("grants = %d, want the one tenure, kept across the outage", len(g))
	}
}

// Digest credentials open a lock directory whose ACL lets only their user
// read it.
func TestDigestCredentials(t *testing.T) {
	a := connect(t, 4*time.Second)
	if err := a.AddAuth("digest", []byte("watcher:s3cret")); err != nil {
		t.Fatal(err)
	}
	mkdirs(t, a, "/t-digest")
	if _, err := a.Create("/t-digest/m", nil, 0, zk.DigestACL(zk.PermAll, "watcher", "s3cret")); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	if _, err := a.Create("/t-digest/m/guid-lock-", []byte("a"), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "/t-digest")
	c, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(t.Context(), newSink(t), func() {}); err == nil || !strings.Contains(err.Error(), "not authenticated") {
		t.Errorf("Run without credentials = %v, want a refusal to read", err)
	}
	cfg.Username, cfg.Password = "watcher", collectors.Password("s3cret")
	sk := newSink(t)
	runCollector(t, cfg, sk)
	if g := sk.Events(t, "/t-digest/m", audit.EventObserved); len(g) != 1 {
		t.Errorf("observed = %d, want the held lock", len(g))
	}
}

// gate is a dialer the test can close: closed, it refuses new connections
// and cuts the ones it made.
type gate struct {
	mu     sync.Mutex
	closed bool
	conns  []net.Conn
}

func (g *gate) dial(network, addr string, d time.Duration) (net.Conn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, errors.New("gate closed by the test")
	}
	nc, err := net.DialTimeout(network, addr, d)
	if err == nil {
		g.conns = append(g.conns, nc)
	}
	return nc, err
}

func (g *gate) set(closed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = closed
	if closed {
		for _, nc := range g.conns {
			nc.Close()
		}
		g.conns = nil
	}
}

// When the collector's own session expires its watches are gone: the time
// it was cut off is one blind window, and the read with its new session
// records what changed meanwhile.
func TestOwnSessionExpiryIsOneBlindWindow(t *testing.T) {
	a, b := connect(t, 4*time.Second), connect(t, 4*time.Second)
	const lock = "/t-own-expiry/m"
	mkdirs(t, a, lock)
	sk := newSink(t)
	cfg := testConfig(t, "/t-own-expiry")
	cfg.SessionTimeout = 500 * time.Millisecond
	g := &gate{}
	runCollector(t, cfg, sk, func(c *Collector) { c.netDial = g.dial })
	la := zk.NewLock(a.Conn, lock, acl)
	if err := la.Lock(); err != nil {
		t.Fatal(err)
	}
	sk.WaitEvents(t, 5*time.Second, lock, 1, audit.EventGrant)

	cut := time.Now()
	g.set(true)
	held := lockAsync(t, zk.NewLock(b.Conn, lock, acl))
	la.Unlock()
	<-held
	_, statB := ownNode(t, b, lock)
	time.Sleep(1500 * time.Millisecond) // past the session timeout: the server expires it
	g.set(false)

	evs := sk.WaitEvents(t, 10*time.Second, lock, 2, audit.EventGrant)
	if g := evs[1]; !g.Inferred || *g.Token != statB.Czxid {
		t.Errorf("grant after the expiry = %+v, want b's, inferred", g)
	}
	var windows []*audit.Blind
	for _, in := range sk.Inputs() {
		if in.Blind != nil {
			windows = append(windows, in.Blind)
		}
	}
	if len(windows) != 1 || windows[0].From.After(cut) || !strings.Contains(windows[0].Reason, "expired") {
		t.Fatalf("blind windows = %+v, want one from before the cut naming the expired session", windows)
	}
}
