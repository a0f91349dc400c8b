package advise_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/advise"
)

// BenchmarkOf measures the computation alone at the lock page's sample (the
// health panel's 500 renewals, the page's 2,000 tenures) and at the API's
// caps (10,000 renewals, 2,000 tenures). Run with:
// go test -run '^$' -bench Of ./audit/advise/
func BenchmarkOf(b *testing.B) {
	for _, n := range []int{500, advise.MaxRenewals} {
		s := benchSample(n, advise.MaxTenures)
		b.Run(fmt.Sprintf("renewals=%d", n), func(b *testing.B) {
			for b.Loop() {
				advise.Of(s, advise.DefaultOptions())
			}
		})
	}
}

// benchSample is tenures of ten holders taking turns, each renewing every
// 2 s, the newest of them with renewals renewals in all.
func benchSample(renewals, tenures int) advise.Sample {
	s := advise.Sample{Lock: audit.Lock{LeaseDuration: 15 * time.Second}, RenewalsFrom: t0}
	per := max(renewals/tenures, 1)
	for i := range tenures {
		start := time.Duration(i*(per+1)*2) * time.Second
		s.Tenures = append(s.Tenures, audit.Tenure{Seq: int64(i + 1), Holder: fmt.Sprintf("node-%d", i%10), GrantedAt: t0.Add(start),
			LastRenewedAt: t0.Add(start + time.Duration(per*2)*time.Second), EndedAt: t0.Add(start + time.Duration(per*2+1)*time.Second), End: audit.EndExpired})
		for j := 1; j <= per && len(s.Renewals) < renewals; j++ {
			s.Renewals = append(s.Renewals, advise.Renewal{At: t0.Add(start + time.Duration(j*2)*time.Second), Seq: int64(i + 1)})
		}
	}
	return s
}
