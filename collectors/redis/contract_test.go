package redis

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

func TestContract(t *testing.T) {
	// Every write is on disk before it is answered, so a crashed server
	// comes back with the locks it held.
	srv := startRedis(t, "appendonly yes", "appendfsync always")
	collectortest.Test(t, contract{srv: srv})
}

// contractLease is the lease every contract lock is taken with: long
// enough to outlast the outage, short enough to lapse within the suite's
// wait.
const contractLease = 5 * time.Second

// contract drives the package's redis-server for the collector contract:
// each scope is a key prefix, a lock is the key <scope>:<name> taken with
// SET NX PX by a client of its own, with the holder as the value, as
// redsync, bsm/redislock and the Redis docs' pattern take it; it is
// extended and released only by a script that checks the value first, as
// redsync's are. No token rule: those locks carry no fencing token.
type contract struct {
	srv *redisServer
}

func (contract) Declaration() collectors.Backend { return Backend }

func (b contract) Collector(t *testing.T, source, scope string) collectors.Collector {
	cfg := testConfig(b.srv)
	cfg.Name = source
	cfg.Patterns = []string{scope + ":*"}
	c, err := New(cfg, collectortest.Logger(t, source))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (contract) LockName(scope, name string) string { return scope + ":" + name }

func (b contract) Acquire(t *testing.T, scope, name, holder string) collectortest.Held {
	t.Helper()
	h := &redisHeld{cli: b.srv.client(t), key: b.LockName(scope, name), value: holder}
	// A blocking lock client: it tries again until the key is free.
	collectortest.Eventually(t, 20*time.Second, "the lock of "+h.key, func() bool {
		ok, err := h.cli.SetNX(context.Background(), h.key, h.value, contractLease).Result()
		if err != nil {
			t.Fatalf("SET %q NX PX: %v", h.key, err)
		}
		return ok
	})
	return h
}

// Outage crashes the server (SIGKILL) and starts it again on its
// append-only file: the connections drop, the run_id changes, and the keys
// are back with their deadlines, as after a crash of a server that
// persists every write. (A restart without persistence would lose the
// locks; a SIGSTOP would have to outlast deadAfter, a fixed wait, before
// the collector calls the connection dead.)
func (b contract) Outage(t *testing.T) func() {
	b.srv.crash()
	return func() { b.srv.launch(t) }
}

// Traits: a renewal sets the key's TTL again, which the collector records
// from its expire notification and the deadline it reads; Redis keeps no
// history, so a restart or an outage is a blind window; the lock's name is
// its key and its holder the value, and both are any bytes.
func (contract) Traits() collectortest.Traits {
	return collectortest.Traits{
		Renewals: true,
		Names:    collectortest.AnyBytes,
		Holders:  collectortest.AnyBytes,
	}
}

// extendScript is redsync's extend: only the holder, by its value, sets
// the TTL again. releaseScript is its unlock.
var extendScript = goredis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) end
return 0`)

type redisHeld struct {
	cli        *goredis.Client
	key, value string
}

func (h *redisHeld) Holder() string { return h.value }
func (h *redisHeld) Token() *int64  { return nil }

// Renew extends the lease once the key's TTL has visibly run down, so the
// deadline moves.
func (h *redisHeld) Renew(t *testing.T) {
	t.Helper()
	waitPTTLBelow(t, h.cli, h.key, contractLease-200*time.Millisecond)
	if n, err := extendScript.Run(context.Background(), h.cli, []string{h.key}, h.value, contractLease.Milliseconds()).Int(); err != nil || n != 1 {
		t.Fatalf("extend %q: %d, %v", h.key, n, err)
	}
}

func (h *redisHeld) Release(t *testing.T) {
	t.Helper()
	if n, err := releaseScript.Run(context.Background(), h.cli, []string{h.key}, h.value).Int(); err != nil || n != 1 {
		t.Fatalf("unlock %q: %d, %v", h.key, n, err)
	}
}

// Lapse does nothing: nothing renews the key, so it expires at its TTL.
func (h *redisHeld) Lapse(*testing.T) {}
