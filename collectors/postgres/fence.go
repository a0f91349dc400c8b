package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
)

// A fenced table is a resource an application writes under a lock's
// fencing token, the token kept in a column of each row and checked by the
// statement itself:
//
//	UPDATE invoices SET amount = $1, fence = $held WHERE id = $2 AND fence <= $held
//
// Streamed with the lease tables, through the same slot, each row an
// INSERT or UPDATE writes is a write the resource accepted under the
// row's new fence: a write report no application code sends, recorded
// with the batch it came in and the stream's cursor, so that a restart
// neither loses nor repeats one. The tracker judges it as any report: a
// token older than the lock's newest grant is an unfenced_write. A write
// the WHERE clause refused changes no row, so the stream never sees it:
// rejected writes are still for POST /api/v1/writes to report. A DELETE
// or a TRUNCATE carries no token and is no write. A polled table could
// not tell a write from no write (a row written twice between two reads,
// or with the same values), so fenced tables are streamed only.

// FenceMapping says how to read the writes of a fenced table.
type FenceMapping struct {
	// Table is the table's name, optionally schema-qualified.
	Table string
	// Key are the columns whose values, joined by "/" after Table and a
	// "/", name the resource a row is (invoices/42); empty: the table
	// alone is the resource.
	Key []string
	// Fence is the integer column holding the token each row was written
	// under; NULL: a write under no token.
	Fence string
	// Lock is the lock every row is written under, named as leasewatch
	// names it in this source (scheduled_tasks/report/1); or LockColumn, a
	// column holding that name (a row whose value is NULL or empty is no
	// lock's write). Exactly one is set.
	Lock       string
	LockColumn string
	// Holder is a column naming who wrote the row; optional.
	Holder string
}

// Check returns the first problem of the mapping, naming its field.
func (m FenceMapping) Check() error {
	if err := checkTableName(m.Table); err != nil {
		return err
	}
	switch {
	case m.Fence == "":
		return errors.New("fence: the column holding the fencing token is required")
	case m.Lock == "" && m.LockColumn == "":
		return errors.New("lock: the lock the table is fenced by is required, or a lock_column naming it")
	case m.Lock != "" && m.LockColumn != "":
		return errors.New("lock, lock_column: at most one of them")
	case m.Lock != "" && !recordedName(m.Lock):
		return fmt.Errorf("lock: %q is no lock name as leasewatch records one: printable, at most %d characters, no surrounding space", m.Lock, audit.MaxText)
	}
	cols := []field{{"fence", m.Fence}, {"lock_column", m.LockColumn}, {"holder", m.Holder}}
	for _, k := range m.Key {
		cols = append(cols, field{"key", k})
	}
	for _, c := range cols {
		if c.name != "" && !identifier.MatchString(c.name) {
			return fmt.Errorf("%s: %q is not a lower-case PostgreSQL column name", c.field, c.name)
		}
	}
	return nil
}

// recordedName reports whether name can be a name as leasewatch records
// one (audit.Text's): valid UTF-8, printable, at most audit.MaxText
// characters; and, given in a configuration, with no space around it.
func recordedName(name string) bool {
	return utf8.ValidString(name) && !strings.ContainsFunc(name, audit.Unprintable) &&
		utf8.RuneCountInString(name) <= audit.MaxText && strings.TrimSpace(name) == name
}

// write decodes the row a change left, written at at, as the write the
// resource accepted; false for a row that names no lock. Its text is
// bounded and escaped as every name leasewatch records; its Source is the
// caller's to set. An error names the column it cannot read.
func (m FenceMapping) write(row Row, at time.Time) (audit.WriteReport, bool, error) {
	token, err := integer(row, m.Fence)
	if err != nil {
		return audit.WriteReport{}, false, err
	}
	lock := m.Lock // as recorded already
	if m.LockColumn != "" {
		if lock, err = text(row, m.LockColumn); err != nil || lock == "" {
			return audit.WriteReport{}, false, err
		}
		lock = audit.Text(lock)
	}
	var holder string
	if m.Holder != "" {
		if holder, err = text(row, m.Holder); err != nil {
			return audit.WriteReport{}, false, err
		}
	}
	parts := []string{m.Table}
	for _, k := range m.Key {
		parts = append(parts, format(row[k]))
	}
	return audit.WriteReport{
		Lock: lock, Resource: audit.Text(strings.Join(parts, "/")), Holder: audit.Text(holder),
		Token: token, Outcome: audit.WriteAccepted, At: at,
	}, true, nil
}

