package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
)

// Polling a lease table. A table the server cannot publish (River's
// river_leader is UNLOGGED) is read whole every interval, and each read is
// compared with the one before into the Changes a stream would have
// given, so that Rows decodes both alike. What a read cannot show:
//
//   - a tenure that begins and ends between two reads (shorter than the
//     interval, or a handover to B and back to A within it) is never seen;
//     with a Granted column (River's elected_at) A's return is still seen as
//     a new tenure of A;
//   - renewals: only the last of an interval is seen, at the read's time;
//   - the order of changes within an interval, and their commit times: a
//     change is dated by the read that shows it.
//
// And no commit LSN: there is none to read for a row. The token is the
// mapping's Token column where it has one; otherwise the lock is unfenced.
// The row's xmin is no substitute: a transaction ID is assigned at the
// transaction's first write, not at its commit, so a transaction that
// started earlier can update the row after a later one has (its xmin is
// then lower; TestXminIsNoToken shows it), and it wraps around after 2^32
// transactions. A holder cannot check either against a resource anyway.

// DB is what the poller needs of a connection or a pool (*pgx.Conn,
// *pgxpool.Pool).
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Poller reads one table every interval and turns what changed since the
// read before into observations.
type Poller struct {
	rows     *Rows
	query    string
	columns  []string
	interval time.Duration
	last     map[string]Row // the last read, by key; nil before the first
}

// Batch is what one read showed.
type Batch struct {
	// Observations are the changes since the read before, in key order.
	Observations []audit.Observation
	// At is the time of the read on the database's clock: every change
	// committed before it is in this batch or an earlier one.
	At time.Time
	// Snapshot says this was the first read: its observations are every
	// row held then (observed, not granted).
	Snapshot bool
}

// NewPoller returns a poller of the table m maps, read every interval.
func NewPoller(m TableMapping, interval time.Duration) (*Poller, error) {
	if interval <= 0 {
		return nil, fmt.Errorf("interval: %s is not positive", interval)
	}
	rows, err := NewRows(m)
	if err != nil {
		return nil, err
	}
	cols := m.Columns()
	return &Poller{rows: rows, query: selectQuery(m, cols), columns: cols, interval: interval}, nil
}

// selectQuery reads cols from m's table.
func selectQuery(m TableMapping, cols []string) string {
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = pgx.Identifier{c}.Sanitize()
	}
	schema, table := m.schemaTable()
	name := pgx.Identifier{table}
	if schema != "" {
		name = pgx.Identifier{schema, table}
	}
	return fmt.Sprintf("SELECT %s FROM %s", strings.Join(quoted, ", "), name.Sanitize())
}

// Run polls every interval until ctx ends, handing each read's batch to
// emit, with no change too: its At vouches that the table was read then.
// It returns the first error of a read or of emit; the rows read so far
// stay, so a Run again diffs against them (the caller records the time in
// between as blind).
func (p *Poller) Run(ctx context.Context, db DB, emit func(context.Context, Batch) error) error {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		b, err := p.Poll(ctx, db)
		if err != nil {
			return err
		}
		if err := emit(ctx, b); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Poll reads the table once and returns what changed since the last read.
// A read that fails, or a row it cannot decode, changes nothing.
func (p *Poller) Poll(ctx context.Context, db DB) (Batch, error) {
	next, at, err := p.read(ctx, db)
	if err != nil {
		return Batch{}, err
	}
	b := Batch{At: at, Snapshot: p.last == nil}
	changes := diff(p.last, next, at)
	// Decode into a copy first, so that a row it cannot read leaves the
	// decoding as it was.
	trial := p.rows.clone()
	for _, c := range changes {
		c.Snapshot = b.Snapshot
		obs, err := trial.Apply(c)
		if err != nil {
			return Batch{}, fmt.Errorf("read %s: %w", p.rows.m.Table, err)
		}
		b.Observations = append(b.Observations, obs...)
	}
	p.rows, p.last = trial, next
	return b, nil
}

// read reads every row in one read-only snapshot, and the server's time
// of that snapshot.
func (p *Poller) read(ctx context.Context, db DB) (map[string]Row, time.Time, error) {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read %s: %w", p.rows.m.Table, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// The first statement takes the snapshot, at its statement time.
	var at time.Time
	if err := tx.QueryRow(ctx, "SELECT statement_timestamp()").Scan(&at); err != nil {
		return nil, time.Time{}, fmt.Errorf("read %s: %w", p.rows.m.Table, err)
	}
	out, err := readRows(ctx, tx, p.rows, p.query, p.columns)
	if err != nil {
		return nil, time.Time{}, err
	}
	return out, at.UTC(), nil
}

// readRows reads every row of the table rows decodes with query, which
// selects columns, by key.
func readRows(ctx context.Context, tx pgx.Tx, rows *Rows, query string, columns []string) (map[string]Row, error) {
	rs, err := tx.Query(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", rows.m.Table, err)
	}
	defer rs.Close()
	out := make(map[string]Row)
	for rs.Next() {
		vals, err := rs.Values()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", rows.m.Table, err)
		}
		row := make(Row, len(vals))
		for i, c := range columns {
			row[c] = vals[i]
		}
		out[rows.key(row)] = row
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", rows.m.Table, err)
	}
	return out, nil
}

// diff returns the changes from the read prev to the read next, made at
// at: rows gone, then rows new or changed, each in key order.
func diff(prev, next map[string]Row, at time.Time) []Change {
	var out []Change
	for _, k := range slices.Sorted(maps.Keys(prev)) {
		if _, ok := next[k]; !ok {
			out = append(out, Change{Old: prev[k], At: at})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(next)) {
		old, ok := prev[k]
		if ok && sameRow(old, next[k]) {
			continue
		}
		out = append(out, Change{Old: old, New: next[k], At: at})
	}
	return out
}

// sameRow reports whether two reads of a row have the same values.
func sameRow(a, b Row) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || fmt.Sprintf("%T", normal(v)) != fmt.Sprintf("%T", normal(w)) || format(v) != format(w) {
			return false
		}
	}
	return true
}
