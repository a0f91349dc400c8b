package postgres

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// wait is how long a test waits for what the collector sees within a few
// polls, on a loaded machine.
const wait = 20 * time.Second

// watched runs a collector of a new database on srv and returns the
// database, the sink and the collector's latest poll.
func watched(t *testing.T, srv *pgtest.Server) (string, *collectortest.Sink, *atomic.Pointer[state]) {
	t.Helper()
	return watchedWith(t, srv, nil)
}

// watchedWith is watched, handing each good poll to polled too.
func watchedWith(t *testing.T, srv *pgtest.Server, polled func(*state)) (string, *collectortest.Sink, *atomic.Pointer[state]) {
	t.Helper()
	db := database(t, srv)
	var last atomic.Pointer[state]
	sk := collectortest.NewSink(t, "pg", Backend.Kind)
	collectortest.Run(t, newCollector(t, srv, "pg", []string{db}, func(st *state) {
		if polled != nil {
			polled(st)
		}
		last.Store(st)
	}), sk)
	return db, sk, &last
}

// obsOf waits for the n-th observation of lock of kind and returns it.
func obsOf(t *testing.T, sk *collectortest.Sink, lock string, kind audit.EventKind, n int) audit.Observation {
	t.Helper()
	var obs []audit.Observation
	collectortest.Eventually(t, wait, string(kind)+" of "+lock, func() bool {
		obs = sk.Obs(lock, kind)
		return len(obs) >= n
	})
	return obs[n-1]
}

func detail(t *testing.T, ob audit.Observation, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if ob.Detail[k] != v {
			t.Errorf("%s of %s: detail %s = %v, want %v (all: %v)", ob.Kind, ob.Lock.Name, k, ob.Detail[k], v, ob.Detail)
		}
	}
}

// TestEnds: the bigint and two-int forms named with their signed keys; a
// release while the session lives on; a terminated session's lock expired;
// shared holds left out; every grant unfenced.
func TestEnds(t *testing.T) {
	srv := shared(t)
	db, sk, _ := watched(t, srv)

	a := connectHolder(t, srv, db, "alpha")
	a.exec(t, `SELECT pg_advisory_lock(-5)`)
	b := connectHolder(t, srv, db, "beta")
	b.exec(t, `SELECT pg_advisory_lock(1, -2)`)
	for _, s := range []string{"gamma", "delta"} {
		connectHolder(t, srv, db, s).exec(t, `SELECT pg_advisory_lock_shared(7)`)
	}
	g := obsOf(t, sk, db+"/-5", audit.EventGrant, 1)
	if g.Holder != a.name() || g.Token != nil {
		t.Errorf("grant of %s/-5: holder %q token %v, want %q and none", db, g.Holder, g.Token, a.name())
	}
	detail(t, g, map[string]any{"level": levelSession, "pid": a.s.pid})
	obsOf(t, sk, db+"/1,-2", audit.EventGrant, 1)

	a.exec(t, `SELECT pg_advisory_unlock(-5)`)
	detail(t, obsOf(t, sk, db+"/-5", audit.EventRelease, 1), map[string]any{"level": levelSession})
	b.terminate(t, srv)
	e := obsOf(t, sk, db+"/1,-2", audit.EventExpire, 1)
	sk.WaitEvents(t, wait, db+"/1,-2", 1, audit.EventExpire)
	detail(t, e, map[string]any{"level": levelSession})
	if e.Holder != b.name() || e.Inferred {
		t.Errorf("expiry of %s/1,-2: holder %q inferred %v, want %q observed", db, e.Holder, e.Inferred, b.name())
	}

	if ts := sk.Tenures(t, db+"/1,-2"); len(ts) != 1 || ts[0].End != audit.EndExpired {
		t.Errorf("tenures of %s/1,-2 = %+v, want one expired", db, ts)
	}
	sk.WaitFindings(t, wait, db+"/-5", audit.FindingUnfencedLock)
	if evs := sk.Events(t, db+"/7"); len(evs) != 0 {
		t.Errorf("shared holds of %s/7 recorded as %v, want left out", db, collectortest.Kinds(evs))
	}
}

