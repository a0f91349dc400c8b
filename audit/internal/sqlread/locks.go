package sqlread

import (
	"context"
	"fmt"
	"slices"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/internal/rowcodec"
)

// Locks returns the locks that match f in f.Sort's order. Q matches a
// substring of the name or holder, ignoring the case of ASCII letters
// (Dialect.Like). After and Before continue from a lock's position in that
// order; a cursor lock that does not exist is EINVALID.
func (r *Reader) Locks(ctx context.Context, f audit.LockFilter) ([]audit.Lock, error) {
	if !f.Sort.Valid() {
		return nil, audit.Errorf(audit.EINVALID, "sort: unknown order %q", f.Sort)
	}
	tx, end, err := r.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("list locks: %w", r.wrap(err))
	}
	defer end()

	w := rowcodec.LockWhere(f, r.Dialect)
	order, reverse, err := r.lockCursors(ctx, tx, &w, f)
	if err != nil {
		return nil, err
	}
	lim := w.Arg(rowcodec.Limit(f.Limit, audit.DefaultLockLimit, audit.MaxLockLimit))
	off := w.Arg(max(f.Offset, 0))
	// The page's ids come from an index alone (every filter and order has a
	// covering one); only the page's rows are then read, so filters never
	// drag whole lock rows, tracker state included, through the scan.
	locks, err := query(ctx, r, tx, "list locks", rowcodec.LockDest, `SELECT `+LockColumns+` FROM locks l WHERE l.id IN (
		SELECT l.id FROM locks l`+w.String()+` ORDER BY `+order+` LIMIT `+lim+` OFFSET `+off+`)
		ORDER BY `+order, w.Args...)
	if err != nil {
		return nil, err
	}
	if reverse {
		slices.Reverse(locks)
	}
	return locks, nil
}

// lockCursors adds the conditions of f's After and Before cursors to w and
// returns the order to read in, and whether the rows read must be reversed
// (a page before a cursor is read backwards from it).
func (r *Reader) lockCursors(ctx context.Context, tx DB, w *rowcodec.Where, f audit.LockFilter) (order string, reverse bool, err error) {
	// Each order is a unique key, so a keyset cursor never skips or repeats
	// a lock with the same sort value.
	var keyCols, fwdOrder, backOrder string
	switch f.Sort {
	case audit.SortChanged:
		keyCols, fwdOrder, backOrder = "l.changed_at, l.id", "l.changed_at DESC, l.id DESC", "l.changed_at, l.id"
	case audit.SortExpiry:
		keyCols, fwdOrder, backOrder = "l.expires_at, l.id", "l.expires_at, l.id", "l.expires_at DESC, l.id DESC"
	default:
		keyCols, fwdOrder, backOrder = "l.source, l.name", "l.source, l.name", "l.source DESC, l.name DESC"
	}
	// "Forward" is the list's own order; changed sorts newest first, so its
	// forward comparison is "less than".
	fwd, back := ">", "<"
	if f.Sort == audit.SortChanged {
		fwd, back = "<", ">"
	}
	order = fwdOrder
	for _, c := range []struct {
		id  int64
		op  string
		rev bool
	}{{f.After, fwd, false}, {f.Before, back, true}} {
		if c.id == 0 {
			continue
		}
		var src, name string
		var changed, expires int64
		err := tx.QueryRow(ctx, `SELECT source, name, changed_at, expires_at FROM locks WHERE id = `+r.Dialect.P(1), c.id).
			Scan(&src, &name, &changed, &expires)
		if r.noRows(err) {
			return "", false, audit.Errorf(audit.EINVALID, "cursor: lock %d does not exist", c.id)
		}
		if err != nil {
			return "", false, fmt.Errorf("list locks: cursor: %w", r.wrap(err))
		}
		text := r.Dialect.Text
		switch f.Sort {
		case audit.SortChanged:
			w.Add("("+keyCols+") "+c.op+" (?, ?)", changed, c.id)
		case audit.SortExpiry:
			w.Add("("+keyCols+") "+c.op+" (?, ?)", expires, c.id)
		default:
			w.Add("("+keyCols+") "+c.op+" (?"+text+", ?"+text+")", src, name)
		}
		if c.rev {
			order, reverse = backOrder, true
		}
	}
	return order, reverse, nil
}

// CountLocks returns how many locks match f's selection. With a Limit it
// stops counting there: a result equal to Limit means at least that many.
func (r *Reader) CountLocks(ctx context.Context, f audit.LockFilter) (int, error) {
	w := rowcodec.LockWhere(f, r.Dialect)
	q := `SELECT count(*) FROM locks l` + w.String()
	if f.Limit > 0 {
		q = `SELECT count(*) FROM (SELECT 1 FROM locks l` + w.String() + ` LIMIT ` + w.Arg(f.Limit) + `) n`
	}
	var n int
	if err := r.Pool.QueryRow(ctx, q, w.Args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count locks: %w", r.wrap(err))
	}
	return n, nil
}

// Lock returns one lock. Returns ENOTFOUND if it does not exist.
func (r *Reader) Lock(ctx context.Context, id int64) (audit.Lock, error) {
	var l audit.Lock
	err := r.Pool.QueryRow(ctx, `SELECT `+LockColumns+` FROM locks l WHERE l.id = `+r.Dialect.P(1), id).Scan(rowcodec.LockDest(&l)...)
	if r.noRows(err) {
		return audit.Lock{}, audit.Errorf(audit.ENOTFOUND, "lock %d not found", id)
	}
	if err != nil {
		return audit.Lock{}, fmt.Errorf("get lock %d: %w", id, r.wrap(err))
	}
	return l, nil
}

// LockByKey returns one lock by source and name. Returns ENOTFOUND if it does
// not exist.
func (r *Reader) LockByKey(ctx context.Context, key audit.LockKey) (audit.Lock, error) {
	var l audit.Lock
	err := r.Pool.QueryRow(ctx, `SELECT `+LockColumns+` FROM locks l WHERE l.source = `+r.Dialect.P(1)+` AND l.name = `+r.Dialect.P(2),
		key.Source, key.Name).Scan(rowcodec.LockDest(&l)...)
	if r.noRows(err) {
		return audit.Lock{}, audit.Errorf(audit.ENOTFOUND, "lock %s not found", key)
	}
	if err != nil {
		return audit.Lock{}, fmt.Errorf("get lock %s: %w", key, r.wrap(err))
	}
	return l, nil
}
