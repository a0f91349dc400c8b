package collectortest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// Backend is what a backend's package supplies to the contract: a
// collector of its real server, and that server's locks driven the way
// their clients take them. Every method fails t on error.
type Backend interface {
	// Declaration is the backend's collectors.Backend, which its
	// collectors' inputs must agree with.
	Declaration() collectors.Backend
	// Collector returns a new collector named source that watches only
	// scope: a fresh prefix, namespace or path, one per test, that the
	// suite names. Its leases last a few seconds at most.
	Collector(t *testing.T, source, scope string) collectors.Collector
	// LockName is the name the collector gives lock name in scope, before
	// audit.Text.
	LockName(scope, name string) string
	// Acquire takes lock name in scope for a new holder and returns once it
	// holds. holder is the identity the holder claims where the backend
	// lets it choose one (a Lease's holderIdentity, a Redis value).
	Acquire(t *testing.T, scope, name, holder string) Held
	// Outage takes the server away from the collectors, as a crash or a
	// partition does, for less than a lease but long enough for a
	// collector to notice (an outage it cannot see missed nothing, and is
	// rightly no blind window), and returns what ends it. Locks held before
	// it are still held after.
	Outage(t *testing.T) (end func())
	// Traits are what the contract may expect of this backend.
	Traits() Traits
}

// Held is one holder's hold of a lock.
type Held interface {
	// Holder is the holder the collector records, before audit.Text.
	Holder() string
	// Token is the fencing token the collector records; nil for none.
	Token() *int64
	// Renew renews the lease as the holder's client does.
	Renew(t *testing.T)
	// Release gives the lock up.
	Release(t *testing.T)
	// Lapse stops renewing, as a crashed holder does, so that the lease
	// expires on its own.
	Lapse(t *testing.T)
}

// Traits are what a backend lets an observer see.
type Traits struct {
	// Renewals says the collector records renewals.
	Renewals bool
	// Resumes says a restarted collector replays what it missed from its
	// cursor, with no blind window (etcd's revisions). Otherwise the
	// backend keeps no history, and the restart is one blind window.
	Resumes bool
	// Names and Holders say what hostile text each may carry.
	Names, Holders Hostility
}

// Hostility is which hostile text a backend can carry in a name or holder.
type Hostility int

const (
	// Plain: the backend restricts it (a Kubernetes object name, an etcd
	// lease ID).
	Plain Hostility = iota
	// Printable: markup and bidirectional controls, but no control
	// characters (a ZooKeeper path).
	Printable
	// AnyText: any UTF-8, control characters included.
	AnyText
	// AnyBytes: any bytes, invalid UTF-8 included.
	AnyBytes
)

// hostile returns the text the suite feeds a backend of hostility h: longer
// than audit.MaxText, with markup and bidirectional controls, control
// characters and invalid UTF-8 as far as the backend takes them. It holds
// no slash or NUL, which no backend takes in a name. "" for Plain.
func hostile(h Hostility, tag string) string {
	marked := "<img src=x onerror=alert(" + tag + ")>\u202eevil\u2066"
	tail := strings.Repeat("x", 3000)
	switch h {
	case Printable:
		return marked + tail
	case AnyText:
		return marked + "\x1b[31m\t\n" + tail
	case AnyBytes:
		return "\xff\xfe" + marked + "\x1b[31m\t\n" + tail
	}
	return ""
}

// lease is how long the suite waits for any one thing a backend does within
// a lease or two: a grant seen, an expiry, a takeover.
const lease = 20 * time.Second

// Test runs the collector contract on b: grant, renew, release and expiry
// with tokens; a restart that resumes from its cursor without loss or
// duplicates; a server outage that is exactly one blind window; hostile
// names and holders; and the cursor stored with the events it covers.
func Test(t *testing.T, b Backend) {
	c := &contract{b: b}
	t.Run("Lifecycle", c.lifecycle)
	t.Run("Restart", c.restart)
	t.Run("Outage", c.outage)
	t.Run("Hostile", c.hostile)
	t.Run("CursorWithEvents", c.cursor)
}

type contract struct {
	b Backend
}

const source = "contract"

// scope is a test's own scope: letters and digits only, since it becomes
// a Kubernetes namespace, an etcd prefix, a ZooKeeper path.
func scope(t *testing.T) string {
	name := strings.ToLower(strings.ReplaceAll(t.Name(), "/", ""))
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, name)
	return fmt.Sprintf("%s%d", name, time.Now().UnixNano()%1e6)
}

