package query

import (
	"context"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit/verdict"
)

// TestVerdictCacheBounded: the cache keeps at most maxCachedVerdicts, each
// reason with one finding ID and the count of them all, and judges a key
// again once its verdict is VerdictFresh old.
func TestVerdictCacheBounded(t *testing.T) {
	c := newVerdictCache()
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	loads := 0
	load := func(context.Context) (verdict.Verdict, error) {
		loads++
		return verdict.Verdict{Kind: verdict.Fenced, Reasons: []verdict.Reason{{Findings: []int64{1, 2, 3}, Count: 3}, {}}}, nil
	}
	for i := range maxCachedVerdicts + 10 {
		j, err := c.get(ctx, verdictKey{lock: int64(i)}, t0, load)
		if err != nil {
			t.Fatal(err)
		}
		rs := j.Verdict.Reasons
		if rs[0].Count != 3 || len(rs[0].Findings) != 1 || rs[1].Count != 0 || len(rs[1].Findings) != 0 {
			t.Fatalf("kept reasons %+v, want one ID of 3, then none", rs)
		}
	}
	if n := len(c.entries); n > maxCachedVerdicts {
		t.Fatalf("%d verdicts kept, want at most %d", n, maxCachedVerdicts)
	}
	key := verdictKey{lock: maxCachedVerdicts + 9} // Judged last: still kept
	before := loads
	if _, err := c.get(ctx, key, t0.Add(VerdictFresh-time.Millisecond), load); err != nil || loads != before {
		t.Fatalf("within the round: Judged again (%d loads, err %v)", loads-before, err)
	}
	if _, err := c.get(ctx, key, t0.Add(VerdictFresh), load); err != nil || loads != before+1 {
		t.Fatalf("a round later: %d loads, want 1 (err %v)", loads-before, err)
	}
}
