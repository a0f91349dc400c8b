package ownership_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasewatch/leasewatch/collectors/etcd/embedded"
	"github.com/leasewatch/leasewatch/collectors/ownership"
	"github.com/leasewatch/leasewatch/collectors/ownership/ownershiptest"
)

// startEtcd runs a real single-member etcd for the test and returns its
// host:port.
func startEtcd(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := embedded.Start(ctx, t.TempDir(), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.Endpoint, "http://")
}

// TestEtcdElector runs the contract suite on a real etcd.
func TestEtcdElector(t *testing.T) {
	var scopes atomic.Int64
	ownershiptest.Run(t, ownershiptest.Harness{
		Target: startEtcd(t),
		Scope: func(t *testing.T) string {
			return "/test/" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + string(rune('a'+scopes.Add(1))) + "/"
		},
		New: newEtcdElector,
	})
}

// newEtcdElector returns an elector for the replica identity that keeps its
// keys under scope and dials etcd at addr. It and its client are closed
// when the test ends.
func newEtcdElector(t *testing.T, scope, identity, addr string, timing ownership.Timing) ownership.Elector {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	el, err := ownership.NewEtcdElector(ctx, cli, ownership.EtcdConfig{Identity: identity, Prefix: scope, Timing: timing})
	if err != nil {
		cli.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		el.Close()
		cli.Close()
	})
	return el
}
