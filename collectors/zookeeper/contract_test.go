package zookeeper

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

func TestContract(t *testing.T) {
	need(t)
	collectortest.Test(t, contract{})
}

// contract drives the package's ZooKeeper server for the collector
// contract: each scope is a directory of lock directories, each lock taken
// by the documented recipe (an ephemeral sequential child; the lowest
// holds) by a session of its own, with the holder as the node's data.
type contract struct{}

func (contract) Declaration() collectors.Backend { return Backend }

func (contract) Collector(t *testing.T, source, scope string) collectors.Collector {
	mkdirs(t, connect(t, 4*time.Second), "/"+scope)
	cfg := testConfig(t, "/"+scope)
	cfg.Name = source
	c, err := New(cfg, collectortest.Logger(t, source))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (contract) LockName(scope, name string) string { return "/" + scope + "/" + name }

func (b contract) Acquire(t *testing.T, scope, name, holder string) collectortest.Held {
	t.Helper()
	c := connect(t, 4*time.Second)
	dir := b.LockName(scope, name)
	mkdirs(t, c, dir)
	path, err := c.Create(dir+"/lock-", []byte(holder), zk.FlagEphemeral|zk.FlagSequence, acl)
	if err != nil {
		t.Fatalf("create under %s: %v", dir, err)
	}
	own := path[strings.LastIndexByte(path, '/')+1:]
	collectortest.Eventually(t, 20*time.Second, "the lock of "+dir, func() bool {
		names, _, err := c.Children(dir)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(names, func(a, b string) int { return strings.Compare(a[len(a)-10:], b[len(b)-10:]) })
		return len(names) > 0 && names[0] == own
	})
	_, st, err := c.Exists(path)
	if err != nil {
		t.Fatal(err)
	}
	return &zkHeld{c: c, path: path, holder: sessionHex(c) + " " + holder, token: st.Czxid}
}

// Outage stops the server process and starts it again on its data: the
// sessions outlive it, as they do a leader election in an ensemble.
func (contract) Outage(t *testing.T) func() {
	srv := need(t)
	srv.Stop()
	return func() {
		if err := srv.Relaunch(); err != nil {
			t.Fatal(err)
		}
	}
}

// Traits: a session renews without changing a node, so nothing shows a
// renewal; ZooKeeper keeps no history a collector could resume from; a
// node's data takes any bytes, and a path any printable text.
func (contract) Traits() collectortest.Traits {
	return collectortest.Traits{Names: collectortest.Printable, Holders: collectortest.AnyBytes}
}

type zkHeld struct {
	c      *client
	path   string
	holder string
	token  int64
}

func (h *zkHeld) Holder() string { return h.holder }
func (h *zkHeld) Token() *int64  { return &h.token }

// Renew is never asked for: Traits says ZooKeeper shows no renewals.
func (h *zkHeld) Renew(t *testing.T) { t.Fatal("a ZooKeeper session's renewals are not observable") }

func (h *zkHeld) Release(t *testing.T) {
	if err := h.c.Delete(h.path, -1); err != nil {
		t.Fatalf("delete %s: %v", h.path, err)
	}
}

// Lapse cuts the session's connection: the server expires it one timeout
// later and deletes its node.
func (h *zkHeld) Lapse(*testing.T) { h.c.cut() }
