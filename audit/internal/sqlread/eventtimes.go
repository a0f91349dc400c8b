package sqlread

import (
	"slices"
	"time"
)

// The merges of EventTimes: an engine's EventTimes may read a kind's times
// from its own index (Times), or, for renewals, which the per-kind index
// leaves out, as the lock's whole timeline less the times of every other
// kind (TimesLess), so that it reads indexes alone.

// Times returns the first lim times (unix nanoseconds) of rows, newest
// first, in time order. It closes rows.
func Times(rows Rows, lim int) ([]time.Time, error) {
	defer rows.Close()
	var out []time.Time
	for len(out) < lim {
		t, ok, err := nextTime(rows)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		out = append(out, time.Unix(0, t).UTC())
	}
	slices.Reverse(out)
	return out, nil
}

// TimesLess returns the first lim times of all that others does not hold,
// in time order: both newest first, each time of others cancels one equal
// time of all. It closes both.
func TimesLess(all, others Rows, lim int) ([]time.Time, error) {
	defer all.Close()
	defer others.Close()
	var out []time.Time
	other, more, err := nextTime(others)
	for err == nil && len(out) < lim {
		var t int64
		var ok bool
		if t, ok, err = nextTime(all); !ok || err != nil {
			break
		}
		for more && err == nil && other > t {
			other, more, err = nextTime(others)
		}
		if more && other == t {
			other, more, err = nextTime(others)
			continue
		}
		out = append(out, time.Unix(0, t).UTC())
	}
	if err != nil {
		return nil, err
	}
	slices.Reverse(out)
	return out, nil
}

// nextTime scans the next row's time; ok is false past the last row.
func nextTime(rows Rows) (t int64, ok bool, err error) {
	if !rows.Next() {
		return 0, false, rows.Err()
	}
	if err := rows.Scan(&t); err != nil {
		return 0, false, err
	}
	return t, true, nil
}
