package sqlite

import (
	"encoding/json"
	"math"
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
		got, err := encodeDetail(d)
		if err != nil {
			t.Fatalf("encodeDetail(%v): %v", d, err)
		}
		if got != string(want) {
			t.Errorf("encodeDetail(%v) = %s, want %s", d, got, want)
		}
	}
	if _, err := encodeDetail(map[string]any{"x": math.NaN()}); err == nil {
		t.Error("encodeDetail(NaN) = nil error, want encoding/json's")
	}
}
