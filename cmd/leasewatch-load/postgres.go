package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
)

// Defaults of the PostgreSQL scenario: 2,500 ShedLock rows changed every
// 500 ms, 5,000 row changes a second, or 1,000 sessions taking advisory
// locks.
const (
	pgDefaultLocks     = 2500
	pgDefaultRate      = 5000
	pgDefaultRenewals  = 3
	pgDefaultWriters   = 16
	pgLagTarget        = 500 * time.Millisecond
	pgDefaultHoldMin   = time.Second
	pgDefaultHoldMax   = 3 * time.Second
	pgDefaultPollEvery = time.Second
)

// pgLoad is the PostgreSQL scenario. By default, lease-table changes:
// writers run ShedLock's own statements (the upsert that takes a lock,
// the extension, the unlock) on many rows of a shedlock table that
// leasewatch streams through logical replication, each change logged in
// the same transaction in a table of the load's own, and every change
// logged is compared with what leasewatch stored. With advisorySessions,
// advisory locks instead: that many sessions each take and release a key
// of their own, which leasewatch polls from pg_locks.
type pgLoad struct {
	locks    int
	rate     int
	renewals int
	writers  int
	warmup   time.Duration
	duration time.Duration
	target   time.Duration
	drain    time.Duration

	advisorySessions int
	holdMin, holdMax time.Duration
	pollEvery        time.Duration

	leasewatch string
	keep       bool
}

// flags registers the PostgreSQL scenario's flags on fs.
func (k *pgLoad) flags(fs *flag.FlagSet) {
	fs.IntVar(&k.locks, "locks", pgDefaultLocks, "ShedLock rows (lock names)")
	fs.IntVar(&k.rate, "rate", pgDefaultRate, "row changes a second offered, spread over the rows: each row changes every locks/rate")
	fs.IntVar(&k.renewals, "renewals", pgDefaultRenewals, "extensions of each tenure between its grant and its unlock")
	fs.IntVar(&k.writers, "writers", pgDefaultWriters, "writer connections; a row is always written by the same one, so its changes stay in order")
	fs.DurationVar(&k.warmup, "warmup", 10*time.Second, "load before measuring")
	fs.DurationVar(&k.duration, "duration", 30*time.Second, "measured load")
	fs.DurationVar(&k.target, "lag-target", pgLagTarget, "the observation lag p99 the lease-table run must stay under")
	fs.DurationVar(&k.drain, "drain", 2*time.Minute, "the longest the lease-table run waits for leasewatch's backlog after the load stops; what is still unrecorded then counts as missed")
	fs.IntVar(&k.advisorySessions, "advisory-sessions", 0, "instead of the lease table: this many sessions taking and releasing advisory locks, polled from pg_locks")
	fs.DurationVar(&k.holdMin, "hold-min", pgDefaultHoldMin, "with --advisory-sessions: the shortest hold (and pause between holds)")
	fs.DurationVar(&k.holdMax, "hold-max", pgDefaultHoldMax, "with --advisory-sessions: the longest hold (and pause between holds)")
	fs.DurationVar(&k.pollEvery, "poll-every", pgDefaultPollEvery, "the source's poll_every")
	fs.StringVar(&k.leasewatch, "leasewatch", "", "leasewatch binary (default: go build ./cmd/leasewatch)")
	fs.BoolVar(&k.keep, "keep", false, "keep the run's folder (leasewatch's database and config) and say where")
}

func (k *pgLoad) run(ctx context.Context, out, log io.Writer) error {
	if k.advisorySessions > 0 {
		return k.runAdvisory(ctx, out, log)
	}
	return k.runTable(ctx, out, log)
}

// pgRig is a PostgreSQL server of the run's own, with a database for the
// load, and a leasewatch process with a postgres source on it.
type pgRig struct {
	srv      *pgtest.Server
	db       string // the load's database
	lw       *leasewatchProc
	password string
}

// startPGRig starts a server with settings (besides logical WAL and commit
// timestamps), makes the load's database and runs schema in it, then
// starts leasewatch with a source of that database whose keys after url
// and password are source.
func startPGRig(ctx context.Context, bin, dir string, settings map[string]string, schema, source string, log io.Writer) (rig *pgRig, err error) {
	r := &pgRig{}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	all := map[string]string{"wal_level": "logical", "track_commit_timestamp": "on"}
	for name, v := range settings {
		all[name] = v
	}
	// No fsync: what is measured is leasewatch, not this machine's disk
	// under thousands of commits a second.
	if r.srv, err = pgtest.Start(ctx, pgtest.Options{NoFsync: true, Settings: all}); err != nil {
		return nil, err
	}
	if r.db, err = r.srv.CreateDatabase(ctx, "load"); err != nil {
		return nil, err
	}
	if schema != "" {
		if err := r.exec(ctx, schema); err != nil {
			return nil, err
		}
	}
	u, err := url.Parse(r.srv.URL(r.db))
	if err != nil {
		return nil, err
	}
	r.password, _ = u.User.Password()
	u.User = url.User(u.User.Username()) // the password is a key of its own
	fmt.Fprintf(log, "PostgreSQL at %s, data in %s\n", r.srv.Addr, r.srv.DataDir)
	r.lw, err = startLeasewatch(ctx, bin, dir, "", fmt.Sprintf(`  - name: %s
    kind: postgres
    url: %q
    password: %q
%s`, loadSource, u.String(), r.password, source), log)
	if err != nil {
		return nil, err
	}
	if err := waitUp(ctx, r.lw.url, loadSource); err != nil {
		return nil, err
	}
	return r, nil
}

// connect opens a connection to the load's database.
func (r *pgRig) connect(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, r.srv.URL(r.db))
}

// exec runs sql on a connection of its own.
func (r *pgRig) exec(ctx context.Context, sql string) error {
	conn, err := r.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func (r *pgRig) close() {
	if r.lw != nil {
		r.lw.stop()
	}
	if r.srv != nil {
		r.srv.Stop()
	}
}

// backendPid returns the pid of the server process of the connection
// whose application_name is app (the collector's: "leasewatch").
func (r *pgRig) backendPid(ctx context.Context, app string) (int, error) {
	conn, err := r.connect(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var pids []int
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND backend_type = 'client backend'`, app)
	if err != nil {
		return 0, err
	}
	pids, err = pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return 0, err
	}
	if len(pids) != 1 {
		return 0, errors.New("want one connection named " + strconv.Quote(app) + ", found " + strconv.Itoa(len(pids)))
	}
	return pids[0], nil
}
