package postgres

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// pollQuery reads every advisory row of the watched databases ($1: their
// names, NULL for all) with its process's session. A prepared
// transaction's row has no pid and no session. pg_locks is readable by any
// user; the session columns of other users' sessions need
// pg_read_all_stats, and are NULL without it.
const pollQuery = `
SELECT clock_timestamp(), pg_postmaster_start_time(), d.datname,
       l.classid::int8, l.objid::int8, l.objsubid, l.mode, l.granted, l.waitstart, l.virtualtransaction,
       coalesce(l.pid, 0), a.backend_start, coalesce(a.application_name, ''), host(a.client_addr), a.client_port
FROM pg_locks l
JOIN pg_database d ON d.oid = l.database
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND ($1::text[] IS NULL OR d.datname = ANY($1::text[]))`

// endsQuery reads the server's clock and start, and per watched database
// ($1, NULL for all) how many sessions have ended abnormally: their client
// lost (abandoned), a fatal error, or terminated (killed). A client that
// closes its session counts in none (PostgreSQL 14 and later).
const endsQuery = `
SELECT clock_timestamp(), pg_postmaster_start_time(), datname,
       sessions_abandoned + sessions_fatal + sessions_killed
FROM pg_stat_database WHERE datname IS NOT NULL AND ($1::text[] IS NULL OR datname = ANY($1::text[]))`

// fateQuery reads the sessions of $1 (pids) that still exist, with the
// transaction each is in now ("" in none): its own virtualxid lock.
const fateQuery = `
SELECT a.pid, a.backend_start,
       coalesce((SELECT l.virtualxid FROM pg_locks l WHERE l.locktype = 'virtualxid' AND l.pid = a.pid LIMIT 1), '')
FROM pg_stat_activity a WHERE a.pid = ANY($1::int4[])`

// reading is one poll's result.
type reading struct {
	at, postmaster time.Time
	rows           []row
	abnormal       map[string]int64 // abnormal session ends by database, as endsQuery reads them
}

// connect opens the collector's connection with the source's user,
// password and TLS, within the poll deadline: a server that accepts and
// then stops answering is a failed attempt, not a hung collector.
func (c *Collector) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.deadline)
	defer cancel()
	cc, err := c.connConfig()
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, err
	}
	if err := checkVersion(ctx, conn); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	return conn, nil
}

// connConfig is the url with the source's user, password and TLS: how the
// polls and the lease tables' stream connect.
func (c *Collector) connConfig() (*pgx.ConnConfig, error) {
	cc, err := pgx.ParseConfig(c.cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	if c.cfg.Username != "" {
		cc.User = c.cfg.Username
	}
	if !c.cfg.Password.IsZero() {
		if cc.Password, err = c.cfg.Password.Get(); err != nil {
			return nil, err
		}
	}
	if c.cfg.TLS != nil {
		tc, err := c.cfg.TLS.Get()
		if err != nil {
			return nil, err
		}
		// Every host of the url, the fallbacks' included, over TLS: never
		// plain text, as sslmode=prefer would fall back to.
		cc.TLSConfig = forHost(tc, cc.Host)
		for _, fb := range cc.Fallbacks {
			fb.TLSConfig = forHost(tc, fb.Host)
		}
	}
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		cc.RuntimeParams["application_name"] = applicationName
	}
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = 10 * time.Second
	}
	// The simple protocol: no statement is prepared, so a pooler in
	// transaction mode between leasewatch and the server does no harm.
	cc.DefaultQueryExecMode = pgx.QueryExecModeExec
	return cc, nil
}

// minVersion is the oldest server the polls read: pg_locks.waitstart and
// pg_stat_database's session counts came in PostgreSQL 14.
const minVersion = 140000

func checkVersion(ctx context.Context, conn *pgx.Conn) error {
	var v int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		return err
	}
	if v < minVersion {
		return fmt.Errorf("PostgreSQL %d.%d is older than 14, whose pg_locks and pg_stat_database the collector reads", v/10000, v%10000/100)
	}
	return nil
}

