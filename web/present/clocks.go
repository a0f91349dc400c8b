package present

import (
	"fmt"
	"net/url"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/views"
)

// ClocksPage is what the clocks page shows: the largest clock estimates
// the filter selects, how many it selects, and how many holders the
// estimator had no room for.
type ClocksPage struct {
	Top     []audit.ClockEstimate
	Total   int
	Filter  audit.ClockFilter
	Dropped int
}

// Clocks is the clocks page of c.
func Clocks(r Request, c ClocksPage) views.ClocksPage {
	v := views.ClocksPage{
		Live:    views.Live{ID: "clocks-live", URL: r.URI, Every: RefreshOverview},
		Now:     stampIn(r.Now, r.Loc),
		Window:  audit.ClockWindow.String(),
		Total:   c.Total,
		Dropped: c.Dropped,
	}
	for _, class := range []struct {
		label string
		class audit.Class
	}{{"all", ""}, {"locks", audit.ClassLock}, {"heartbeats", audit.ClassHeartbeat}} {
		q := url.Values{}
		for k, vs := range r.Query {
			if k != "class" {
				q[k] = vs
			}
		}
		if class.class != "" {
			q.Set("class", string(class.class))
		}
		u := "/clocks"
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		v.Classes = append(v.Classes, views.Link{Label: class.label, URL: u, Current: c.Filter.Class == class.class})
	}
	for _, e := range c.Top {
		row := views.ClockRow{
			Source: printable(e.Source), Holder: printable(e.Holder), HolderURL: holderURLOf(e.Holder),
			Heartbeat: e.Heartbeat, Offset: signedMillis(e.Offset), Ahead: e.Offset > 0,
			Samples: e.Samples, Minutes: e.Minutes, Last: stampAgo(e.Last, r.Loc, r.Now),
		}
		if e.Bounded() {
			row.Bound = "±" + millis(e.Bound)
		}
		v.Rows = append(v.Rows, row)
	}
	return v
}

// signedMillis is d in milliseconds with its sign: "+297.4 ms", "-202 ms".
func signedMillis(d time.Duration) string {
	if d >= 0 {
		return "+" + millis(d)
	}
	return "-" + millis(-d)
}

// millis is d ≥ 0 in milliseconds, to a tenth below 100 ms.
func millis(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	if ms < 100 {
		return fmt.Sprintf("%.1f ms", ms)
	}
	return fmt.Sprintf("%.0f ms", ms)
}
