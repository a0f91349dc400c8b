package web

import "time"

// The time policy of what clients send (docs/input.md, "Times"). A write
// report's at must be one the service can keep and one that has happened:
// from 1678 on (int64 Unix nanoseconds begin in September 1677) and at
// most maxReportSkew after the server received it, which allows for clocks
// a little ahead of the server's. A report dated later would move its
// source's last event and raise findings in the future, so it is refused
// rather than stored. Query times are bounds, not facts: they are clamped
// to what is kept (audit.BoundTime), so a window reaching past 2262 still
// covers what lies inside it.
const maxReportSkew = 5 * time.Minute

// earliestReport is the earliest at accepted: the first whole year the
// store's encoding holds.
var earliestReport = time.Date(1678, 1, 1, 0, 0, 0, 0, time.UTC)

// reportTimeProblem says what is wrong with a report's at, received at
// now; "" when nothing is.
func reportTimeProblem(at, now time.Time) string {
	switch {
	case at.Before(earliestReport):
		return "must not be before " + earliestReport.Format(time.RFC3339) + ", the earliest time leasewatch keeps"
	case at.After(now.Add(maxReportSkew)):
		return "must not be more than " + maxReportSkew.String() + " after the time the server received the report (" +
			now.UTC().Format(time.RFC3339) + ")"
	}
	return ""
}
