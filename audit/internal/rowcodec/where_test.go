package rowcodec

import (
	"reflect"
	"testing"
)

func TestWherePlaceholders(t *testing.T) {
	for _, tt := range []struct {
		d    Dialect
		want string
	}{
		{Dialect{Like: "LIKE"}, " WHERE a = ? AND (b > ? OR c < ?) LIMIT ?"},
		{Dialect{Numbered: true, Like: "ILIKE"}, " WHERE a = $1 AND (b > $2 OR c < $3) LIMIT $4"},
	} {
		w := tt.d.Where()
		w.Add("a = ?", 1)
		w.Add("(b > ? OR c < ?)", 2, 3)
		got := w.String() + " LIMIT " + w.Arg(4)
		if got != tt.want {
			t.Errorf("numbered=%v: %q, want %q", tt.d.Numbered, got, tt.want)
		}
		if !reflect.DeepEqual(w.Args, []any{1, 2, 3, 4}) {
			t.Errorf("numbered=%v: args = %v, want [1 2 3 4]", tt.d.Numbered, w.Args)
		}
	}
	if w := (Dialect{}).Where(); w.String() != "" {
		t.Errorf("empty Where = %q, want \"\"", w.String())
	}
}
