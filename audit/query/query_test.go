package query

import (
	"testing"

	"github.com/leasewatch/leasewatch/audit"
)

// TestOlderPage: a page read as one more than its limit has older items
// exactly when the one more came back; at the store's cap, where it cannot,
// a full page is taken to have them.
func TestOlderPage(t *testing.T) {
	seq := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		read, limit int
		keep        int
		older       bool
	}{
		{"fewer", 3, 5, 3, false},
		{"exactly the limit", 5, 5, 5, false},
		{"one more", 6, 5, 5, true},
		{"at the store's cap", audit.MaxListLimit, audit.MaxListLimit, audit.MaxListLimit, true},
		{"under the store's cap", audit.MaxListLimit - 1, audit.MaxListLimit, audit.MaxListLimit - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items, older := olderPage(seq(tc.read), tc.limit)
			if len(items) != tc.keep || older != tc.older {
				t.Fatalf("olderPage(%d items, %d) = %d items, older %v; want %d, %v", tc.read, tc.limit, len(items), older, tc.keep, tc.older)
			}
			if tc.read > tc.keep && items[0] != tc.read-tc.keep {
				t.Errorf("kept from item %d, want the newest %d (from %d)", items[0], tc.keep, tc.read-tc.keep)
			}
		})
	}
}
