package rowcodec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// EncodeDetail encodes an event's detail as encoding/json does, byte for
// byte. Nearly every event carries a small flat detail (a renewal's margin
// ratio), so the common shapes are written directly rather than by
// reflection; anything else goes to encoding/json.
func EncodeDetail(d map[string]any) (string, error) {
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

// DecodeDetail decodes an event's detail as a json.Decoder with UseNumber
// does: numbers as json.Number. The flat objects EncodeDetail writes for
// nearly every event (a write's highest_token, say) are read directly; a
// page of thousands of writes would otherwise spend most of its time in
// encoding/json. Anything else goes to encoding/json.
func DecodeDetail(raw []byte) (map[string]any, error) {
	if m, ok := decodeFlatDetail(raw); ok {
		return m, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// decodeFlatDetail reads a JSON object without spaces whose keys and string
// values are printable ASCII without escapes and whose other values are
// numbers, true or false. ok is false for anything else.
func decodeFlatDetail(b []byte) (m map[string]any, ok bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, false
	}
	m = make(map[string]any, 2)
	if len(b) == 2 {
		return m, true
	}
	i := 1
	for {
		key, n := flatString(b[i:])
		if n == 0 || i+n >= len(b) || b[i+n] != ':' {
			return nil, false
		}
		i += n + 1
		var v any
		switch {
		case i >= len(b):
			return nil, false
		case b[i] == '"':
			s, n := flatString(b[i:])
			if n == 0 {
				return nil, false
			}
			v, i = s, i+n
		case bytes.HasPrefix(b[i:], []byte("true")):
			v, i = true, i+4
		case bytes.HasPrefix(b[i:], []byte("false")):
			v, i = false, i+5
		default:
			n := jsonNumber(b[i:])
			if n == 0 {
				return nil, false
			}
			v, i = json.Number(b[i:i+n]), i+n
		}
		m[key] = v
		switch {
		case i == len(b)-1 && b[i] == '}':
			return m, true
		case i < len(b)-1 && b[i] == ',':
			i++
		default:
			return nil, false
		}
	}
}

// flatString reads a quoted string of printable ASCII without escapes at the
// start of b, returning it and the bytes it took (0 if there is none).
func flatString(b []byte) (string, int) {
	if len(b) == 0 || b[0] != '"' {
		return "", 0
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return string(b[1:i]), i + 1
		case c < 0x20 || c >= 0x7f || c == '\\':
			return "", 0
		}
	}
	return "", 0
}

// jsonNumber returns the length of the JSON number at the start of b, or 0.
func jsonNumber(b []byte) int {
	i := 0
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i, n = i+1, n+1
		}
		return n
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	start := i
	if n := digits(); n == 0 || n > 1 && b[start] == '0' {
		return 0
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return 0
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return 0
		}
	}
	return i
}

// EventRow is what an events row keeps of an event beside the columns it
// keeps as they are: a renewal that names its tenure compactly, without its
// holder and token (the tenure has them) and with its margin and renewal
// time in columns of their own (CompactRenewal); any other event with its
// holder, token and its whole detail, encoded (nil when it has none).
type EventRow struct {
	Holder                        string
	Token, Seq, Margin, RenewedAt any
	Detail                        any
}

// EventRowOf returns e's EventRow.
func EventRowOf(e audit.Event) (EventRow, error) {
	row := EventRow{Holder: e.Holder, Token: NullToken(e.Token)}
	var detail map[string]any
	if e.Kind == audit.EventRenew && e.Seq > 0 {
		row.Holder, row.Token, row.Seq = "", nil, e.Seq
		row.Margin, row.RenewedAt, detail = CompactRenewal(e)
	} else {
		detail = WithRenewal(e)
	}
	if detail != nil {
		s, err := EncodeDetail(detail)
		if err != nil {
			return row, fmt.Errorf("%s event of lock %s: encode detail: %w", e.Kind, e.Lock, err)
		}
		row.Detail = s
	}
	return row, nil
}

// WithRenewal is e's detail with its typed audit.RenewalDetail put back
// under the tracker's keys, as a read gives them: for a row with no columns
// for them.
func WithRenewal(e audit.Event) map[string]any {
	r := e.Renewal
	if !r.HasMargin && !r.HasRenewedAt {
		return e.Detail
	}
	d := make(map[string]any, len(e.Detail)+2)
	maps.Copy(d, e.Detail)
	if r.HasMargin {
		d["margin_ratio"] = float64(r.Margin) / 1000
	}
	if r.HasRenewedAt {
		d["renewed_at"] = FormatNanos(r.RenewedAt)
	}
	return d
}

// CompactRenewal gives a renew event's margin_ratio and renewed_at as
// integer columns, margin_permille and renewed_at (unix ns): from its typed
// audit.RenewalDetail, else from its detail, and the rest of its detail.
func CompactRenewal(e audit.Event) (margin, renewedAt any, rest map[string]any) {
	margin, renewedAt, rest = compactDetail(e.Detail)
	if e.Renewal.HasMargin {
		margin = e.Renewal.Margin
	}
	if e.Renewal.HasRenewedAt {
		renewedAt = e.Renewal.RenewedAt
	}
	return margin, renewedAt, rest
}

// compactDetail splits margin_ratio and renewed_at out of a renewal's
// detail d into integer columns (CompactRenewal). It returns nil for a key
// missing or not exactly representable (so that a read gives back the same
// JSON), and the rest of the detail, nil when nothing else is left. d is not
// modified.
func compactDetail(d map[string]any) (margin, renewedAt any, rest map[string]any) {
	taken := 0
	if v, ok := d["margin_ratio"].(float64); ok {
		if p := math.Round(v * 1000); math.Abs(p) < audit.MaxMargin && p/1000 == v {
			margin = int64(p)
			taken++
		}
	}
	if s, ok := d["renewed_at"].(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			if ns := t.UnixNano(); FormatNanos(ns) == s {
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

func FormatNanos(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

// MarginDest scans margin_permille back into a detail's margin_ratio, as
// DetailDest would have decoded it. It must scan after the detail column.
type MarginDest struct{ P *map[string]any }

func (d MarginDest) Scan(v any) error {
	switch v := v.(type) {
	case nil:
	case int64:
		setDetail(d.P, "margin_ratio", json.Number(strconv.FormatFloat(float64(v)/1000, 'f', -1, 64)))
	default:
		return fmt.Errorf("margin: unexpected %T", v)
	}
	return nil
}

// RenewedAtDest scans the renewed_at column back into a detail's renewed_at.
// It must scan after the detail column.
type RenewedAtDest struct{ P *map[string]any }

func (d RenewedAtDest) Scan(v any) error {
	switch v := v.(type) {
	case nil:
	case int64:
		setDetail(d.P, "renewed_at", FormatNanos(v))
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
