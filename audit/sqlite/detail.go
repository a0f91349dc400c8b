package sqlite

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// encodeDetail encodes an event's detail as encoding/json does, byte for
// byte. Nearly every event carries a small flat detail (a renewal's margin
// ratio), so the common shapes are written directly rather than by
// reflection; anything else goes to encoding/json.
func encodeDetail(d map[string]any) (string, error) {
	if len(d) > 8 {
		return marshalDetail(d)
	}
	var keysBuf [8]string
	keys := keysBuf[:0]
	for k := range d {
		if !plainJSON(k) {
			return marshalDetail(d)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b := make([]byte, 0, 64)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, '"', ':')
		switch v := d[k].(type) {
		case string:
			if !plainJSON(v) {
				return marshalDetail(d)
			}
			b = append(b, '"')
			b = append(b, v...)
			b = append(b, '"')
		case bool:
			b = strconv.AppendBool(b, v)
		case int:
			b = strconv.AppendInt(b, int64(v), 10)
		case int64:
			b = strconv.AppendInt(b, v, 10)
		case float64:
			// encoding/json's 'f' range; outside it, its exponent form.
			if a := math.Abs(v); math.IsInf(v, 0) || math.IsNaN(v) || (a != 0 && (a < 1e-6 || a >= 1e21)) {
				return marshalDetail(d)
			}
			b = strconv.AppendFloat(b, v, 'f', -1, 64)
		default:
			return marshalDetail(d)
		}
	}
	b = append(b, '}')
	return string(b), nil
}

func marshalDetail(d map[string]any) (string, error) {
	b, err := json.Marshal(d)
	return string(b), err
}

// plainJSON reports whether s encodes as itself between quotes: printable
// ASCII that encoding/json neither escapes nor HTML-escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// compactRenewal splits the two keys the tracker puts on every renewal's
// detail, margin_ratio and renewed_at, into integer columns: margin_permille
// and renewed_at (unix ns). It returns nil for a key missing or not exactly
// representable (so that renewalDetail gives back the same JSON), and the
// rest of the detail, nil when nothing else is left. d is not modified.
func compactRenewal(d map[string]any) (margin, renewedAt any, rest map[string]any) {
	taken := 0
	if v, ok := d["margin_ratio"].(float64); ok {
		if p := math.Round(v * 1000); math.Abs(p) < 1e12 && p/1000 == v {
			margin = int64(p)
			taken++
		}
	}
	if s, ok := d["renewed_at"].(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			if ns := t.UnixNano(); formatNanos(ns) == s {
				renewedAt = ns
				taken++
			}
		}
	}
	if taken == len(d) {
		return margin, renewedAt, nil
	}
	if taken == 0 {
		return nil, nil, d
	}
	rest = make(map[string]any, len(d)-taken)
	for k, v := range d {
		if (k == "margin_ratio" && margin != nil) || (k == "renewed_at" && renewedAt != nil) {
			continue
		}
		rest[k] = v
	}
	return margin, renewedAt, rest
}

func formatNanos(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

// marginDest scans margin_permille back into a detail's margin_ratio, as
// detailDest would have decoded it. It must scan after the detail column.
type marginDest struct{ m *map[string]any }

func (d marginDest) Scan(v any) error {
	switch v := v.(type) {
	case nil:
	case int64:
		setDetail(d.m, "margin_ratio", json.Number(strconv.FormatFloat(float64(v)/1000, 'f', -1, 64)))
	default:
		return fmt.Errorf("margin: unexpected %T", v)
	}
	return nil
}

// renewedAtDest scans the renewed_at column back into a detail's renewed_at.
// It must scan after the detail column.
type renewedAtDest struct{ m *map[string]any }

func (d renewedAtDest) Scan(v any) error {
	switch v := v.(type) {
	case nil:
	case int64:
		setDetail(d.m, "renewed_at", formatNanos(v))
	default:
		return fmt.Errorf("renewed_at: unexpected %T", v)
	}
	return nil
}

func setDetail(m *map[string]any, k string, v any) {
	if *m == nil {
		*m = make(map[string]any, 2)
	}
	(*m)[k] = v
}