// written adds the write of a change of a fenced table to the transaction
// being received: an INSERT's or UPDATE's new row; a DELETE is none.
func (s *Stream) written(m FenceMapping, c Change) error {
	if c.New == nil {
		return nil
	}
	w, ok, err := m.write(c.New, c.At)
	if err != nil {
		return fmt.Errorf("slot %s: %s: %w", s.name, m.Table, err)
	}
	if ok {
		s.tx.writes = append(s.tx.writes, w)
	}
	return nil
}

// resolveFences finds each fenced table's relation OID, refusing one the
// server cannot publish (UNLOGGED) or whose publication would make the
// application's UPDATEs fail (no replica identity).
func (s *Stream) resolveFences(ctx context.Context, conn *pgx.Conn) error {
	s.fences = make(map[uint32]FenceMapping, len(s.cfg.Fences))
	for _, m := range s.cfg.Fences {
		oid, err := relation(ctx, conn, m.Table)
		if err != nil {
			return err
		}
		var unlogged bool
		if err := conn.QueryRow(ctx, "SELECT relpersistence = 'u' FROM pg_class WHERE oid = $1", oid).Scan(&unlogged); err != nil {
			return fmt.Errorf("table %s: %w", m.Table, err)
		}
		if unlogged {
			return fmt.Errorf("table %s: UNLOGGED, so logical replication cannot publish it, and a polled table cannot tell a write from no write: a fenced table must be a logged table", m.Table)
		}
		if _, _, err := replicaIdentity(ctx, conn, oid, m.Table); err != nil {
			return err
		}
		if _, dup := s.tables[oid]; dup {
			return fmt.Errorf("table %s: both a lease table and a fenced table", m.Table)
		}
		s.fences[oid] = m
	}
	return nil
}

// fence is the entry's fenced table.
func (e TableEntry) fence() (Table, error) {
	if k := e.leaseKey(); k != "" {
		return Table{}, fmt.Errorf("%s: a fenced table takes only table, key, fence, lock or lock_column, and holder", k)
	}
	if e.Poll {
		return Table{}, errors.New("poll: a fenced table is streamed: polling cannot tell a write from no write")
	}
	m := FenceMapping{Table: e.Table, Key: e.Key, Fence: e.Fence, Lock: e.Lock, LockColumn: e.LockColumn, Holder: e.Holder}
	if err := m.Check(); err != nil {
		return Table{}, err
	}
	return Table{Fence: &m}, nil
}

// leaseKey names the first key set that only a lease table's mapping
// takes.
func (e TableEntry) leaseKey() string {
	return e.firstSet("names", "expires", "renewed", "duration", "duration_column", "granted", "token", "held_if",
		"clock", "class")
}

// fenced returns the fenced tables among the source's.
func (c *Collector) fenced() []FenceMapping {
	var fs []FenceMapping
	for _, t := range c.cfg.Tables {
		if t.Fence != nil {
			fs = append(fs, *t.Fence)
		}
	}
	return fs
}

// withWrites puts a stream batch's writes, of source, on the last of its
// inputs, the one that carries the cursor: recorded in its transaction.
func withWrites(ins []audit.Input, source string, writes []audit.WriteReport) {
	if len(writes) == 0 || len(ins) == 0 {
		return
	}
	for i := range writes {
		writes[i].Source = source
	}
	ins[len(ins)-1].Writes = writes
}
