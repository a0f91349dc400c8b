package rowcodec

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestEncodeDetailMatchesEncodingJSON(t *testing.T) {
	for _, d := range []map[string]any{
		{},
		{"margin_ratio": 0.75},
		{"margin_ratio": 0.0},
		{"margin_ratio": -0.125, "renewed_at": "2026-11-29T11:00:00.123456789Z"},
		{"superseded": "worker-7", "deleted": true, "n": 3, "big": int64(math.MaxInt64)},
		{"tiny": 1e-7, "huge": 1e21, "third": 1.0 / 3},
		{"holder": `a "quoted" name`},
		{"holder": "<script>&"},
		{"holder": "naïve"},
		{"line": "a\nb"},
		{"ke\"y": 1},
		{"nested": map[string]any{"a": 1}},
		{"list": []int{1, 2}},
		{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 7, "h": 8, "i": 9},
	} {
		want, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		got, err := EncodeDetail(d)
		if err != nil {
			t.Fatalf("EncodeDetail(%v): %v", d, err)
		}
		if got != string(want) {
			t.Errorf("EncodeDetail(%v) = %s, want %s", d, got, want)
		}
	}
	if _, err := EncodeDetail(map[string]any{"x": math.NaN()}); err == nil {
		t.Error("EncodeDetail(NaN) = nil error, want encoding/json's")
	}
}

// DecodeDetail reads every detail as a json.Decoder with UseNumber does,
// whether its fast path takes it or not.
func TestDecodeDetailMatchesEncodingJSON(t *testing.T) {
	inputs := []string{
		`{}`, `null`, `{"highest_token":42}`, `{"highest_token":9007199254740993,"request":"r-1"}`,
		`{"a":-0}`, `{"a":-0.5E-3}`, `{"a":1e+5}`, `{"a":0.875}`, `{"a":true,"b":false}`, `{"a":1,"a":2}`,
		`{"":1}`, `{"a":"<&>"}`, `{"a":"x\"y"}`, `{"a":"ü"}`, `{"a":"tab	"}`, `{"a":{"b":1}}`, `{"a":[1]}`,
		`{"a":null}`, `{ "a":1}`, `{"a":1} `, `{"a":1}{"b":2}`,
		// Not JSON: both fail.
		`{"a":01}`, `{"a":-}`, `{"a":1.}`, `{"a":1e}`, `{"a":tru}`, `{"a":1,}`, `{,}`, `{"a"1}`, `{"a":}`, `{"a`, `{`, ``,
	}
	for _, d := range []map[string]any{
		{"margin_ratio": -0.125, "renewed_at": "2026-11-29T11:00:00.123456789Z"},
		{"superseded": "worker-7", "deleted": true, "n": 3, "big": int64(math.MaxInt64)},
		{"tiny": 1e-7, "huge": 1e21, "third": 1.0 / 3},
	} {
		s, err := EncodeDetail(d)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, s)
	}
	for _, in := range inputs {
		dec := json.NewDecoder(strings.NewReader(in))
		dec.UseNumber()
		var want map[string]any
		wantErr := dec.Decode(&want)
		got, err := DecodeDetail([]byte(in))
		if (err != nil) != (wantErr != nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("DecodeDetail(%s) = %#v, %v; want %#v, %v", in, got, err, want, wantErr)
		}
	}
	if _, ok := decodeFlatDetail([]byte(`{"highest_token":42,"resource":"db-1"}`)); !ok {
		t.Error("a write's detail does not take the fast path")
	}
}