// start runs a collector of scope on a new sink (at path, if given).
func (c *contract) start(t *testing.T, sc string, opts ...SinkOption) (*Sink, *Running) {
	t.Helper()
	sk := NewSink(t, source, c.b.Declaration().Kind, opts...)
	return sk, Run(t, c.b.Collector(t, source, sc), sk)
}

func (c *contract) name(sc, lock string) string { return audit.Text(c.b.LockName(sc, lock)) }

// granted waits for h's grant of lock and checks its token.
func granted(t *testing.T, sk *Sink, lock string, h Held) audit.Event {
	t.Helper()
	holder := audit.Text(h.Holder())
	var got audit.Event
	Eventually(t, lease, fmt.Sprintf("the grant of %s to %q", lock, holder), func() bool {
		for _, e := range sk.Events(t, lock, audit.EventGrant) {
			if e.Holder == holder {
				got = e
				return true
			}
		}
		return false
	})
	if !sameToken(got.Token, h.Token()) {
		t.Errorf("grant of %s to %s: token %v, want %v", lock, got.Holder, show(got.Token), show(h.Token()))
	}
	return got
}

func sameToken(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func show(tok *int64) string {
	if tok == nil {
		return "none"
	}
	return fmt.Sprint(*tok)
}

// lifecycle: a grant with its token, renewals, a release, a second grant
// with a higher token, and an expiry.
func (c *contract) lifecycle(t *testing.T) {
	sc := scope(t)
	sk, _ := c.start(t, sc)
	lock := c.name(sc, "m")

	h := c.b.Acquire(t, sc, "m", "holder-a")
	first := granted(t, sk, lock, h)
	if c.b.Traits().Renewals {
		h.Renew(t)
		sk.WaitEvents(t, lease, lock, 1, audit.EventRenew)
	}
	h.Release(t)
	sk.WaitEvents(t, lease, lock, 1, audit.EventRelease)

	h2 := c.b.Acquire(t, sc, "m", "holder-b")
	second := granted(t, sk, lock, h2)
	if first.Token != nil && (second.Token == nil || *second.Token <= *first.Token) {
		t.Errorf("second grant's token %v is not above the first's %d", show(second.Token), *first.Token)
	}
	h2.Lapse(t)
	sk.WaitEvents(t, lease, lock, 1, audit.EventExpire)

	want := []audit.EventKind{audit.EventGrant, audit.EventRelease, audit.EventGrant, audit.EventExpire}
	if got := ends(sk.Events(t, lock)); !slices.Equal(got, want) {
		t.Errorf("events of %s = %v, want %v (renewals and blind windows aside)", lock, got, want)
	}
	ts := sk.Tenures(t, lock)
	if len(ts) != 2 || ts[0].End != audit.EndReleased || ts[1].End != audit.EndExpired {
		t.Errorf("tenures of %s = %+v, want one released and one expired", lock, ts)
	}
}

// restart: a collector restarted over an unchanged lock records nothing
// of it but, where the backend keeps no history, the blind window of its
// downtime; one restarted after a handover records the handover once.
func (c *contract) restart(t *testing.T) {
	sc := scope(t)
	sk, run := c.start(t, sc)
	lock := c.name(sc, "m")
	a := c.b.Acquire(t, sc, "m", "holder-a")
	granted(t, sk, lock, a)
	run.Stop(t)
	before := ends(sk.Events(t, lock))
	sk.Close()

	sk, run = c.start(t, sc, AtPath(sk.Path))
	marker := c.b.Acquire(t, sc, "marker", "marker")
	granted(t, sk, c.name(sc, "marker"), marker) // what the restart records of m is in by now
	if got := ends(sk.Events(t, lock)); !slices.Equal(got, before) {
		t.Errorf("a restart over an unchanged lock: events %v, want %v", got, before)
	}
	run.Stop(t)
	sk.Close()

	a.Release(t)
	b := c.b.Acquire(t, sc, "m", "holder-b")
	sk, _ = c.start(t, sc, AtPath(sk.Path))
	granted(t, sk, lock, b)
	evs := sk.Events(t, lock)
	if got := ends(evs); len(got) != 3 || got[0] != audit.EventGrant || !isEnd(got[1]) || got[2] != audit.EventGrant {
		t.Errorf("events of %s after a handover while stopped = %v, want a grant, its end and a grant", lock, Kinds(evs))
	}
	blinds := len(sk.Events(t, lock, audit.EventBlind))
	if resumes := c.b.Traits().Resumes; resumes && blinds != 0 || !resumes && blinds == 0 {
		t.Errorf("blind windows of %s = %d; the backend resumes from its cursor: %v", lock, blinds, resumes)
	}
}

func isEnd(k audit.EventKind) bool { return k == audit.EventRelease || k == audit.EventExpire }

// ends returns the kinds of evs without renewals and blind windows.
func ends(evs []audit.Event) []audit.EventKind {
	var out []audit.EventKind
	for _, e := range evs {
		if e.Kind != audit.EventRenew && e.Kind != audit.EventBlind {
			out = append(out, e.Kind)
		}
	}
	return out
}

// outage: a server outage is exactly one blind window where the backend
// keeps no history and none where the collector resumes from its cursor,
// and the lock held across it stays one tenure.
func (c *contract) outage(t *testing.T) {
	sc := scope(t)
	sk, _ := c.start(t, sc)
	lock := c.name(sc, "m")
	h := c.b.Acquire(t, sc, "m", "holder-a")
	granted(t, sk, lock, h)

	end := c.b.Outage(t)
	end()
	want := 1
	if c.b.Traits().Resumes {
		want = 0
	} else {
		sk.WaitEvents(t, lease, lock, 1, audit.EventBlind)
	}
	after := c.b.Acquire(t, sc, "after", "holder-b")
	granted(t, sk, c.name(sc, "after"), after) // the collector sees again

	if bl := sk.Blinds(); len(bl) != want {
		t.Errorf("blind windows = %+v, want %d", bl, want)
	}
	if n := len(sk.Events(t, lock, audit.EventBlind)); n != want {
		t.Errorf("blind events of %s = %d, want %d", lock, n, want)
	}
	if ts := sk.Tenures(t, lock); len(ts) != 1 || !ts[0].Held() {
		t.Errorf("tenures of %s = %+v, want the one held across the outage", lock, ts)
	}
}

// hostile: names and holders from the backend are recorded bounded,
// escaped and valid UTF-8, and two hostile names stay two locks.
func (c *contract) hostile(t *testing.T) {
	tr := c.b.Traits()
	if tr.Names == Plain && tr.Holders == Plain {
		t.Skip("the backend restricts names and holders alike")
	}
	sc := scope(t)
	sk, _ := c.start(t, sc)
	names := []string{"plain-1", "plain-2"}
	if tr.Names != Plain {
		names = []string{hostile(tr.Names, "1"), hostile(tr.Names, "2")}
	}
	holder := "holder"
	if tr.Holders != Plain {
		holder = hostile(tr.Holders, "h")
	}
	seen := map[string]bool{}
	for _, n := range names {
		h := c.b.Acquire(t, sc, n, holder)
		lock := c.name(sc, n)
		g := granted(t, sk, lock, h)
		for what, s := range map[string]string{"lock name": lock, "holder": g.Holder} {
			if !utf8.ValidString(s) || utf8.RuneCountInString(s) > audit.MaxText || strings.ContainsAny(s, "\x1b\u202e\u2066\t\n") {
				t.Errorf("%s %q is not bounded and escaped", what, s)
			}
		}
		seen[lock] = true
	}
	if len(seen) != len(names) {
		t.Errorf("%d hostile names became %d locks", len(names), len(seen))
	}
}

// cursor: every input with observations carries a cursor, and the store
// keeps the last one with its events, so a new sink on the store reads it.
func (c *contract) cursor(t *testing.T) {
	sc := scope(t)
	sk, run := c.start(t, sc)
	lock := c.name(sc, "m")
	h := c.b.Acquire(t, sc, "m", "holder-a")
	granted(t, sk, lock, h)
	h.Release(t)
	sk.WaitEvents(t, lease, lock, 1, audit.EventRelease)
	run.Stop(t)
	sk.Close()

	last := ""
	decl := c.b.Declaration()
	for _, in := range sk.Inputs() {
		if in.Kind != decl.Kind || len(in.Observations) > 0 && in.ExpireByClock != decl.ExpiresByClock {
			t.Errorf("an input of kind %q with ExpireByClock %v; the backend declares %q, ExpiresByClock %v",
				in.Kind, in.ExpireByClock, decl.Kind, decl.ExpiresByClock)
		}
		if len(in.Observations) > 0 && in.Cursor == "" {
			t.Errorf("an input with %d observations carries no cursor", len(in.Observations))
		}
		if in.Cursor != "" {
			last = in.Cursor
		}
	}
	again := NewSink(t, source, c.b.Declaration().Kind, AtPath(sk.Path))
	if pos, _ := again.Cursor(source); pos != last || pos == "" {
		t.Errorf("stored cursor = %q, want the last input's %q", pos, last)
	}
}
