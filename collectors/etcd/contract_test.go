package etcd

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// TestContract runs the collector contract on the package's embedded etcd,
// once with locks taken by concurrency.Mutex and once by
// concurrency.Election, whose candidates write a value of their choosing
// that the collector records with the lease.
func TestContract(t *testing.T) {
	ep := startEtcd(t)
	px := startProxy(t, ep)
	t.Run("Mutex", func(t *testing.T) { collectortest.Test(t, &contract{endpoint: ep, px: px}) })
	t.Run("Election", func(t *testing.T) { collectortest.Test(t, &contract{endpoint: ep, px: px, election: true}) })
}

// contractTTL is the holders' session TTL in seconds: a lapsed lease is
// gone this long after its last keepalive, and a session sends one every
// third of it, often enough for the collector's polls to see.
const contractTTL = 5

// contract drives the package's etcd for the collector contract: each
// scope is a prefix /<scope>/, each lock /<scope>/<name> taken by a client
// and session of its own, as a Mutex or an Election campaign (with the
// holder as the candidate's value). The collectors reach etcd through px,
// which Outage cuts; the holders dial etcd directly.
type contract struct {
	endpoint string
	px       *proxy
	election bool
}

func (*contract) Declaration() collectors.Backend { return Backend }

// Collector watches /<scope>/ through the proxy. Its dial timeout sets the
// silence it waits out before giving etcd up (twice it): longer than an
// outage and the client's reconnect after it.
func (b *contract) Collector(t *testing.T, source, scope string) collectors.Collector {
	cfg := Config{
		Name: source, Endpoints: []string{b.px.url()}, Prefixes: []string{"/" + scope + "/"},
		PollInterval: 100 * time.Millisecond, DialTimeout: 5 * time.Second,
	}
	c, err := New(cfg, collectortest.Logger(t, source), WithProgressInterval(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (*contract) LockName(scope, name string) string { return "/" + scope + "/" + name }

func (b *contract) Acquire(t *testing.T, scope, name, holder string) collectortest.Held {
	t.Helper()
	cli := newClient(t, b.endpoint)
	s := newSession(t, cli, contractTTL)
	lock := b.LockName(scope, name)
	h := &etcdHeld{cli: cli, s: s, holder: leaseHolder(s)}
	if !b.election {
		m := lockMutex(t, s, lock)
		h.token = token(t, cli, m.Key())
		h.release = func(t *testing.T) { unlockMutex(t, m) }
		return h
	}
	e := concurrency.NewElection(s, lock)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Campaign(ctx, holder); err != nil {
		t.Fatalf("campaign for %s: %v", lock, err)
	}
	h.holder += " " + holder
	h.token = e.Rev()
	h.release = func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Resign(ctx); err != nil {
			t.Fatalf("resign %s: %v", lock, err)
		}
	}
	return h
}

// Outage cuts the collectors' proxy, so etcd is out of their reach as in
// a partition, and returns once a collector has tried to reach it again
// and been turned away. The holders' sessions, which do not go through
// the proxy, keep their leases.
func (b *contract) Outage(t *testing.T) func() {
	n := b.px.refusals()
	b.px.cut()
	collectortest.Eventually(t, 10*time.Second, "a collector turned away by the cut proxy", func() bool { return b.px.refusals() > n })
	return b.px.restore
}

// Traits: the collector polls the owners' leases and records a keepalive
// as a renewal; its cursor is etcd's revision, from which a restarted or
// reconnected watch replays all it missed; keys are any bytes. A Mutex's
// key has no value, so its holder is the lease ID alone; an election's
// holder carries the candidate's value, any bytes.
func (b *contract) Traits() collectortest.Traits {
	tr := collectortest.Traits{Renewals: true, Resumes: true, Names: collectortest.AnyBytes, Holders: collectortest.Plain}
	if b.election {
		tr.Holders = collectortest.AnyBytes
	}
	return tr
}

type etcdHeld struct {
	cli     *clientv3.Client
	s       *concurrency.Session
	holder  string
	token   int64
	release func(*testing.T)
}

func (h *etcdHeld) Holder() string { return h.holder }

// Token is the owner key's CreateRevision (collectors/backends.md A.4).
func (h *etcdHeld) Token() *int64 { return &h.token }

// Renew sends a keepalive for the session's lease, on top of the
// session's own.
func (h *etcdHeld) Renew(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.cli.KeepAliveOnce(ctx, h.s.Lease()); err != nil {
		t.Fatalf("keepalive of lease %x: %v", int64(h.s.Lease()), err)
	}
}

func (h *etcdHeld) Release(t *testing.T) { h.release(t) }

// Lapse stops the session's keepalives without revoking its lease, as a
// crashed holder does: etcd expires the lease one TTL later and deletes
// its key.
func (h *etcdHeld) Lapse(*testing.T) { h.s.Orphan() }
