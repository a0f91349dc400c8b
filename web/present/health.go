package present

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/history"
	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/views"
)

// healthPanel is the lock page's leadership health over its window, from
// the window's tenures (as the page read them) and the margins of its
// newest renewals.
func healthPanel(tenures []audit.Tenure, margins []float64, capped bool) views.HealthPanel {
	h := history.HealthOf(tenures, margins)
	p := views.HealthPanel{Charts: []views.HealthChart{
		healthChart("Tenure length", h.Tenure, secondsLabel, seconds),
		healthChart("Takeover time", h.Takeover, takeoverLabel, seconds),
		healthChart("Renewal margin", h.Margin, percentLabel, percent),
	}}
	if capped {
		p.Note = fmt.Sprintf("Renewal margins of the newest %d renewals in the window.", query.HealthMargins)
	}
	return p
}

// healthChart is one distribution as bars; label names a bucket by its
// bounds, format a median.
func healthChart(title string, d history.Distribution, label func(lo, hi float64, open bool) string, format func(float64) string) views.HealthChart {
	c := views.HealthChart{Title: title, Count: d.Count}
	if d.Count > 0 {
		c.Median = format(d.Median)
	}
	most := 0
	for _, b := range d.Buckets {
		most = max(most, b.Count)
	}
	lo := math.Inf(-1)
	for _, b := range d.Buckets {
		bar := views.HealthBar{Label: label(lo, b.Below, b.Open), Count: b.Count}
		if b.Count > 0 {
			bar.Pct = max(b.Count*100/most, 5) // a bucket with samples always shows
		}
		c.Bars = append(c.Bars, bar)
		lo = b.Below
	}
	return c
}

func seconds(s float64) string {
	if s == 0 {
		return "0s"
	}
	return duration(time.Duration(s * float64(time.Second)))
}

func percent(r float64) string { return fmt.Sprintf("%.0f%%", 100*r) }

// secondsLabel names a bucket of durations in seconds.
func secondsLabel(lo, hi float64, open bool) string {
	switch {
	case open:
		return "≥ " + bound(lo)
	case math.IsInf(lo, -1):
		return "< " + bound(hi)
	}
	return bound(lo) + "–" + bound(hi)
}

// bound is a bucket's bound in seconds without its zero units: 1h, not
// 1h0m0s.
func bound(s float64) string {
	b := seconds(s)
	if t, ok := strings.CutSuffix(b, "m0s"); ok {
		b = t + "m"
	}
	if t, ok := strings.CutSuffix(b, "h0m"); ok {
		b = t + "h"
	}
	return b
}

// takeoverLabel is secondsLabel with the first bucket, under a microsecond,
// named for what it is: the next holder took the lock over directly.
func takeoverLabel(lo, hi float64, open bool) string {
	switch {
	case math.IsInf(lo, -1):
		return "direct"
	case lo < 0.001:
		return "< " + bound(hi)
	}
	return secondsLabel(lo, hi, open)
}

func percentLabel(lo, hi float64, open bool) string {
	switch {
	case open:
		return "≥ " + percent(lo)
	case math.IsInf(lo, -1):
		return "< " + percent(hi)
	}
	return percent(lo) + "–" + percent(hi)
}
