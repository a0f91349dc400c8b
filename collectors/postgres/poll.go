package postgres

import (
	"context"
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
}

// connect opens the collector's connection with the source's user,
// password and TLS.
func (c *Collector) connect(ctx context.Context) (*pgx.Conn, error) {
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
		if cc.TLSConfig, err = c.cfg.TLS.Get(); err != nil {
			return nil, err
		}
		for _, fb := range cc.Fallbacks {
			fb.TLSConfig = cc.TLSConfig // never fall back to plain text; other hosts keep theirs
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
	return pgx.ConnectConfig(ctx, cc)
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
		if err := rows.Scan(&rd.at, &rd.postmaster, &r.db, &classid, &objid, &r.objsubid, &r.mode, &r.granted, &wait,
			&r.vxid, &r.s.pid, &started, &r.s.app, &addr, &port); err != nil {
			return rd, err
		}
		r.classid, r.objid = uint32(classid), uint32(objid)
		r.waitStart, r.s.started, r.s.addr, r.s.port = wait.Time, started.Time, addr.String, port.Int32
		rd.rows = append(rd.rows, r)
	}
	if err := rows.Err(); err != nil {
		return rd, err
	}
	if rd.at.IsZero() { // no advisory row: the times alone
		err = conn.QueryRow(ctx, `SELECT clock_timestamp(), pg_postmaster_start_time()`).Scan(&rd.at, &rd.postmaster)
	}
	return rd, err
}

// fates reads what became of the sessions of ended holds.
func fates(ctx context.Context, conn *pgx.Conn, ended []*hold) (map[sessionID]fate, error) {
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
