package history

import (
	"slices"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// Distribution is how many samples fell into each bucket, with their median.
type Distribution struct {
	Buckets []Bucket
	Count   int
	Median  float64 // of the samples; 0 without any
}

// Bucket is one bar of a Distribution: samples from Below of the previous
// bucket (or any) up to, not including, Below; the last bucket has no bound.
type Bucket struct {
	Below float64 // +Inf-free: the last bucket's is 0 and Open is set
	Open  bool
	Count int
}

// Health is one lock's leadership health over a window, from its tenures
// and the renewal margins the tracker recorded: how long tenures lasted
// (seconds), how long the lock stayed free from one holder's end to the
// next grant (seconds; 0 when the next took it over directly), and how much
// of the lease each renewal had left (a fraction).
type Health struct {
	Tenure   Distribution
	Takeover Distribution
	Margin   Distribution
}

// Bucket bounds of the Health distributions.
var (
	TenureBounds   = []float64{15, 60, 300, 900, 3600, 6 * 3600}
	TakeoverBounds = []float64{0.000001, 0.1, 1, 5, 30, 300}
	MarginBounds   = []float64{0.1, 0.25, 0.5, 0.75}
)

// HealthOf returns the distributions of tenures (in grant order, as
// audit.Store.Tenures returns them) and margins (each renewal's
// margin_ratio). A tenure first seen at a start (Observed) has no known
// length, and a held one none yet; a takeover counts only between two
// tenures both listed.
func HealthOf(tenures []audit.Tenure, margins []float64) Health {
	var lengths, gaps []float64
	for i, t := range tenures {
		if !t.Held() && !t.Observed {
			lengths = append(lengths, t.EndedAt.Sub(t.GrantedAt).Seconds())
		}
		if i == 0 || tenures[i-1].Held() {
			continue
		}
		prev := tenures[i-1]
		gap := time.Duration(0)
		if prev.End != audit.EndSuperseded {
			gap = max(t.GrantedAt.Sub(prev.EndedAt), 0)
		}
		gaps = append(gaps, gap.Seconds())
	}
	return Health{
		Tenure:   distribute(lengths, TenureBounds),
		Takeover: distribute(gaps, TakeoverBounds),
		Margin:   distribute(margins, MarginBounds),
	}
}

// distribute counts samples into the buckets below bounds, and one above.
func distribute(samples []float64, bounds []float64) Distribution {
	d := Distribution{Buckets: make([]Bucket, len(bounds)+1), Count: len(samples)}
	for i, b := range bounds {
		d.Buckets[i].Below = b
	}
	d.Buckets[len(bounds)].Open = true
	for _, s := range samples {
		i, _ := slices.BinarySearchFunc(bounds, s, func(b, s float64) int {
			if b <= s {
				return -1
			}
			return 1
		})
		d.Buckets[i].Count++
	}
	if len(samples) > 0 {
		sorted := slices.Sorted(slices.Values(samples))
		d.Median = sorted[len(sorted)/2]
	}
	return d
}
