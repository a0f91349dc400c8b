package sqlite

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
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
