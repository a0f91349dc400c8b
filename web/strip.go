package web

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/views"
)

// The overview draws, beside each held lock, a strip of its last hour: its
// tenures in turn, a tick at each handover, a diamond at each expiry and a
// dot at each critical or warning finding, so that the lock in trouble
// stands out before anyone reads a row. Info findings (mostly exposures of
// milliseconds) are left out.

const (
	stripSpan     = time.Hour
	stripWidth    = 120.0
	stripTenures  = 200 // the newest in the hour; a busier lock draws those
	stripFindings = 50
)

// heldRows returns the overview's most recently acquired held locks, each
// with its strip, and what the strips span in words. They share one scale:
// the last hour, or less when every tenure they show began later (with a
// tenth more before it), so that a young history is not squeezed into the
// strips' last pixels.
func (s *Server) heldRows(ctx context.Context, now time.Time, loc *time.Location) ([]views.LockRow, string, error) {
	held, err := s.store.Locks(ctx, audit.LockFilter{Class: audit.ClassLock, State: audit.StateHeld, Sort: audit.SortChanged, Limit: overviewList})
	if err != nil {
		return nil, "", err
	}
	hour := audit.TimeFilter{From: now.Add(-stripSpan), To: now}
	tenures := make([][]audit.Tenure, len(held))
	findings := make([][]audit.Finding, len(held))
	first := now
	for i, l := range held {
		tf := hour
		tf.Limit = stripTenures
		if tenures[i], err = s.store.Tenures(ctx, l.ID, tf); err != nil {
			return nil, "", err
		}
		if findings[i], err = s.stripFindings(ctx, l.ID, hour); err != nil {
			return nil, "", err
		}
		if len(tenures[i]) > 0 {
			first = audit.MinTime(first, tenures[i][0].GrantedAt)
		}
	}
	from, label := hour.From, "Last hour"
	if fit := first.Add(-max(now.Sub(first)/10, 2*time.Second)); fit.After(hour.From) {
		from, label = fit, "Last "+duration(now.Sub(fit).Round(time.Second))
	}
	rows := make([]views.LockRow, 0, len(held))
	for i, l := range held {
		row := s.lockRow(l, now, loc)
		row.Acquired = stampAgo(l.AcquiredAt, loc, now) // short, beside the strip
		row.Strip = lockStrip(tenures[i], findings[i], from, now, loc)
		rows = append(rows, row)
	}
	return rows, label, nil
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

// stripFindings returns the newest critical and warning findings of lock id
// in hour, up to stripFindings of each, in time order: the strip draws no
// info findings, and a lock that resources write to often has thousands of
// those, which would crowd the others out of a read of the newest.
func (s *Server) stripFindings(ctx context.Context, id int64, hour audit.TimeFilter) ([]audit.Finding, error) {
	var out []audit.Finding
	for _, sev := range []audit.Severity{audit.SeverityCritical, audit.SeverityWarning} {
		ff := audit.FindingFilter{TimeFilter: hour, LockID: id, Severity: sev}
		ff.Limit = stripFindings
		some, err := s.store.Findings(ctx, ff)
		if err != nil {
			return nil, err
		}
		out = append(out, some...)
	}
	slices.SortFunc(out, func(a, b audit.Finding) int { return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.ID, b.ID)) })
	return out, nil
}