// TestTransactionLevel: a transaction lock ends as its transaction does; a
// session lock taken and released within one transaction is told apart
// by its release before the transaction ends.
func TestTransactionLevel(t *testing.T) {
	srv := shared(t)
	db, sk, _ := watched(t, srv)
	h := connectHolder(t, srv, db, "xact")
	ctx := context.Background()

	tx, err := h.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(21)`); err != nil {
		t.Fatal(err)
	}
	detail(t, obsOf(t, sk, db+"/21", audit.EventGrant, 1), map[string]any{"level": levelUnknown})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	detail(t, obsOf(t, sk, db+"/21", audit.EventRelease, 1), map[string]any{"level": levelTransaction})

	tx, err = h.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_lock(22)`); err != nil {
		t.Fatal(err)
	}
	obsOf(t, sk, db+"/22", audit.EventGrant, 1)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_unlock(22)`); err != nil {
		t.Fatal(err)
	}
	detail(t, obsOf(t, sk, db+"/22", audit.EventRelease, 1), map[string]any{"level": levelSession})
}

// TestWaiterWait: sessions blocked in pg_advisory_lock are counted on the
// grant, and the one granted next says how long it waited.
func TestWaiterWait(t *testing.T) {
	srv := shared(t)
	db, sk, last := watched(t, srv)
	lock := db + "/30"
	a := connectHolder(t, srv, db, "first")
	a.exec(t, `SELECT pg_advisory_lock(30)`)
	obsOf(t, sk, lock, audit.EventGrant, 1)

	waiting := func(n int) {
		collectortest.Eventually(t, wait, "waiters seen by a poll", func() bool {
			st := last.Load()
			return st != nil && len(st.waiters[lock]) == n
		})
	}
	queued := make(chan error, 2)
	b := connectHolder(t, srv, db, "second")
	c := connectHolder(t, srv, db, "third")
	go func() { _, err := b.conn.Exec(context.Background(), `SELECT pg_advisory_lock(30)`); queued <- err }()
	waiting(1)
	go func() { _, err := c.conn.Exec(context.Background(), `SELECT pg_advisory_lock(30)`); queued <- err }()
	waiting(2)

	a.exec(t, `SELECT pg_advisory_unlock(30)`)
	if err := <-queued; err != nil {
		t.Fatal(err)
	}
	g := obsOf(t, sk, lock, audit.EventGrant, 2)
	if g.Holder != b.name() {
		t.Fatalf("second grant to %q, want %q", g.Holder, b.name())
	}
	detail(t, g, map[string]any{"waiters": 1})
	lo, _ := g.Detail["waited_ms_min"].(int64)
	hi, ok := g.Detail["waited_ms_max"].(int64)
	if !ok || lo <= 0 || hi < lo {
		t.Errorf("grant after a wait: waited %v..%v ms, want a positive range", g.Detail["waited_ms_min"], g.Detail["waited_ms_max"])
	}
	detail(t, obsOf(t, sk, lock, audit.EventRelease, 1), map[string]any{"waiters": 2})

	b.exec(t, `SELECT pg_advisory_unlock(30)`)
	if err := <-queued; err != nil {
		t.Fatal(err)
	}
	detail(t, obsOf(t, sk, lock, audit.EventGrant, 3), map[string]any{"waiters": 0})
}

// TestServerRestart: a restart ends every session, so every lock held
// before it ends, expired, within one blind window that says why.
func TestServerRestart(t *testing.T) {
	srv := pgtest.New(t, pgtest.Options{NoFsync: true})
	withWatcher(t, srv)
	db, sk, _ := watched(t, srv)
	lock := db + "/40"
	connectHolder(t, srv, db, "before").exec(t, `SELECT pg_advisory_lock(40)`)
	obsOf(t, sk, lock, audit.EventGrant, 1)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	e := obsOf(t, sk, lock, audit.EventExpire, 1)
	sk.WaitEvents(t, wait, lock, 1, audit.EventExpire)
	if !e.Inferred || !strings.Contains(e.Detail["reason"].(string), "restarted") {
		t.Errorf("end after a restart: inferred %v, detail %v; want an inferred expiry for the restart", e.Inferred, e.Detail)
	}
	bl := sk.Blinds()
	if len(bl) != 1 || !strings.Contains(bl[0].Reason, "restarted") {
		t.Errorf("blind windows %+v, want one for the restart", bl)
	}
	if ts := sk.Tenures(t, lock); len(ts) != 1 || ts[0].End != audit.EndExpired {
		t.Errorf("tenures of %s = %+v, want one expired", lock, ts)
	}
}

// TestSessionEnds: a session its client closes releases its locks; one
// whose client vanished without closing it (a crash: the socket closed
// with no Terminate message) ends them expired, as the database's
// statistics tell the two apart.
func TestSessionEnds(t *testing.T) {
	srv := shared(t)
	db, sk, _ := watched(t, srv)
	closed := connectHolder(t, srv, db, "closes")
	closed.exec(t, `SELECT pg_advisory_lock(50)`)
	crashed := connectHolder(t, srv, db, "crashes")
	crashed.exec(t, `SELECT pg_advisory_lock(51)`)
	obsOf(t, sk, db+"/50", audit.EventGrant, 1)
	obsOf(t, sk, db+"/51", audit.EventGrant, 1)

	if err := closed.conn.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := obsOf(t, sk, db+"/50", audit.EventRelease, 1)
	if !strings.Contains(r.Detail["reason"].(string), "its client closed") {
		t.Errorf("end of a closed session: %v", r.Detail)
	}
	if err := crashed.conn.PgConn().Conn().Close(); err != nil {
		t.Fatal(err)
	}
	e := obsOf(t, sk, db+"/51", audit.EventExpire, 1)
	if !strings.Contains(e.Detail["reason"].(string), "ended abnormally") {
		t.Errorf("end of a crashed client's session: %v", e.Detail)
	}
}

// TestDatabases: one connection reads the locks of every database listed,
// and of no other.
func TestDatabases(t *testing.T) {
	srv := shared(t)
	a, b, other := database(t, srv), database(t, srv), database(t, srv)
	sk := collectortest.NewSink(t, "pg", Backend.Kind)
	collectortest.Run(t, newCollector(t, srv, "pg", []string{a, b}, nil), sk)
	connectHolder(t, srv, other, "elsewhere").exec(t, `SELECT pg_advisory_lock(70)`)
	for _, db := range []string{a, b} {
		connectHolder(t, srv, db, "here").exec(t, `SELECT pg_advisory_lock(70)`)
		sk.WaitEvents(t, wait, db+"/70", 1, audit.EventGrant)
	}
	if evs := sk.Events(t, other+"/70"); len(evs) != 0 {
		t.Errorf("a database not listed recorded: %v", collectortest.Kinds(evs))
	}
}

// TestWrongPassword: a refused login stops the collector before it is
// ready, with the server's reason and without the password.
func TestWrongPassword(t *testing.T) {
	srv := shared(t)
	db := database(t, srv)
	c, err := New(Config{Name: "pg", URL: watchURL(srv, db), Password: collectors.Password("not-the-password")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err = c.Run(ctx, collectortest.NewSink(t, "pg", Backend.Kind), func() { t.Error("ready without a login") })
	if err == nil || !strings.Contains(err.Error(), "password authentication failed") || strings.Contains(err.Error(), "not-the-password") {
		t.Errorf("Run = %v, want the server's refusal, without the password", err)
	}
}
