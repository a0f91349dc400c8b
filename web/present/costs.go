package present

import (
	"fmt"
	"strconv"

	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/views"
)

// topWriters is the overview's top writers of c; not shown without c.
func topWriters(c *query.Costs) views.TopWriters {
	if c == nil {
		return views.TopWriters{}
	}
	v := views.TopWriters{Shown: true, More: "/api/v1/costs?window=1h&by=namespace",
		Total: fmt.Sprintf("%s writes, %s, from %d locks", grouped(c.Total.Total()),
			writeRate(float64(c.Total.Total())/c.Window.To.Sub(c.Window.From).Seconds()), c.Groups)}
	for _, r := range c.Rows {
		v.Rows = append(v.Rows, views.WriterRow{ID: r.LockID, Source: printable(r.Source), Name: printable(r.Key),
			Writes: grouped(r.Total()), PerSecond: writeRate(r.PerSecond),
			Grants: grouped(r.Grants), Renewals: grouped(r.Renewals), Releases: grouped(r.Releases)})
	}
	return v
}

// grouped writes n with its thousands separated: 1,234,567.
func grouped(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// writeRate writes a rate of writes: two decimals below 10 a second, and
// a rate that would round to none as under 0.01.
func writeRate(r float64) string {
	if r > 0 && r < 0.005 {
		return "<0.01/s"
	}
	if r >= 10 {
		return strconv.FormatFloat(r, 'f', 0, 64) + "/s"
	}
	return strconv.FormatFloat(r, 'f', 2, 64) + "/s"
}
