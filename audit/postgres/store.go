// Package postgres stores leasewatch's audit log in PostgreSQL, through
// github.com/jackc/pgx/v5. It implements the same contract as audit/sqlite:
// audit.Journal, the recorder's write side, audit.Store, the read side,
// audit.Pruner and Size, with the same round trip (times in UTC, durations
// in whole milliseconds, details as decoded JSON); both encode rows through
// audit/internal/rowcodec.
//
// Writes go through a pool of one connection, serialized by the store as
// SQLite's are (the recorder is the one writer); reads through a pool of
// their own, so a long page never holds up a batch. The schema is
// migrations/postgres, applied by Open.
package postgres

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/sqlread"
	"github.com/leasewatch/leasewatch/migrations"
)

var (
	_ audit.Store   = (*Store)(nil)
	_ audit.Journal = (*Store)(nil)
	_ audit.Pruner  = (*Store)(nil)
	_ audit.Sealer  = (*Store)(nil)
)

// Options tune a store. The zero value is the defaults.
type Options struct {
	// ReadConns is the size of the read pool; 0 means 4.
	ReadConns int
	// Password, if set, gives the password of each new connection, in
	// place of the URL's: a password file rotated in place is used from the
	// next connection on.
	Password func() (string, error)
	// TLS, if set, gives the TLS configuration of each new connection,
	// which must then use TLS: the URL's sslmode may not fall back to plain
	// text. An empty ServerName verifies the host connected to.
	TLS func() (*tls.Config, error)
	// ExistingSchema opens a database that already holds leasewatch's
	// whole schema, and applies nothing: for readers such as reports, which
	// must never create tables in a database given by mistake.
	ExistingSchema bool
	// RenewalSpan is the ids one partition of renewals covers: 0 means
	// DefaultRenewalSpan. Retention drops a partition once it has walked
	// past it, so a smaller span returns space sooner, and a larger one
	// keeps fewer partitions for a read to visit. A database keeps the span
	// its partitions were made with.
	RenewalSpan int64
}

// Store is the PostgreSQL audit log. It is safe for concurrent use.
type Store struct {
	reads // Locks, Events, Findings... (sqlread)

	writer *pgxpool.Pool // one connection
	reader *pgxpool.Pool

	// unreplicated is set when the server says it stopped waiting for a
	// synchronous standby to take a commit of the writer's (a cancel: an
	// operator's, or the server shutting down). The commit then holds on the
	// primary alone: see Apply.
	unreplicated atomic.Bool

	mu  sync.Mutex              // serializes writes and guards ids and syncMark
	ids map[audit.LockKey]int64 // lock key → locks.id, for committed rows only
	// syncMark is the newest event id as of the last committed
	// Batch.SyncMark; a restart forgets it, as the recorder forgets its
	// round.
	syncMark syncMark
	// highest is the newest event id given out as of the last committed
	// batch, highestLog the newest renewal_log id, logIDs the log ids
	// reserved and not yet given out, and parts the renewals table's
	// partitions.
	highest, highestLog int64
	logIDs              idBlock
	parts               partitions
	// commitRows is how many commit rows of the renewal log the writer
	// has written and not folded, and marked whether a sync mark has
	// moved since it last looked for synced ones to fold.
	commitRows int
	marked     bool
	// renewalRows writes every renewal as a row, as the previous release
	// did, none into the renewal log: for tests of what sealing and
	// retention do with such a database.
	renewalRows bool
}

// Open connects to the database at url (postgres:// or postgresql://, or a
// pgx key=value string), applies the migrations it has not seen yet and
// returns the store. The database must exist.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	wcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if opts.Password != nil || opts.TLS != nil {
		wcfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error { return opts.configure(&cc.Config) }
	}
	rcfg := wcfg.Copy()
	s := &Store{ids: make(map[audit.LockKey]int64)}
	wcfg.MinConns, wcfg.MaxConns = 1, 1
	wcfg.ConnConfig.OnNotice = s.notice
	rcfg.MaxConns = int32(opts.ReadConns)
	if rcfg.MaxConns <= 0 {
		rcfg.MaxConns = 4
	}
	if s.writer, err = pgxpool.NewWithConfig(ctx, wcfg); err != nil {
		return nil, fmt.Errorf("open write pool: %w", err)
	}
	prepare := s.migrate
	if opts.ExistingSchema {
		prepare = s.checkSchema
	}
	if err := prepare(ctx); err != nil {
		s.writer.Close()
		return nil, storageError(err)
	}
	span := opts.RenewalSpan
	if span <= 0 {
		span = DefaultRenewalSpan
	}
	if s.parts, err = loadPartitions(ctx, s.writer, span); err == nil {
		s.highest, err = highestEventID(ctx, s.writer)
	}
	if err == nil {
		s.highestLog, err = highestLogID(ctx, s.writer)
	}
	if err != nil {
		s.writer.Close()
		return nil, fmt.Errorf("open database: %w", storageError(err))
	}
	if s.reader, err = pgxpool.NewWithConfig(ctx, rcfg); err != nil {
		s.writer.Close()
		return nil, fmt.Errorf("open read pool: %w", err)
	}
	s.reads = reads{Engine: engine(s.reader)}
	return s, nil
}

// notice takes the writer's notices: PostgreSQL warns, and reports the
// commit done, when it stops waiting for a synchronous standby because the
// wait was cancelled (SyncRepWaitForLSN: "The transaction has already
// committed locally, but might not have been replicated to the standby").
func (s *Store) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	if strings.HasPrefix(n.Message, "canceling wait for synchronous replication") {
		s.unreplicated.Store(true)
	}
}

