package sqlread

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasewatch/leasewatch/audit/storecopy"
)

// CopyReads are the reads of a leasewatch copy source (storecopy.Snapshot
// but Close) on one DB: a snapshot's transaction, or the read pool for the
// store's own Schema and Stat.
type CopyReads struct {
	DB DB
	// Numbered says the engine writes $n placeholders.
	Numbered bool
	// Catalog is the query whose rows are (table, column) for every
	// column of every table of leasewatch's schema.
	Catalog string
	// Wrap is Engine.Wrap.
	Wrap func(error) error
}

func (c CopyReads) wrap(err error) error {
	if c.Wrap == nil || err == nil {
		return err
	}
	return c.Wrap(err)
}

// Schema returns every table and its columns.
func (c CopyReads) Schema(ctx context.Context) (map[string][]string, error) {
	rows, err := c.DB.Query(ctx, c.Catalog)
	if err != nil {
		return nil, c.wrap(err)
	}
	defer rows.Close()
	out := make(map[string][]string)
	for rows.Next() {
		var table, column string
		if err := rows.Scan(&table, &column); err != nil {
			return nil, err
		}
		out[table] = append(out[table], column)
	}
	return out, c.wrap(rows.Err())
}

// Stat counts t's rows and reads its last key.
func (c CopyReads) Stat(ctx context.Context, t storecopy.Table) (int64, []any, error) {
	var n int64
	if err := c.DB.QueryRow(ctx, `SELECT count(*) FROM `+t.Name).Scan(&n); err != nil {
		return 0, nil, c.wrap(err)
	}
	if n == 0 {
		return 0, nil, nil
	}
	rows, err := c.DB.Query(ctx, t.SelectLast())
	if err != nil {
		return 0, nil, c.wrap(err)
	}
	defer rows.Close()
	if !rows.Next() {
		return 0, nil, c.wrap(errors.Join(rows.Err(), fmt.Errorf("%s: no last row of %d", t.Name, n)))
	}
	key, err := values(rows, t.Key)
	if err != nil {
		return 0, nil, err
	}
	if err := t.NormalizeKey(key); err != nil {
		return 0, nil, err
	}
	return n, key, nil
}

// Rows returns up to limit rows of t (every row for 0) after the key after
// (from the first for nil), in key order.
func (c CopyReads) Rows(ctx context.Context, t storecopy.Table, after []any, limit int) ([][]any, error) {
	args := append([]any(nil), after...)
	if limit > 0 {
		args = append(args, limit)
	}
	rows, err := c.DB.Query(ctx, t.Select(c.Numbered, after != nil, limit > 0), args...)
	if err != nil {
		return nil, c.wrap(err)
	}
	defer rows.Close()
	var out [][]any
	for rows.Next() {
		row, err := values(rows, len(t.Columns))
		if err != nil {
			return nil, err
		}
		if err := t.Normalize(row); err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, c.wrap(rows.Err())
}

// values scans the row's n columns as the driver gives them.
func values(rows Rows, n int) ([]any, error) {
	row := make([]any, n)
	ptrs := make([]any, n)
	for i := range row {
		ptrs[i] = &row[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	return row, nil
}
