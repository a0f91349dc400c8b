package rowcodec

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// Scan destinations that convert the schema's encodings back to domain types.

// TimeDest scans unix nanoseconds as audit.Nanos stores them; NULL and
// audit.NoNanos are the zero time.
type TimeDest struct{ P *time.Time }

func (d TimeDest) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*d.P = time.Time{}
	case int64:
		*d.P = audit.TimeOf(v)
	default:
		return fmt.Errorf("time: unexpected %T", v)
	}
	return nil
}

// MsDest scans milliseconds into a duration.
type MsDest struct{ P *time.Duration }

func (d MsDest) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*d.P = 0
	case int64:
		*d.P = time.Duration(v) * time.Millisecond
	default:
		return fmt.Errorf("duration: unexpected %T", v)
	}
	return nil
}

// TokenDest scans a nullable integer: NULL is a nil token.
type TokenDest struct{ P **int64 }

func (d TokenDest) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*d.P = nil
	case int64:
		*d.P = audit.Int64(v)
	default:
		return fmt.Errorf("token: unexpected %T", v)
	}
	return nil
}

// TextDest scans nullable text: NULL is "". T is string or a string type.
type TextDest[T ~string] struct{ P *T }

func (d TextDest[T]) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*d.P = ""
	case string:
		*d.P = T(v)
	case []byte:
		*d.P = T(v)
	default:
		return fmt.Errorf("text: unexpected %T", v)
	}
	return nil
}

// DetailDest scans a JSON object; NULL is a nil map. Numbers decode as
// json.Number so revisions and tokens keep every digit.
type DetailDest struct{ P *map[string]any }

func (d DetailDest) Scan(v any) error {
	var raw []byte
	switch v := v.(type) {
	case nil:
		*d.P = nil
		return nil
	case string:
		raw = []byte(v)
	case []byte:
		raw = v
	default:
		return fmt.Errorf("detail: unexpected %T", v)
	}
	m, err := DecodeDetail(raw)
	if err != nil {
		return fmt.Errorf("detail: %w", err)
	}
	*d.P = m
	return nil
}

// ArrayDest scans a JSON array; an empty array is a nil slice.
type ArrayDest[T any] struct{ P *[]T }

func (d ArrayDest[T]) Scan(v any) error {
	var raw []byte
	switch v := v.(type) {
	case nil:
		*d.P = nil
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
	*d.P = s
	return nil
}

// SummaryDest scans what retention pruned of a tenure's renewals, given as
// one JSON array [renewals, first_at, last_at, min_margin_permille] (NULL
// when nothing was pruned), so that one destination takes the four columns.
type SummaryDest struct{ P **audit.RenewalSummary }

func (d SummaryDest) Scan(v any) error {
	*d.P = nil
	var cols []*int64
	if err := (ArrayDest[*int64]{&cols}).Scan(v); err != nil || cols == nil {
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
	*d.P = sum
	return nil
}

// LockDest scans a lock row: id, source, kind, name, class, state, holder,
// token, acquired_at, renewed_at, expires_at, lease_duration_ms, changed_at.
func LockDest(l *audit.Lock) []any {
	return []any{&l.ID, &l.Source, TextDest[audit.SourceKind]{&l.Kind}, &l.Name,
		TextDest[audit.Class]{&l.Class}, TextDest[audit.LockState]{&l.State}, &l.Holder, TokenDest{&l.Token},
		TimeDest{&l.AcquiredAt}, TimeDest{&l.RenewedAt}, TimeDest{&l.ExpiresAt}, MsDest{&l.LeaseDuration},
		TimeDest{&l.ChangedAt}}
}

// EventDest scans an event row: id, lock_id, kind, at, holder, token, ttl_ms,
// position, inferred, resource, request_id, detail, seq (0 for none),
// margin_permille, renewed_at. A compact renewal's holder and token are its
// tenure's, which the query joins in; the last two columns go back into the
// detail (CompactRenewal).
func EventDest(e *audit.Event) []any {
	return []any{&e.ID, &e.LockID, TextDest[audit.EventKind]{&e.Kind}, TimeDest{&e.At}, &e.Holder,
		TokenDest{&e.Token}, MsDest{&e.TTL}, &e.Position, &e.Inferred, &e.Resource,
		TextDest[string]{&e.RequestID}, DetailDest{&e.Detail}, &e.Seq,
		MarginDest{&e.Detail}, RenewedAtDest{&e.Detail}}
}

// TenureDest scans a tenure row: lock_id, seq, holder, token, granted_at,
// observed, position, renewals, last_renewed_at, lease_duration_ms,
// expires_at, ended_at, end_reason.
func TenureDest(t *audit.Tenure) []any {
	return []any{&t.LockID, &t.Seq, &t.Holder, TokenDest{&t.Token}, TimeDest{&t.GrantedAt}, &t.Observed,
		&t.Position, &t.Renewals, TimeDest{&t.LastRenewedAt}, MsDest{&t.LeaseDuration},
		TimeDest{&t.ExpiresAt}, TimeDest{&t.EndedAt}, TextDest[audit.EndReason]{&t.End}}
}

// FindingDest scans a finding with its lock's key: id, lock_id, source, name,
// kind, severity, at, until, summary, tokens, holders, resource.
func FindingDest(f *audit.Finding) []any {
	return []any{&f.ID, &f.LockID, &f.Lock.Source, &f.Lock.Name, TextDest[audit.FindingKind]{&f.Kind},
		TextDest[audit.Severity]{&f.Severity}, TimeDest{&f.At}, TimeDest{&f.Until}, &f.Summary,
		ArrayDest[int64]{&f.Tokens}, ArrayDest[string]{&f.Holders}, &f.Resource}
}
