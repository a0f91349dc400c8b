package present

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// TestFindingRowsFoldShortExposures: a lock's exposures to one resource
// shorter than the threshold share one row, where the newest stands, with
// their count, longest and total, anchors for the others and a link to
// each; longer ones, other resources' and other kinds keep rows of their
// own, and a fold of one is a plain row.
func TestFindingRowsFoldShortExposures(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 10, 0, 0, 123456789, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	exposure := func(id int64, from, ms int, resource string) audit.Finding {
		return audit.Finding{ID: id, LockID: 7, Lock: audit.LockKey{Source: "prod-etcd", Name: "/locks/a"}, Kind: audit.FindingExposure,
			Severity: audit.SeverityInfo, At: at(from), Until: at(from + ms), Resource: resource, Tokens: []int64{id}}
	}
	findings := []audit.Finding{ // oldest first, as the store returns them
		exposure(1, 0, 12, "db"),
		exposure(2, 1000, 1500, "db"), // longer than the threshold
		exposure(3, 3000, 30, "db"),
		exposure(4, 3500, 5, "cache"), // alone for its resource
		{ID: 5, LockID: 7, Kind: audit.FindingStaleWrite, Severity: audit.SeverityInfo, At: at(4000), Resource: "db"},
		exposure(6, 5000, 8, "db"),
	}
	rows := findingRows(findings, time.UTC, time.Second)
	var ids []int64
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	if want := []int64{6, 5, 4, 2}; !slices.Equal(ids, want) {
		t.Fatalf("rows %v, want %v (1, 3 and 6 in the row of 6)", ids, want)
	}
	fold := rows[0]
	if !slices.Equal(fold.Folded, []int64{3, 1}) || !strings.Contains(fold.Summary, "3 exposures of db, each shorter than 1s (50ms in all)") ||
		fold.Duration != "30ms longest" || fold.At.Text != stampIn(at(0), time.UTC).Text || fold.Until.Text != stampIn(at(5008), time.UTC).Text {
		t.Fatalf("folded row %+v", fold)
	}
	for _, want := range []string{"kind=exposure", "lock=7", "resource=db", "class=all"} {
		if !strings.Contains(fold.FoldURL, want) {
			t.Errorf("fold link %q lacks %q", fold.FoldURL, want)
		}
	}
	if r := rows[2]; r.FoldURL != "" || len(r.Folded) != 0 || r.Duration != "5ms" {
		t.Errorf("a lone short exposure is a plain row, got %+v", r)
	}
	if n := len(findingRows(findings, time.UTC, 0)); n != len(findings) {
		t.Errorf("threshold 0: %d rows, want one per finding (%d)", n, len(findings))
	}
}
