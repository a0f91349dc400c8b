package postgres

import (
	"context"
	"hash/fnv"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

func TestContract(t *testing.T) {
	collectortest.Test(t, &contract{srv: shared(t), dbs: map[string]string{}})
}

// contract drives the shared server for the collector contract: each scope
// is a database of its own, each lock a bigint key derived from its name
// and taken with pg_advisory_lock by a session of its own, whose
// application_name is the holder it claims.
type contract struct {
	srv *pgtest.Server
	mu  sync.Mutex
	dbs map[string]string // scope -> database
}

func (*contract) Declaration() collectors.Backend { return Backend }

// db is scope's database, created on first use.
func (b *contract) db(t *testing.T, scope string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if db, ok := b.dbs[scope]; ok {
		return db
	}
	db := database(t, b.srv)
	b.dbs[scope] = db
	return db
}

func (b *contract) Collector(t *testing.T, source, scope string) collectors.Collector {
	return newCollector(t, b.srv, source, []string{b.db(t, scope)}, nil)
}

// key derives a lock's bigint key from its name, as golang-migrate derives
// its own from the database's name.
func key(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

func (b *contract) LockName(scope, name string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dbs[scope] + "/" + strconv.FormatInt(key(name), 10)
}

func (b *contract) Acquire(t *testing.T, scope, name, holderName string) collectortest.Held {
	t.Helper()
	h := connectHolder(t, b.srv, b.db(t, scope), holderName)
	h.exec(t, `SELECT pg_advisory_lock($1)`, key(name))
	return &pgHeld{h: h, srv: b.srv, key: key(name)}
}

// Outage keeps the collector from the server while every session, the
// holders', lives on, as a partition between the two would: the watcher
// role may no longer log in, its sessions are terminated, and the outage
// lasts until the server has refused the collector's reconnection.
func (b *contract) Outage(t *testing.T) func() {
	log, err := os.ReadFile(b.srv.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	admin(t, b.srv, "postgres", `ALTER ROLE `+watcher+` NOLOGIN`)
	admin(t, b.srv, "postgres", `SELECT pg_terminate_backend(pid, 30000) FROM pg_stat_activity WHERE usename = $1`, watcher)
	refused := `role "` + watcher + `" is not permitted to log in`
	collectortest.Eventually(t, 20*time.Second, "the collector's reconnection refused", func() bool {
		now, err := os.ReadFile(b.srv.LogFile)
		return err == nil && strings.Contains(string(now[len(log):]), refused)
	})
	return func() { admin(t, b.srv, "postgres", `ALTER ROLE `+watcher+` LOGIN`) }
}

// Traits: nothing renews an advisory lock, PostgreSQL keeps no history of
// its locks, keys are numbers, and an application_name takes any bytes,
// which the server cuts to 63 and makes printable ASCII.
func (*contract) Traits() collectortest.Traits {
	return collectortest.Traits{Holders: collectortest.AnyBytes}
}

type pgHeld struct {
	h   *holder
	srv *pgtest.Server
	key int64
}

func (p *pgHeld) Holder() string { return p.h.name() }
func (p *pgHeld) Token() *int64  { return nil }

// Renew is never asked for: Traits says nothing renews an advisory lock.
func (p *pgHeld) Renew(t *testing.T) { t.Fatal("an advisory lock has no renewals") }

func (p *pgHeld) Release(t *testing.T) {
	var ok bool
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.h.conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1)`, p.key).Scan(&ok); err != nil || !ok {
		t.Fatalf("unlock %d: %v %v", p.key, ok, err)
	}
}

// Lapse terminates the holder's session, as an operator does to free a
// leaked lock, or as a client that dies without closing it ends up.
func (p *pgHeld) Lapse(t *testing.T) { p.h.terminate(t, p.srv) }
