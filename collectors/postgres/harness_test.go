package postgres

import (
	"context"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/collectors"
	"github.com/leasewatch/leasewatch/collectors/collectortest"
)

// pg is the package's shared server, Debian's postgresql run by pgtest;
// tests that restart a server start one of their own.
var pg = pgtest.Shared{Options: pgtest.Options{NoFsync: true, Settings: map[string]string{"wal_level": "logical"}}}

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// The collector's role in the tests: a login with pg_read_all_stats, the
// least privilege that shows every session's application name, client
// and transaction.
const (
	watcher         = "leasewatch_watcher"
	watcherPassword = "watcher-secret"
)

var roles sync.Map // *pgtest.Server -> struct{}: the watcher role exists there

// shared returns the shared server, with the watcher role.
func shared(t testing.TB) *pgtest.Server {
	t.Helper()
	srv := pg.Get(t)
	withWatcher(t, srv)
	return srv
}

// withWatcher creates the watcher role on srv once.
func withWatcher(t testing.TB, srv *pgtest.Server) {
	t.Helper()
	if _, done := roles.Load(srv); done {
		return
	}
	admin(t, srv, "postgres", `DO $$ BEGIN
  CREATE ROLE `+watcher+` LOGIN PASSWORD '`+watcherPassword+`' IN ROLE pg_read_all_stats;
EXCEPTION WHEN duplicate_object THEN NULL; END $$`)
	roles.Store(srv, struct{}{})
}

// admin runs sql as the superuser on database db of srv.
func admin(t testing.TB, srv *pgtest.Server, db, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.URL(db))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// database creates a database of the test's own on srv and returns its name.
func database(t testing.TB, srv *pgtest.Server) string {
	t.Helper()
	u, err := url.Parse(srv.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// watchURL is the collector's url for db on srv: the watcher's, without
// its password.
func watchURL(srv *pgtest.Server, db string) string {
	return "postgres://" + watcher + "@" + srv.Addr + "/" + url.PathEscape(db) + "?sslmode=disable"
}

// newCollector returns a collector named source of dbs on srv, polling as
// often as it may; polled, if not nil, is handed each good poll.
func newCollector(t testing.TB, srv *pgtest.Server, source string, dbs []string, polled func(*state)) *Collector {
	t.Helper()
	return newCollectorEvery(t, srv, source, dbs, MinPollEvery, polled)
}

// newCollectorEvery is newCollector polling every every.
func newCollectorEvery(t testing.TB, srv *pgtest.Server, source string, dbs []string, every time.Duration, polled func(*state), opts ...Option) *Collector {
	t.Helper()
	c, err := New(Config{
		Name: source, URL: watchURL(srv, dbs[0]), Databases: dbs, PollEvery: every,
		Password: collectors.Password(watcherPassword),
	}, collectortest.Logger(t, source), opts...)
	if err != nil {
		t.Fatal(err)
	}
	c.polled = polled
	return c
}

// holder is a client session that takes advisory locks.
type holder struct {
	conn *pgx.Conn
	s    session
}

// connectHolder opens a session on db of srv as the superuser, with
// application_name app, and learns how the collector names it.
func connectHolder(t testing.TB, srv *pgtest.Server, db, app string) *holder {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc, err := pgx.ParseConfig(srv.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	cc.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatalf("connect a holder: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	h := &holder{conn: conn}
	var (
		started pgtype.Timestamptz
		addr    pgtype.Text
		port    pgtype.Int4
	)
	err = conn.QueryRow(ctx, `SELECT pid, backend_start, application_name, host(client_addr), client_port
		FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&h.s.pid, &started, &h.s.app, &addr, &port)
	if err != nil {
		t.Fatal(err)
	}
	h.s.started, h.s.addr, h.s.port = started.Time, addr.String, port.Int32
	return h
}

// name is the holder as the collector records it.
func (h *holder) name() string { return h.s.holder("") }

// exec runs sql on the holder's session.
func (h *holder) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// terminate ends the holder's session from another, as an operator's
// pg_terminate_backend does, and waits until it is gone.
func (h *holder) terminate(t testing.TB, srv *pgtest.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_terminate_backend($1, 30000)`, h.s.pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate pid %d: %v %v", h.s.pid, ok, err)
	}
}
