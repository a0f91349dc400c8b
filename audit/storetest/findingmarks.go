package storetest

import (
	"context"
	"testing"

	"github.com/leasewatch/leasewatch/audit"
)

// FindingsByResource counts one kind's findings of one lock per resource,
// both ends of the window inclusive, leaving out other kinds, other locks
// and findings outside the window.
func testFindingsByResource(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key, other := audit.LockKey{Source: "src", Name: "orders"}, audit.LockKey{Source: "src", Name: "billing"}
	stale := func(k audit.LockKey, resource string, sec int) audit.Finding {
		return audit.Finding{Lock: k, Kind: audit.FindingStaleWrite, Severity: audit.SeverityInfo, At: At(sec), Resource: resource, Tokens: []int64{1, 2}}
	}
	Apply(t, s, audit.Batch{Findings: []audit.Finding{
		stale(key, "db", -1),
		stale(key, "db", 0),
		stale(key, "db", 4),
		stale(key, "cache", 10),
		stale(key, "cache", 3),
		stale(key, "queue", 11),
		stale(other, "db", 5),
		{Lock: key, Kind: audit.FindingUnfencedWrite, Severity: audit.SeverityCritical, At: At(5), Resource: "db", Tokens: []int64{1, 2}},
	}})
	id := LockByKey(t, s, key).ID

	got, err := s.FindingsByResource(ctx, id, audit.FindingStaleWrite, audit.TimeFilter{From: At(0), To: At(10)})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "stale writes per resource in the window", got, []audit.ResourceFindings{
		{Resource: "cache", N: 2, First: At(3)},
		{Resource: "db", N: 2, First: At(0)},
	})
	got, err = s.FindingsByResource(ctx, id, audit.FindingStaleWrite, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "stale writes per resource over all time", got, []audit.ResourceFindings{
		{Resource: "cache", N: 2, First: At(3)},
		{Resource: "db", N: 3, First: At(-1)},
		{Resource: "queue", N: 1, First: At(11)},
	})
	got, err = s.FindingsByResource(ctx, id, audit.FindingUnfencedWrite, audit.TimeFilter{From: At(6)})
	if err != nil || len(got) != 0 {
		t.Errorf("FindingsByResource(unfenced after the only one) = %v, %v; want none", got, err)
	}
	if _, err := s.FindingsByResource(ctx, 999, audit.FindingStaleWrite, audit.TimeFilter{}); audit.ErrorCode(err) != audit.ENOTFOUND {
		t.Errorf("FindingsByResource(missing lock) err = %v, want ENOTFOUND", err)
	}
}

// WriteMarks names the writes a lock's stale_write and unfenced_write
// findings are about, as its findings say (WriteMarkOf), in time order, the
// newest Limit when more match; no other kind, lock or time.
func testWriteMarks(t *testing.T, h Harness) {
	s := h.Open(t)
	ctx := context.Background()
	key, other := audit.LockKey{Source: "src", Name: "orders"}, audit.LockKey{Source: "src", Name: "billing"}
	finding := func(k audit.LockKey, kind audit.FindingKind, resource string, sec int, tokens ...int64) audit.Finding {
		return audit.Finding{Lock: k, Kind: kind, Severity: kind.Severity(), At: At(sec), Resource: resource, Tokens: tokens, Summary: resource}
	}
	Apply(t, s, audit.Batch{Findings: []audit.Finding{
		finding(key, audit.FindingStaleWrite, "db", 1, 3, 4),
		finding(key, audit.FindingUnfencedWrite, "cache", 2, 5),
		finding(key, audit.FindingStaleWrite, "cache", 2, 6, 7),
		finding(key, audit.FindingStaleWrite, "db", 4),
		finding(key, audit.FindingExposure, "db", 3, 4),
		finding(key, audit.FindingUnfencedWrite, "db", 9, 1<<62+1),
		finding(other, audit.FindingStaleWrite, "db", 5, 1),
	}})
	id := LockByKey(t, s, key).ID
	all, err := s.Findings(ctx, audit.FindingFilter{LockID: id})
	if err != nil {
		t.Fatal(err)
	}
	var want []audit.WriteMark
	for _, f := range all {
		if m, ok := audit.WriteMarkOf(f); ok {
			want = append(want, m)
		}
	}
	if len(want) != 5 {
		t.Fatalf("%d findings about a write stored, want 5", len(want))
	}

	got, err := s.WriteMarks(ctx, id, audit.TimeFilter{})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "every mark", got, want)
	got, err = s.WriteMarks(ctx, id, audit.TimeFilter{From: At(2), To: At(4)})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "the window's, both ends", got, want[1:4])
	got, err = s.WriteMarks(ctx, id, audit.TimeFilter{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	Equal(t, "the newest two", got, want[3:])
	if _, err := s.WriteMarks(ctx, 999, audit.TimeFilter{}); audit.ErrorCode(err) != audit.ENOTFOUND {
		t.Errorf("WriteMarks(missing lock) err = %v, want ENOTFOUND", err)
	}
}
