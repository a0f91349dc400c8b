package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"net/url"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit/postgres/pgtest"
	"github.com/leasewatch/leasewatch/cmd/leasewatch/config"
	"github.com/leasewatch/leasewatch/collectors/postgres"
)

// The demo's PostgreSQL locks: an advisory lock two workers take turns on,
// and ShedLock's table, whose lock two nodes take, extend and release.
const (
	demoPostgresSource = "demo-postgres"
	demoPGDatabase     = "jobs"
	// demoPGAdvisoryKey is the advisory lock's key: the lock jobs/4242.
	demoPGAdvisoryKey = 4242
	// demoShedLockName is the ShedLock lock: shedlock/nightly-report.
	demoShedLockName = "nightly-report"
	// demoShedLockLease is ShedLock's lockAtMostFor: lock_until is set
	// this far ahead at each acquire and extension.
	demoShedLockLease = 10 * time.Second
)

// startDemoPostgres starts a PostgreSQL server, when one is installed, with
// wal_level = logical so that ShedLock's table is streamed, creates the
// demo's database and table, and adds it to cfg's sources: the demo then
// shows PostgreSQL locks too. Without one it returns nil and no error.
func startDemoPostgres(ctx context.Context, cfg *config.Config) (*pgtest.Server, error) {
	srv, err := pgtest.Start(ctx, pgtest.Options{NoFsync: true, Settings: map[string]string{"wal_level": "logical"}})
	switch {
	case errors.Is(err, pgtest.ErrNotInstalled):
		return nil, nil
	case err != nil:
		return nil, err
	}
	if err := createDemoPGDatabase(ctx, srv); err != nil {
		_ = srv.Stop()
		return nil, err
	}
	// The source connects as the superuser, which may read every session
	// and create the publication and the slot; its password is a key of
	// its own, not part of the URL.
	u, err := url.Parse(srv.URL(demoPGDatabase))
	if err != nil {
		_ = srv.Stop()
		return nil, err
	}
	password, _ := u.User.Password()
	u.User = url.User(u.User.Username())
	cfg.Sources = append(cfg.Sources, config.SourceConfig{
		Name: demoPostgresSource, Kind: string(postgres.Backend.Kind), Password: password,
		Backend: &postgres.Section{URL: u.String(), Tables: []postgres.TableEntry{{Preset: "shedlock"}}},
	})
	return srv, nil
}

// createDemoPGDatabase creates the demo's database on srv, with ShedLock's
// table in it.
func createDemoPGDatabase(ctx context.Context, srv *pgtest.Server) error {
	for _, step := range []struct{ database, sql string }{
		{"postgres", "CREATE DATABASE " + demoPGDatabase},
		{demoPGDatabase, postgres.ShedLockTable},
	} {
		conn, err := pgx.Connect(ctx, srv.URL(step.database))
		if err != nil {
			return fmt.Errorf("demo PostgreSQL: %w", err)
		}
		_, err = conn.Exec(ctx, step.sql)
		conn.Close(context.Background())
		if err != nil {
			return fmt.Errorf("demo PostgreSQL: %s: %w", step.sql, err)
		}
	}
	return nil
}

// pgWorkload runs two workers taking turns on the advisory lock and two
// ShedLock nodes contending for the nightly report, each on a session of
// its own named by its application_name.
type pgWorkload struct {
	url string // the demo database's, as the superuser
	log *slog.Logger
}

func (w *pgWorkload) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := 1; i <= 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name, fn := fmt.Sprintf("pg-worker-%d", i), w.advisory
			if i > 2 {
				name, fn = fmt.Sprintf("report-node-%d", i-2), w.shedLock
			}
			for ctx.Err() == nil {
				if err := w.session(ctx, name, fn); err != nil && ctx.Err() == nil {
					w.log.Debug("postgres demo client", "client", name, "err", err)
					sleepCtx(ctx, 500*time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
}

// session connects as application name and runs fn until ctx ends or fn
// fails.
func (w *pgWorkload) session(ctx context.Context, name string, fn func(context.Context, *pgx.Conn, string) error) error {
	cc, err := pgx.ParseConfig(w.url)
	if err != nil {
		return err
	}
	cc.RuntimeParams["application_name"] = name
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for ctx.Err() == nil {
		if err := fn(ctx, conn, name); err != nil {
			return err
		}
	}
	return nil
}

// advisory waits for the advisory lock, holds it for a few seconds and
// unlocks it; the other worker, waiting in the server meanwhile, takes it
// next.
func (w *pgWorkload) advisory(ctx context.Context, conn *pgx.Conn, _ string) error {
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(demoPGAdvisoryKey)); err != nil {
		return err
	}
	sleepCtx(ctx, time.Duration(2000+mathrand.IntN(2000))*time.Millisecond)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", int64(demoPGAdvisoryKey)); err != nil {
		return err
	}
	sleepCtx(ctx, time.Duration(200+mathrand.IntN(300))*time.Millisecond)
	return nil
}

// shedLock takes the nightly report's lock as ShedLock does, extends it
// once or twice (as its KeepAliveLockProvider does) and unlocks it; a node
// that finds it held tries again shortly.
func (w *pgWorkload) shedLock(ctx context.Context, conn *pgx.Conn, node string) error {
	now := time.Now().UTC()
	tag, err := conn.Exec(ctx, postgres.ShedLockAcquire, demoShedLockName, now.Add(demoShedLockLease), now, node)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		sleepCtx(ctx, time.Duration(500+mathrand.IntN(500))*time.Millisecond)
		return nil
	}
	for i := 0; i < 1+mathrand.IntN(2); i++ {
		if !sleepCtx(ctx, 1500*time.Millisecond) {
			return nil
		}
		now = time.Now().UTC()
		if _, err := conn.Exec(ctx, postgres.ShedLockExtend, demoShedLockName, node, now.Add(demoShedLockLease), now); err != nil {
			return err
		}
	}
	sleepCtx(ctx, 500*time.Millisecond)
	if _, err := conn.Exec(ctx, postgres.ShedLockUnlock, demoShedLockName, time.Now().UTC()); err != nil {
		return err
	}
	sleepCtx(ctx, time.Duration(300+mathrand.IntN(700))*time.Millisecond)
	return nil
}
