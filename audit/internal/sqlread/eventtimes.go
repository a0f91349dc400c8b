package sqlread

import (
	"slices"
	"time"
)

// Times returns the first lim times (unix nanoseconds) of rows, newest
// first, in time order: an engine's EventTimes reads them from an index
// alone. It closes rows.
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
