package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/sqlite"
)

// BenchmarkLockFindingsOfASeverity reads what the overview's strip of one
// lock reads, its newest critical and its newest warning findings of the
// hour, 50 of each at most, from a lock that resources write to often: 30,000
// info findings (rejected stale writes) in the hour and 10 warnings.
func BenchmarkLockFindingsOfASeverity(b *testing.B) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "leasewatch.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	key := audit.LockKey{Source: "etcd", Name: "/locks/orders"}
	now := time.Now()
	var findings []audit.Finding
	for i := range 30000 {
		kind := audit.FindingStaleWrite
		if i%3000 == 0 {
			kind = audit.FindingLateRenewal
		}
		findings = append(findings, audit.Finding{Lock: key, Kind: kind, Severity: kind.Severity(), Resource: "db",
			At: now.Add(-30 * time.Minute).Add(time.Duration(i) * 50 * time.Millisecond)})
	}
	if err := s.Apply(ctx, audit.Batch{Findings: findings}); err != nil {
		b.Fatal(err)
	}
	l, err := s.LockByKey(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	hour := audit.TimeFilter{From: now.Add(-time.Hour), To: now, Limit: 50}
	b.ResetTimer()
	for b.Loop() {
		n := 0
		for _, sev := range []audit.Severity{audit.SeverityCritical, audit.SeverityWarning} {
			got, err := s.Findings(ctx, audit.FindingFilter{LockID: l.ID, Severity: sev, TimeFilter: hour})
			if err != nil {
				b.Fatal(err)
			}
			n += len(got)
		}
		if n != 10 {
			b.Fatalf("read %d findings, want the 10 warnings", n)
		}
	}
}
