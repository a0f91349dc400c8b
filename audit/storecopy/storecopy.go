// Package storecopy moves the whole audit log from one store to another
// (SQLite to PostgreSQL, back, or to a new database of the same engine),
// table by table, through two interfaces that every store implements: a
// Source that reads a consistent snapshot, and a Target that imports rows.
// The tables and their columns are the stores' one logical schema (Tables);
// a new store implements Source and Target over its own tables and is
// checked by the contract suite (audit/storetest).
//
// A copy is resumable. Each table is copied in key order, in chunks that
// the target commits one by one, so after an interruption the target holds
// a prefix of each table and a run of the same copy goes on after the last
// key it holds: nothing twice, nothing left out. The first run records in
// the target a mark of the source's snapshot (how many rows each table has
// and its last key, and the rows of the small tables that change with every
// batch); a later run resumes only when the source still has that mark, so
// it never mixes two states of a source, and refuses a target that holds
// anything else.
package storecopy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Source is a store a copy reads from.
type Source interface {
	// Snapshot begins a read of the whole store as of one moment: every
	// call on the snapshot sees the same rows, whatever is written
	// meanwhile.
	Snapshot(ctx context.Context) (Snapshot, error)
}

// Snapshot is a consistent read of a Source.
type Snapshot interface {
	// Schema returns the store's tables and the names of their columns.
	Schema(ctx context.Context) (map[string][]string, error)
	// Stat returns how many rows t has and the key of the last in key
	// order (nil when it has none).
	Stat(ctx context.Context, t Table) (rows int64, last []any, err error)
	// Rows returns up to limit rows of t after the key after (from the
	// first when nil), in key order, as Table.Normalize makes them; limit
	// <= 0 means every row.
	Rows(ctx context.Context, t Table, after []any, limit int) ([][]any, error)
	// Close ends the snapshot.
	Close() error
}

// Target is a store a copy writes into.
type Target interface {
	// Schema returns the store's tables and the names of their columns.
	Schema(ctx context.Context) (map[string][]string, error)
	// Stat is Snapshot.Stat of the target's rows as committed.
	Stat(ctx context.Context, t Table) (rows int64, last []any, err error)
	// Mark returns the mark of the copy the target holds, "" if none.
	Mark(ctx context.Context) (string, error)
	// SetMark records mark as the copy the target holds (in MarkTable).
	SetMark(ctx context.Context, mark string) error
	// Import writes rows of t, in key order and after every row of t the
	// target holds, in one transaction: all of them or none. For a Whole
	// table it first deletes the rows the target holds. For an Identity
	// table it moves the id generator past the last row.
	Import(ctx context.Context, t Table, rows [][]any) error
}

// DefaultChunk is how many rows a copy commits at once unless told.
const DefaultChunk = 10000

// Options tune a copy. The zero value is the defaults.
type Options struct {
	// Chunk is how many rows each commit holds; 0 means DefaultChunk.
	Chunk int
	// Progress, if set, is called after every chunk and when a table is
	// done.
	Progress func(Progress)
}

// Progress is how far a copy has got with one table.
type Progress struct {
	Table string
	// Done rows of Total are in the target, Copied of them by this run,
	// in Elapsed since the run began to copy the table.
	Done, Total, Copied int64
	Elapsed             time.Duration
	Finished            bool // the table is done
}

// Result says what a copy did.
type Result struct {
	Resumed bool             // the target held part of this copy already
	Rows    map[string]int64 // rows per table, as verified in the target
}

// ErrTargetNotEmpty is returned (wrapped, naming what is there) when the
// target holds data that is not a copy of this source.
var ErrTargetNotEmpty = errors.New("the target already holds data that is not a copy of this source")

// MismatchError is a copy whose target does not hold as many rows as the
// source in some tables.
type MismatchError struct {
	Tables []TableCount
}

// TableCount is one table's row counts in the source and the target.
type TableCount struct {
	Table          string
	Source, Target int64
}

func (e *MismatchError) Error() string {
	parts := make([]string, len(e.Tables))
	for i, c := range e.Tables {
		parts[i] = fmt.Sprintf("%s: source %d rows, target %d", c.Table, c.Source, c.Target)
	}
	return "row counts differ after the copy: " + strings.Join(parts, "; ")
}

// Copy copies every table of src into dst, or resumes a copy that an
// earlier run left unfinished, and then verifies the row counts of every
// table: a *MismatchError names the tables that differ. When ctx is done it
// stops after the last committed chunk; running it again goes on from there.
// It is Prepare and Plan.Run.
func Copy(ctx context.Context, src Source, dst Target, opts Options) (Result, error) {
	p, err := Prepare(ctx, src)
	if err != nil {
		return Result{}, err
	}
	defer p.Close()
	return p.Run(ctx, dst, opts)
}

// Plan is a copy whose source has been read and checked, and whose target
// is not written to yet: everything that refuses a copy for its source has
// been said, and CheckTarget says what refuses it for its target, so that a
// refused copy leaves its target as it was.
type Plan struct {
	snap   Snapshot
	totals map[string]int64 // rows per table in the source
	mark   string
}