// forHost returns tc naming host as the server to verify, unless it names
// one already.
func forHost(tc *tls.Config, host string) *tls.Config {
	if tc == nil || tc.ServerName != "" {
		return tc
	}
	tc = tc.Clone()
	tc.ServerName = host
	return tc
}

// databases is the poll's $1: the configured databases, the URL's when
// none, NULL for all.
func (c *Collector) databases(conn *pgx.Conn) []string {
	switch {
	case len(c.cfg.Databases) == 1 && c.cfg.Databases[0] == AllDatabases:
		return nil
	case len(c.cfg.Databases) > 0:
		return c.cfg.Databases
	}
	return []string{conn.Config().Database}
}

// readLocks polls pg_locks once.
func readLocks(ctx context.Context, conn *pgx.Conn, dbs []string) (reading, error) {
	var rd reading
	var err error
	if rd.at, rd.postmaster, rd.abnormal, err = readEnds(ctx, conn, dbs); err != nil {
		return rd, err
	}
	rows, err := conn.Query(ctx, pollQuery, dbs)
	if err != nil {
		return rd, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			r              row
			classid, objid int64
			wait, started  pgtype.Timestamptz
			addr           pgtype.Text
			port           pgtype.Int4
		)
		if err := rows.Scan(&rd.at, nil, &r.db, &classid, &objid, &r.objsubid, &r.mode, &r.granted, &wait,
			&r.vxid, &r.s.pid, &started, &r.s.app, &addr, &port); err != nil {
			return rd, err
		}
		r.classid, r.objid = uint32(classid), uint32(objid)
		r.waitStart, r.s.started, r.s.addr, r.s.port = wait.Time, started.Time, addr.String, port.Int32
		rd.rows = append(rd.rows, r)
	}
	return rd, rows.Err()
}

// readEnds runs endsQuery.
func readEnds(ctx context.Context, conn *pgx.Conn, dbs []string) (at, postmaster time.Time, abnormal map[string]int64, err error) {
	rows, err := conn.Query(ctx, endsQuery, dbs)
	if err != nil {
		return at, postmaster, nil, err
	}
	defer rows.Close()
	abnormal = make(map[string]int64)
	for rows.Next() {
		var (
			db string
			n  int64
		)
		if err := rows.Scan(&at, &postmaster, &db, &n); err != nil {
			return at, postmaster, nil, err
		}
		abnormal[db] = n
	}
	if err := rows.Err(); err != nil {
		return at, postmaster, nil, err
	}
	if at.IsZero() { // none of the databases exists (yet)
		err = conn.QueryRow(ctx, `SELECT clock_timestamp(), pg_postmaster_start_time()`).Scan(&at, &postmaster)
	}
	return at, postmaster, abnormal, err
}

// fates reads what became of the sessions of ended holds: which live on,
// and, for the others, how many sessions of each watched database have
// ended abnormally by now (read after the sessions, so that it counts
// theirs: a backend counts its end before it leaves pg_stat_activity).
func fates(ctx context.Context, conn *pgx.Conn, ended []*hold, dbs []string) (map[sessionID]fate, map[string]int64, error) {
	out, err := liveSessions(ctx, conn, ended)
	if err != nil {
		return nil, nil, err
	}
	_, _, abnormal, err := readEnds(ctx, conn, dbs)
	return out, abnormal, err
}

// liveSessions reads which sessions of ended holds are still there.
func liveSessions(ctx context.Context, conn *pgx.Conn, ended []*hold) (map[sessionID]fate, error) {
	var pids []int32
	for _, h := range ended {
		if h.s.pid != 0 {
			pids = append(pids, h.s.pid)
		}
	}
	out := make(map[sessionID]fate, len(pids))
	if len(pids) == 0 {
		return out, nil
	}
	rows, err := conn.Query(ctx, fateQuery, pids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			s       session
			started pgtype.Timestamptz
			vxid    string
		)
		if err := rows.Scan(&s.pid, &started, &vxid); err != nil {
			return nil, err
		}
		s.started = started.Time
		out[s.id()] = fate{alive: true, vxid: vxid}
	}
	return out, rows.Err()
}
