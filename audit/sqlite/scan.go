package sqlite

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// Scan destinations that convert the schema's encodings back to domain types.

// timeDest scans unix nanoseconds as nanos stores them; NULL and
// audit.NoNanos are the zero time.
type timeDest struct{ t *time.Time }

func (d timeDest) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*d.t = time.Time{}
	case int64:
		*d.t = audit.TimeOf(v)
	default:
		return fmt.Errorf("time: unexpected %T", v)
	}
	return nil
}

// msDest scans milliseconds into a duration.
type msDest struct{ d *time.Duration }

func (d msDest) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*d.d = 0
	case int64:
		*d.d = time.Duration(v) * time.Millisecond
	default:
		return fmt.Errorf("duration: unexpected %T", v)
	}
	return nil
}

// tokenDest scans a nullable integer: NULL is a nil token.
type tokenDest struct{ p **int64 }

func (d tokenDest) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*d.p = nil
	case int64:
		*d.p = audit.Int64(v)
	default:
		return fmt.Errorf("token: unexpected %T", v)
	}
	return nil
}

// textDest scans nullable text: NULL is "". T is string or a string type.
type textDest[T ~string] struct{ s *T }

func (d textDest[T]) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*d.s = ""
	case string:
		*d.s = T(v)
	case []byte:
		*d.s = T(v)
	default:
		return fmt.Errorf("text: unexpected %T", v)
	}
	return nil
}

// detailDest scans a JSON object; NULL is a nil map. Numbers decode as
// json.Number so revisions and tokens keep every digit.
type detailDest struct{ m *map[string]any }

func (d detailDest) Scan(v any) error {
	var raw []byte
	switch v := v.(type) {
	case nil:
		*d.m = nil
		return nil
	case string:
		raw = []byte(v)
	case []byte:
		raw = v
	default:
		return fmt.Errorf("detail: unexpected %T", v)
	}
	m, err := decodeDetail(raw)
	if err != nil {
		return fmt.Errorf("detail: %w", err)
	}
	*d.m = m
	return nil
}

// arrayDest scans a JSON array; an empty array is a nil slice.
type arrayDest[T any] struct{ s *[]T }

func (d arrayDest[T]) Scan(v any) error {
	var raw []byte
	switch v := v.(type) {
	case nil:
		*d.s = nil
		return nil
	case string:
		raw = []byte(v)
	case []byte:
		raw = v
	default:
		return fmt.Errorf("array: unexpected %T", v)
	}
	var s []T
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("array: %w", err)
	}
	if len(s) == 0 {
		s = nil
	}
	*d.s = s
	return nil
}

// tenureTables are the tenures (aliased t) with what retention pruned of
// their renewals (summaryColumns).
const tenureTables = `tenures t LEFT JOIN renewal_summaries rs ON rs.lock_id = t.lock_id AND rs.seq = t.seq`

// summaryColumns are the columns summaryDest scans, as one JSON array (NULL
// when nothing was pruned) so that one destination takes them.
const summaryColumns = `CASE WHEN rs.renewals IS NULL THEN NULL
	ELSE json_array(rs.renewals, rs.first_at, rs.last_at, rs.min_margin_permille) END`

// summaryDest scans summaryColumns.
type summaryDest struct{ p **audit.RenewalSummary }

func (d summaryDest) Scan(v any) error {
	*d.p = nil
	var cols []*int64
	if err := (arrayDest[*int64]{&cols}).Scan(v); err != nil || cols == nil {
		return err
	}
	if len(cols) != 4 || cols[0] == nil || cols[1] == nil || cols[2] == nil {
		return fmt.Errorf("renewal summary: unexpected %v", v)
	}
	sum := &audit.RenewalSummary{Renewals: *cols[0], First: time.Unix(0, *cols[1]).UTC(), Last: time.Unix(0, *cols[2]).UTC()}
	if m := cols[3]; m != nil {
		r := float64(*m) / 1000
		sum.MinMarginRatio = &r
	}
	*d.p = sum
	return nil
}