// Prepare begins a copy of src: it takes the snapshot the copy reads,
// checks its schema and reads its mark. Close the plan when done.
func Prepare(ctx context.Context, src Source) (*Plan, error) {
	snap, err := src.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the source: %w", err)
	}
	if err := checkSchema(ctx, "source", snap); err != nil {
		snap.Close()
		return nil, err
	}
	totals, mark, err := markOf(ctx, snap)
	if err != nil {
		snap.Close()
		return nil, err
	}
	return &Plan{snap: snap, totals: totals, mark: mark}, nil
}

// Close ends the plan's snapshot of the source.
func (p *Plan) Close() error { return p.snap.Close() }

// CheckTarget refuses the target of this copy before anything is written to
// it, read through target, a snapshot of it as it is, opened without
// creating or migrating anything: a database that holds tables leasewatch
// does not keep, rows of another database, or (part of) a copy of another
// one. A database with no tables is a new target; one that holds part of
// this copy is resumed (true).
func (p *Plan) CheckTarget(ctx context.Context, target Snapshot) (bool, error) {
	have, err := target.Schema(ctx)
	if err != nil {
		return false, fmt.Errorf("read the target's schema: %w", err)
	}
	known := slices.Concat(Ignored, Converted)
	for _, t := range Tables {
		known = append(known, t.Name)
	}
	for _, name := range slices.Sorted(maps.Keys(have)) {
		if !slices.Contains(known, name) {
			return false, fmt.Errorf("%w: its table %s is not one of leasewatch's; copy into a new, empty database", ErrTargetNotEmpty, name)
		}
	}
	var mark string
	if _, ok := have[MarkTable]; ok {
		rows, err := target.Rows(ctx, markTable, nil, 0)
		if err != nil {
			return false, fmt.Errorf("read the target's copy mark: %w", err)
		}
		if len(rows) > 0 {
			mark, _ = rows[0][1].(string)
		}
	}
	return p.compare(ctx, mark, target, func(name string) bool { _, ok := have[name]; return ok })
}

// markTable is MarkTable as Snapshot.Rows reads it.
var markTable = Table{Name: MarkTable, Key: 1, Columns: []Column{col("id", Int, false), col("mark", Text, false)}}

// Run copies the plan's source into dst, which CheckTarget may have passed:
// it migrates nothing, and refuses dst as CheckTarget does, in case
// something wrote to it since.
func (p *Plan) Run(ctx context.Context, dst Target, opts Options) (Result, error) {
	chunk := opts.Chunk
	if chunk <= 0 {
		chunk = DefaultChunk
	}
	if err := checkSchema(ctx, "target", dst); err != nil {
		return Result{}, err
	}
	res := Result{Rows: make(map[string]int64)}
	var err error
	if res.Resumed, err = claim(ctx, dst, p); err != nil {
		return Result{}, err
	}
	for _, t := range Tables {
		if err := copyTable(ctx, p.snap, dst, t, p.totals[t.Name], chunk, opts.Progress); err != nil {
			return res, err
		}
	}
	var bad MismatchError
	for _, t := range Tables {
		n, _, err := dst.Stat(ctx, t)
		if err != nil {
			return res, fmt.Errorf("verify %s: %w", t.Name, err)
		}
		res.Rows[t.Name] = n
		if n != p.totals[t.Name] {
			bad.Tables = append(bad.Tables, TableCount{Table: t.Name, Source: p.totals[t.Name], Target: n})
		}
	}
	if len(bad.Tables) > 0 {
		return res, &bad
	}
	return res, nil
}

// schemaOf is what Schema reads: a Snapshot or a Target.
type schemaOf interface {
	Schema(ctx context.Context) (map[string][]string, error)
}