// errUnreplicated is Apply's answer for a commit that the server reported
// done without the synchronous standby's flush it was configured to wait
// for.
var errUnreplicated = audit.Errorf(audit.EUNAVAILABLE,
	"the database server stopped waiting for its synchronous standby: the batch is committed on the primary only, and a failover may lose it")

// configure sets the password and TLS configuration of one new connection.
func (o Options) configure(cc *pgconn.Config) error {
	if o.Password != nil {
		pw, err := o.Password()
		if err != nil {
			return err
		}
		cc.Password = pw
	}
	if o.TLS == nil {
		return nil
	}
	base, err := o.TLS()
	if err != nil {
		return err
	}
	forHost := func(host string) *tls.Config {
		c := base.Clone()
		if c.ServerName == "" {
			c.ServerName = host
		}
		return c
	}
	cc.TLSConfig = forHost(cc.Host)
	var fallbacks []*pgconn.FallbackConfig
	for _, fb := range cc.Fallbacks {
		if fb.TLSConfig != nil { // sslmode prefer and allow also try plain text
			fallbacks = append(fallbacks, &pgconn.FallbackConfig{Host: fb.Host, Port: fb.Port, TLSConfig: forHost(fb.Host)})
		}
	}
	cc.Fallbacks = fallbacks
	return nil
}

// checkSchema fails unless every migration this build has is applied: a
// reader that finds no schema, or an older one, says so instead of failing
// on a missing table or column.
func (s *Store) checkSchema(ctx context.Context) error {
	ms, err := migrations.Load(migrations.Postgres)
	if err != nil {
		return err
	}
	var database string
	var tracked bool
	if err := s.writer.QueryRow(ctx, `SELECT current_database(), to_regclass('schema_migrations') IS NOT NULL`).Scan(&database, &tracked); err != nil {
		return err
	}
	if !tracked {
		return fmt.Errorf("database %s holds no leasewatch schema (no schema_migrations table): run leasewatch serve on it first", database)
	}
	var applied int
	if err := s.writer.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&applied); err != nil {
		return err
	}
	if applied < len(ms) {
		return fmt.Errorf("database %s has %d of the %d leasewatch migrations: run leasewatch serve on it to apply the rest", database, applied, len(ms))
	}
	return nil
}

// migrationLock is the advisory lock key that serializes migrations across
// processes opening the same database ("lwmigr" in ASCII).
const migrationLock = 0x6c776d696772

// migrate applies every migration not yet recorded in schema_migrations,
// each in its own transaction together with its record.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations.Load(migrations.Postgres)
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, s.writer, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    INTEGER PRIMARY KEY,
			name       TEXT    NOT NULL,
			applied_at BIGINT  NOT NULL
		)`)
		return err
	})
	if err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	for _, m := range ms {
		err := pgx.BeginFunc(ctx, s.writer, func(tx pgx.Tx) error {
			// Under the lock, so two processes cannot both apply it.
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM schema_migrations WHERE version = $1`, m.Version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			// No arguments: the simple protocol, which runs every
			// statement of the file.
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
				m.Version, m.Name, time.Now().UnixNano())
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
	}
	return nil
}

// Close closes both pools. The store must not be used afterwards.
func (s *Store) Close() error {
	if s.reader != nil {
		s.reader.Close()
	}
	s.writer.Close()
	return nil
}

// Size returns the bytes the store's tables take, their indexes and TOAST
// included, as of the last committed batch.
func (s *Store) Size(ctx context.Context) (int64, error) {
	var n int64
	err := s.reader.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
		FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
		WHERE ns.nspname = current_schema() AND c.relkind = 'r'`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("database size: %w", storageError(err))
	}
	return n, nil
}

// storageError adds to a failure that the operator can act on, rather than
// a bug, an *audit.Error (EUNAVAILABLE) saying what is wrong, so the
// recorder answers the request with 503 and that message: the server cannot
// be reached or went away, is shutting down or starting, or is out of disk.
// Other errors come back unchanged.
func storageError(err error) error {
	if err == nil {
		return nil
	}
	var msg string
	var pe *pgconn.PgError
	var ne net.Error
	var cv *tls.CertificateVerificationError
	switch {
	case errors.As(err, &cv):
		// A certificate that does not verify is no outage: trying again
		// cannot help, and the operator must see it at once.
		return err
	case errors.As(err, &pe):
		switch {
		case pe.Code == "53100":
			msg = "the database server's disk is full"
		case pe.Code[:2] == "08", pe.Code[:2] == "53", pe.Code[:2] == "57":
			// connection exceptions, insufficient resources, operator
			// intervention (shutdown, restart, cannot connect now)
			msg = "the database server is unavailable (" + pe.Message + ")"
		default:
			return err
		}
	case errors.As(err, &ne), errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), pgconn.SafeToRetry(err), pgconn.Timeout(err):
		// The connection failed or was lost mid-statement.
		msg = "the database server cannot be reached"
	default:
		var ce *pgconn.ConnectError
		if !errors.As(err, &ce) {
			return err
		}
		msg = "the database server cannot be reached"
	}
	return audit.Caused(audit.Errorf(audit.EUNAVAILABLE, "%s", msg), err)
}

// PutVerdicts keeps each lock's verdict (audit.Database).
func (s *Store) PutVerdicts(ctx context.Context, verdicts []audit.LockVerdict) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for chunk := range slices.Chunk(verdicts, sqlread.MaxPutVerdicts) {
		q, args := sqlread.PutVerdicts(dialect, chunk)
		if _, err := s.writer.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("keep verdicts: %w", storageError(err))
		}
	}
	return nil
}