// lockColumns are the columns lockDest scans, from locks aliased l.
const lockColumns = `l.id, l.source, l.kind, l.name, l.class, l.state, l.holder, l.token,
	l.acquired_at, l.renewed_at, l.expires_at, l.lease_duration_ms, l.changed_at`

func lockDest(l *audit.Lock) []any {
	return []any{&l.ID, &l.Source, textDest[audit.SourceKind]{&l.Kind}, &l.Name,
		textDest[audit.Class]{&l.Class}, textDest[audit.LockState]{&l.State}, &l.Holder, tokenDest{&l.Token},
		timeDest{&l.AcquiredAt}, timeDest{&l.RenewedAt}, timeDest{&l.ExpiresAt}, msDest{&l.LeaseDuration},
		timeDest{&l.ChangedAt}}
}

// eventColumns are the columns eventDest scans, from eventTables. A compact
// renewal (one with a seq) takes its holder and token from its tenure, and
// its margin and renewal time from their columns (journal.go's eventArgs).
const eventColumns = `e.id, e.lock_id, e.kind, e.at, coalesce(et.holder, e.holder),
	CASE WHEN e.seq IS NULL THEN e.token ELSE et.token END, e.ttl_ms, e.position,
	e.inferred, e.resource, e.request_id, e.detail, coalesce(e.seq, 0), e.margin_permille, e.renewed_at`

// eventTables are the tables of eventColumns; index is the events index to
// read, or "" for the planner's choice.
func eventTables(index string) string {
	from := `events e`
	if index != "" {
		from += ` INDEXED BY ` + index
	}
	return from + ` LEFT JOIN tenures et ON e.seq IS NOT NULL AND et.lock_id = e.lock_id AND et.seq = e.seq`
}

func eventDest(e *audit.Event) []any {
	return []any{&e.ID, &e.LockID, textDest[audit.EventKind]{&e.Kind}, timeDest{&e.At}, &e.Holder,
		tokenDest{&e.Token}, msDest{&e.TTL}, &e.Position, &e.Inferred, &e.Resource,
		textDest[string]{&e.RequestID}, detailDest{&e.Detail}, &e.Seq,
		marginDest{&e.Detail}, renewedAtDest{&e.Detail}}
}

// tenureColumns are the columns tenureDest scans, from tenures aliased t.
const tenureColumns = `t.lock_id, t.seq, t.holder, t.token, t.granted_at, t.observed, t.position,
	t.renewals, t.last_renewed_at, t.lease_duration_ms, t.expires_at, t.ended_at, t.end_reason`

func tenureDest(t *audit.Tenure) []any {
	return []any{&t.LockID, &t.Seq, &t.Holder, tokenDest{&t.Token}, timeDest{&t.GrantedAt}, &t.Observed,
		&t.Position, &t.Renewals, timeDest{&t.LastRenewedAt}, msDest{&t.LeaseDuration},
		timeDest{&t.ExpiresAt}, timeDest{&t.EndedAt}, textDest[audit.EndReason]{&t.End}}
}

// findingColumns are the columns findingDest scans, from findings aliased f
// joined with locks aliased l; findingColumnsOf, from findings alone, for one
// lock, whose source and name are the query's first two arguments.
const (
	findingColumns   = `f.id, f.lock_id, l.source, l.name, ` + findingFields
	findingColumnsOf = `f.id, f.lock_id, ?, ?, ` + findingFields
	findingFields    = `f.kind, f.severity, f.at, f.until, f.summary, f.tokens, f.holders, f.resource`
)

func findingDest(f *audit.Finding) []any {
	return []any{&f.ID, &f.LockID, &f.Lock.Source, &f.Lock.Name, textDest[audit.FindingKind]{&f.Kind},
		textDest[audit.Severity]{&f.Severity}, timeDest{&f.At}, timeDest{&f.Until}, &f.Summary,
		arrayDest[int64]{&f.Tokens}, arrayDest[string]{&f.Holders}, &f.Resource}
}