// checkSchema fails unless the store has exactly the tables and columns of
// Tables (besides Ignored): a database of an older version, not yet
// migrated, or a schema that has gained a table this copy does not know.
func checkSchema(ctx context.Context, side string, s schemaOf) error {
	have, err := s.Schema(ctx)
	if err != nil {
		return fmt.Errorf("read the %s's schema: %w", side, err)
	}
	for _, name := range slices.Concat(Ignored, Converted) {
		delete(have, name)
	}
	var diffs []string
	for _, t := range Tables {
		cols, ok := have[t.Name]
		if !ok {
			diffs = append(diffs, "no table "+t.Name)
			continue
		}
		delete(have, t.Name)
		want := make([]string, len(t.Columns))
		for i, c := range t.Columns {
			want[i] = c.Name
		}
		slices.Sort(want)
		cols = slices.Sorted(slices.Values(cols))
		if !slices.Equal(cols, want) {
			diffs = append(diffs, fmt.Sprintf("table %s has columns (%s), want (%s)", t.Name,
				strings.Join(cols, ", "), strings.Join(want, ", ")))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(have)) {
		diffs = append(diffs, "table "+name+" is not one this version copies")
	}
	if len(diffs) > 0 {
		return fmt.Errorf("the %s's schema is not this version's (open it once with this version's leasewatch serve to migrate it): %s",
			side, strings.Join(diffs, "; "))
	}
	return nil
}

// markOf returns the source's row count per table and the mark of its
// snapshot: a digest of every table's count and last key and of the rows of
// the Mark tables.
func markOf(ctx context.Context, snap Snapshot) (map[string]int64, string, error) {
	type tableMark struct {
		Table string  `json:"table"`
		Rows  int64   `json:"rows"`
		Last  []any   `json:"last"`
		All   [][]any `json:"all,omitempty"`
	}
	totals := make(map[string]int64)
	var marks []tableMark
	for _, t := range Tables {
		n, last, err := snap.Stat(ctx, t)
		if err != nil {
			return nil, "", fmt.Errorf("read the source's %s: %w", t.Name, err)
		}
		totals[t.Name] = n
		m := tableMark{Table: t.Name, Rows: n, Last: last}
		if t.Mark {
			if m.All, err = snap.Rows(ctx, t, nil, 0); err != nil {
				return nil, "", fmt.Errorf("read the source's %s: %w", t.Name, err)
			}
		}
		marks = append(marks, m)
	}
	b, err := json.Marshal(marks)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(b)
	return totals, "sha256:" + hex.EncodeToString(sum[:]), nil
}

// claim makes dst the target of the copy p: it reports true if dst already
// is (a resume), records the mark in an empty dst, and refuses a dst that
// holds anything else.
func claim(ctx context.Context, dst Target, p *Plan) (bool, error) {
	have, err := dst.Mark(ctx)
	if err != nil {
		return false, fmt.Errorf("read the target's copy mark: %w", err)
	}
	resumed, err := p.compare(ctx, have, dst, func(string) bool { return true })
	if err != nil || resumed {
		return resumed, err
	}
	if err := dst.SetMark(ctx, p.mark); err != nil {
		return false, fmt.Errorf("record the copy in the target: %w", err)
	}
	return false, nil
}

// compare reports whether a target holding the copy mark have is this
// copy's (true), may become it (false), or holds something else (an
// error): the mark of another copy, or rows in a table that has (of
// Tables, but those copied whole: a new database has the journal's row).
func (p *Plan) compare(ctx context.Context, have string, target interface {
	Stat(ctx context.Context, t Table) (int64, []any, error)
}, has func(table string) bool) (bool, error) {
	switch {
	case have == p.mark:
		return true, nil
	case have != "":
		return false, fmt.Errorf("%w: it holds (part of) a copy of another database, or of this one before it "+
			"changed (was it copied while a service wrote to it?); copy into a new, empty database", ErrTargetNotEmpty)
	}
	for _, t := range Tables {
		if t.Whole || !has(t.Name) {
			continue
		}
		n, _, err := target.Stat(ctx, t)
		if err != nil {
			return false, fmt.Errorf("read the target's %s: %w", t.Name, err)
		}
		if n > 0 {
			return false, fmt.Errorf("%w: its table %s has %d rows; copy into a new, empty database", ErrTargetNotEmpty, t.Name, n)
		}
	}
	return false, nil
}

// copyTable copies the rows of t that dst does not hold yet, chunk by
// chunk, after the last key it holds.
func copyTable(ctx context.Context, snap Snapshot, dst Target, t Table, total int64, chunk int, progress func(Progress)) error {
	start := time.Now()
	report := func(p Progress) {
		if progress != nil {
			p.Table, p.Total, p.Elapsed = t.Name, total, time.Since(start)
			progress(p)
		}
	}
	if t.Whole {
		rows, err := snap.Rows(ctx, t, nil, 0)
		if err != nil {
			return fmt.Errorf("read the source's %s: %w", t.Name, err)
		}
		if err := dst.Import(ctx, t, rows); err != nil {
			return fmt.Errorf("write %s: %w", t.Name, err)
		}
		report(Progress{Done: int64(len(rows)), Copied: int64(len(rows)), Finished: true})
		return nil
	}
	done, after, err := dst.Stat(ctx, t)
	if err != nil {
		return fmt.Errorf("read the target's %s: %w", t.Name, err)
	}
	var copied int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		rows, err := snap.Rows(ctx, t, after, chunk)
		if err != nil {
			return fmt.Errorf("read the source's %s: %w", t.Name, err)
		}
		if len(rows) == 0 {
			break
		}
		if err := dst.Import(ctx, t, rows); err != nil {
			return fmt.Errorf("write %s after key %v: %w", t.Name, after, err)
		}
		done += int64(len(rows))
		copied += int64(len(rows))
		after = t.KeyOf(rows[len(rows)-1])
		if len(rows) < chunk {
			break
		}
		report(Progress{Done: done, Copied: copied})
	}
	report(Progress{Done: done, Copied: copied, Finished: true})
	return nil
}
