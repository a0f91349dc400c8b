package present

import (
	"fmt"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/views"
)

// The overview draws, beside each held lock, a strip of its last hour: its
// tenures in turn, a tick at each handover, a diamond at each expiry and a
// dot at each critical or warning finding, so that the lock in trouble
// stands out before anyone reads a row. Info findings (mostly exposures of
// milliseconds) are left out.

const stripWidth = 120.0

// heldRows are the overview's held locks, each with its strip, and what the
// strips span in words. They share one scale: the last hour, or less when
// every tenure they show began later.
func (p Pages) heldRows(o query.Overview, loc *time.Location) ([]views.LockRow, string) {
	now, from := o.Now, stripFrom(o)
	label := "Last hour"
	if from.After(now.Add(-query.HeldSpan)) {
		label = "Last " + duration(now.Sub(from).Round(time.Second))
	}
	rows := make([]views.LockRow, 0, len(o.Held))
	for _, h := range o.Held {
		row := p.lockRow(h.Lock, now, loc)
		row.Acquired = stampAgo(h.AcquiredAt, loc, now) // short, beside the strip
		row.Strip = lockStrip(h.Tenures, h.Findings, from, now, loc)
		rows = append(rows, row)
	}
	return rows, label
}

// stripFrom is where the strips of o's held locks begin: query.HeldSpan
// before o.Now, or later when every tenure they show began later (with a
// tenth more before it, two seconds at least), so that a young history is
// not squeezed into their last pixels.
func stripFrom(o query.Overview) time.Time {
	now := o.Now
	first := now
	for _, h := range o.Held {
		if len(h.Tenures) > 0 {
			first = audit.MinTime(first, h.Tenures[0].GrantedAt)
		}
	}
	from := now.Add(-query.HeldSpan)
	if fit := first.Add(-max(now.Sub(first)/10, 2*time.Second)); fit.After(from) {
		from = fit
	}
	return from
}

// lockStrip draws tenures and findings over [from, to].
func lockStrip(tenures []audit.Tenure, findings []audit.Finding, from, to time.Time, loc *time.Location) views.Strip {
	x := func(t time.Time) float64 {
		t = audit.MinTime(audit.MaxTime(t, from), to)
		return stripWidth * float64(t.Sub(from)) / float64(to.Sub(from))
	}
	st := views.Strip{Width: stripWidth}
	var handovers, expiries, serious int
	for i, t := range tenures {
		end := to
		if !t.Held() {
			end = t.EndedAt
		}
		x0, x1 := x(t.GrantedAt), x(end)
		st.Segs = append(st.Segs, views.StripSeg{X: x0, W: max(1, x1-x0), Alt: t.Seq%2 == 0,
			Title: fmt.Sprintf("%s, token %s, from %s", printable(t.Holder), token(t.Token), clock(t.GrantedAt, loc))})
		if i > 0 && !t.GrantedAt.Before(from) {
			handovers++
			st.Marks = append(st.Marks, views.StripMark{X: x0, Kind: "handover", Title: "handover to " + printable(t.Holder) + " at " + clock(t.GrantedAt, loc)})
		}
		if t.End == audit.EndExpired && !t.EndedAt.Before(from) {
			expiries++
			st.Marks = append(st.Marks, views.StripMark{X: x1, Kind: "expired", Title: printable(t.Holder) + "'s lease expired at " + clock(t.EndedAt, loc)})
		}
	}
	for _, f := range findings {
		if f.Severity != audit.SeverityCritical && f.Severity != audit.SeverityWarning {
			continue
		}
		serious++
		st.Marks = append(st.Marks, views.StripMark{X: x(f.At), Kind: string(f.Severity),
			Title: fmt.Sprintf("%s %s at %s", f.Severity, f.Kind, clock(f.At, loc))})
	}
	st.Title = fmt.Sprintf("last hour: %s, %s, %s", plural(handovers, "handover"), plural(expiries, "expiry"), plural(serious, "critical or warning finding"))
	return st
}

// plural is n and a noun, with an s unless n is 1 ("expiry" → "expiries").
func plural(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case len(noun) > 1 && noun[len(noun)-1] == 'y':
		return fmt.Sprintf("%d %sies", n, noun[:len(noun)-1])
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
