package present

import (
	"fmt"
	"strconv"
	"time"

	"github.com/leasewatch/leasewatch/audit/advise"
	"github.com/leasewatch/leasewatch/views"
)

// advicePanel is the lock page's lease settings sized to the stalls of its
// window, from the advice the page's reads gave.
func advicePanel(a advise.Advice) views.AdvicePanel {
	p := views.AdvicePanel{APIURL: fmt.Sprintf("/api/v1/locks/%d/advice", a.Lock.ID)}
	if a.Gaps.Count == 0 {
		p.Empty = "No gap between two writes of one holder in this window: no stall to size the lease to."
		return p
	}
	p.Gaps = append(p.Gaps, adviceGaps("every holder", a.Gaps, a.Needed, a.Short))
	for _, h := range a.Holders {
		p.Gaps = append(p.Gaps, adviceGaps(printable(h.Holder), h.Gaps, h.Needed, h.Short))
	}
	c, s := a.Current, a.Suggested
	p.Settings = []views.AdviceSettings{
		{Name: "current", Lease: advise.Duration(c.LeaseDuration), RenewDeadline: "not shown by the backend",
			RetryPeriod: advise.Duration(c.RetryPeriod) + " (the median gap)", Writes: perSecond(c.WritesPerSecond)},
		{Name: "suggested", Lease: advise.Duration(s.LeaseDuration), RenewDeadline: advise.Duration(s.RenewDeadline),
			RetryPeriod: advise.Duration(s.RetryPeriod), Writes: perSecond(s.WritesPerSecond)},
	}
	p.Flags = advise.Flags(a)
	p.Note = fmt.Sprintf("Margin %g of the longest stall, %d retries per renew deadline.", a.Options.Margin, a.Options.Retries)
	if a.Capped {
		p.Note += fmt.Sprintf(" Gaps of the newest %d renewals in the window, and of its expiries.", a.Renewals)
	}
	return p
}

func adviceGaps(holder string, g advise.Gaps, needed time.Duration, short bool) views.AdviceGaps {
	return views.AdviceGaps{Holder: holder, Count: strconv.Itoa(g.Count), P50: advise.Duration(g.P50), P90: advise.Duration(g.P90),
		P99: advise.Duration(g.P99), Longest: advise.Duration(g.Max), Needed: advise.Duration(needed), Short: short}
}

func perSecond(w float64) string { return strconv.FormatFloat(w, 'f', 3, 64) }
