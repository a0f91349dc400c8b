package audit

import (
	"math"
	"time"
)

// The one encoding of times the service keeps in int64s, in memory and in
// the database: Unix nanoseconds, which reach from 1677-09-21 to 2262-04-11.
// The first of them, math.MinInt64, stands for "no time" (the zero
// time.Time), so every real instant, 1970-01-01T00:00:00Z included, keeps its
// own value. A time outside the range is kept as the nearest bound: callers
// refuse what they must refuse (ingest refuses reports outside it, see
// docs/input.md, "Times") before it gets here.
const NoNanos int64 = math.MinInt64

var (
	// EarliestTime is the earliest instant the encoding holds: a nanosecond
	// after math.MinInt64, which is NoNanos.
	EarliestTime = time.Unix(0, NoNanos+1).UTC()
	// LatestTime is the latest instant the encoding holds.
	LatestTime = time.Unix(0, math.MaxInt64).UTC()
)

// ClampTime returns t moved into [EarliestTime, LatestTime]; the zero time
// stays zero. Times from backends and the bounds of query windows go through
// it, so a window reaching past 2262 still covers what lies inside it.
func ClampTime(t time.Time) time.Time {
	switch {
	case t.IsZero():
		return t
	case t.Before(EarliestTime):
		return EarliestTime
	case t.After(LatestTime):
		return LatestTime
	}
	return t
}

// BoundTime returns t, a bound that was given (a query window's from or to),
// in UTC and within the range. Unlike ClampTime it never returns the zero
// time: 0001-01-01T00:00:00Z given as a bound is the zero time.Time, yet it
// is a bound, not "none", and becomes EarliestTime.
func BoundTime(t time.Time) time.Time {
	if t.Before(EarliestTime) {
		return EarliestTime
	}
	return ClampTime(t).UTC()
}

// Nanos returns t as Unix nanoseconds, clamped to the range, and NoNanos for
// the zero time.
func Nanos(t time.Time) int64 {
	if t.IsZero() {
		return NoNanos
	}
	return ClampTime(t).UnixNano()
}

// TimeOf is the inverse of Nanos, in UTC: NoNanos is the zero time.
func TimeOf(n int64) time.Time {
	if n == NoNanos {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// MinTime returns the earlier of a and b.
func MinTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// MaxTime returns the later of a and b.
func MaxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
