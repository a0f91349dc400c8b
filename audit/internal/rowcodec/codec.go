// Package rowcodec is what the audit stores share of turning domain values
// into column values and back, so that every store encodes a batch alike:
// times as audit.Nanos, durations in milliseconds, event details as the JSON
// encoding/json writes (renewals compacted into columns), and the scan
// destinations that decode each column. The SQL itself stays with each
// store.
//
// The scan destinations implement database/sql's Scanner, which pgx also
// takes, and accept the driver values both databases give for the columns:
// int64, string or []byte, bool, and nil for NULL.
package rowcodec

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// NullNanos stores the zero time as NULL, for columns where NULL means "not
// yet" (a tenure's end, a finding's until), else as audit.Nanos does.
func NullNanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return audit.Nanos(t)
}

// Ms is a duration in the whole milliseconds the columns keep.
func Ms(d time.Duration) int64 { return d.Milliseconds() }

// NullToken stores a nil token as NULL.
func NullToken(t *int64) any {
	if t == nil {
		return nil
	}
	return *t
}

// LockRow is the row of st's lock that the stores' lock upserts write, in
// the order of their columns: source, name, kind, class, state, holder,
// token, acquired_at, renewed_at, expires_at, lease_duration_ms,
// changed_at, renewed_seq and renewals. The last two (SQLite migration
// 0027, PostgreSQL 0017) are the seq and renewal count of st's held
// tenure, whose renewals the lock row's renewal columns describe, or NULL
// and 0 when none is held.
func LockRow(st audit.TrackState) []any {
	l := st.Lock
	class := l.Class
	if class == "" {
		class = audit.ClassLock
	}
	var seq any
	var renewals int64
	if n := len(st.Recent); n > 0 && st.Recent[n-1].Held() {
		seq, renewals = st.Recent[n-1].Seq, st.Recent[n-1].Renewals
	}
	return []any{l.Source, l.Name, string(l.Kind), string(class), string(l.State), l.Holder, NullToken(l.Token),
		audit.Nanos(l.AcquiredAt), audit.Nanos(l.RenewedAt), audit.Nanos(l.ExpiresAt), Ms(l.LeaseDuration),
		audit.Nanos(l.ChangedAt), seq, renewals}
}

// NullString stores "" as NULL, for columns where NULL means "none" (a
// write's request id, a held tenure's end reason).
func NullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// JSONArray encodes a slice as a JSON array, nil as [].
func JSONArray[T any](v []T) (string, error) {
	if len(v) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(v)
	return string(b), err
}

// DetailTime reads an RFC 3339 time from an event detail.
func DetailTime(d map[string]any, key string) (time.Time, error) {
	s, ok := d[key].(string)
	if !ok {
		return time.Time{}, fmt.Errorf("detail %s: not a string", key)
	}
	return time.Parse(time.RFC3339Nano, s)
}

// BlindInterval is the interval and reason of a tracker-made blind event, once
// per source: the tracker writes one event per lock, the sources page wants
// one row. ok is false for a blind event without them, whose finding still
// counts.
func BlindInterval(e audit.Event) (from, to time.Time, reason string, ok bool) {
	from, err1 := DetailTime(e.Detail, "from")
	to, err2 := DetailTime(e.Detail, "to")
	if err1 != nil || err2 != nil {
		return time.Time{}, time.Time{}, "", false
	}
	reason, _ = e.Detail["reason"].(string)
	return from, to, reason, true
}

// LastBy returns the last of the items sharing each key, in the order of those
// last occurrences: a batch's later entries for a lock, tenure or cursor
// replace earlier ones.
func LastBy[T any, K comparable](items []T, key func(T) K) []T {
	if len(items) < 2 {
		return items
	}
	seen := make(map[K]bool, len(items))
	out := make([]T, 0, len(items))
	for i := len(items) - 1; i >= 0; i-- {
		k := key(items[i])
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, items[i])
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// TenureKey identifies a tenure within a batch.
type TenureKey struct {
	Lock audit.LockKey
	Seq  int64
}

// Shaped is a batch as a store writes it: each lock, tenure, cursor and
// renewal once, its last entry.
type Shaped struct {
	Locks     []audit.TrackState
	Tenures   []audit.Tenure
	Resources []audit.ResourceRow
	Cursors   []audit.Cursor
	Renewed   []audit.Renewal
}

// ResourceKey identifies a resource of a lock within a batch.
type ResourceKey struct {
	Lock     audit.LockKey
	Resource string
}

// Shape keeps the last entry of each lock, tenure, cursor and renewal of b.
func Shape(b audit.Batch) Shaped {
	return Shaped{
		Locks:     LastBy(b.Locks, func(st audit.TrackState) audit.LockKey { return st.Lock.Key() }),
		Tenures:   LastBy(b.Tenures, func(t audit.Tenure) TenureKey { return TenureKey{t.Lock, t.Seq} }),
		Resources: LastBy(b.Resources, func(r audit.ResourceRow) ResourceKey { return ResourceKey{r.Lock, r.Resource} }),
		Cursors:   LastBy(b.Cursors, func(c audit.Cursor) string { return c.Source }),
		Renewed:   LastBy(b.Renewed, func(r audit.Renewal) audit.LockKey { return r.Lock }),
	}
}

// RecentFrom is the seq of the first tenure of st.Recent, which runs up to
// NextSeq without gaps: a store keeps it beside the track state so that
// Restore reads back exactly those tenures.
func RecentFrom(st audit.TrackState) int64 { return st.NextSeq - int64(len(st.Recent)) + 1 }

// EncodeTrackState is the JSON of the tracker's memory of a lock beyond its
// lock columns and tenures.
func EncodeTrackState(st audit.TrackState) (string, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return "", fmt.Errorf("lock %s: encode track state: %w", st.Lock.Key(), err)
	}
	return string(b), nil
}

// DecodeTrackState fills st (whose Lock is set) from EncodeTrackState's JSON.
func DecodeTrackState(st *audit.TrackState, raw string) error {
	lock := st.Lock
	if err := json.Unmarshal([]byte(raw), st); err != nil {
		return fmt.Errorf("restore lock %s: decode track state: %w", lock.Key(), err)
	}
	st.Lock = lock
	return nil
}

// EncodeResourceState is the JSON of one resource's state under a lock.
func EncodeResourceState(r audit.ResourceRow) (string, error) {
	b, err := json.Marshal(r.State)
	if err != nil {
		return "", fmt.Errorf("lock %s: encode the state of resource %s: %w", r.Lock, r.Resource, err)
	}
	return string(b), nil
}

// DecodeResourceState reads EncodeResourceState's JSON into the state of
// resource name of st.
func DecodeResourceState(st *audit.TrackState, name, raw string) error {
	var r audit.ResourceState
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return fmt.Errorf("restore lock %s: decode the state of resource %s: %w", st.Lock.Key(), name, err)
	}
	if st.Resources == nil {
		st.Resources = make(map[string]*audit.ResourceState)
	}
	st.Resources[name] = &r
	return nil
}

// Severity is the finding's severity, from its kind when it has none.
func Severity(f audit.Finding) audit.Severity {
	if f.Severity == "" {
		return f.Kind.Severity()
	}
	return f.Severity
}

// BlindUntil is the end of a blind_window finding's interval: its Until, or
// its At for an instant.
func BlindUntil(f audit.Finding) time.Time {
	if f.Until.IsZero() {
		return f.At
	}
	return f.Until
}

// Limit is a list call's row limit: def when n <= 0, at most most.
func Limit(n, def, most int) int {
	if n <= 0 {
		return def
	}
	return min(n, most)
}
