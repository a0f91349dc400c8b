package present

import (
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/a-h/templ"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/review"
	"github.com/leasewatch/leasewatch/views"
)

// ReviewExports are what a review's exports list at most, which the page
// tells of what it leaves out.
type ReviewExports struct {
	Handovers int // per lock
	Writes    int // per handover
}

// reviewValues is the query string of rq, with its window spelled out.
func reviewValues(rq review.Query) url.Values {
	v := url.Values{}
	v.Set("from", rq.Window.From.UTC().Format(time.RFC3339Nano))
	v.Set("to", rq.Window.To.UTC().Format(time.RFC3339Nano))
	for _, src := range rq.Sources {
		v.Add("source", src)
	}
	for _, l := range rq.Locks {
		v.Add("lock", l)
	}
	return v
}

func reviewURL(path string, v url.Values) templ.SafeURL {
	return templ.SafeURL((&url.URL{Path: path, RawQuery: v.Encode()}).String())
}

// timelineURL is a lock's page over a window.
func timelineURL(id int64, from, to time.Time) templ.SafeURL {
	v := url.Values{}
	v.Set("from", from.UTC().Format(time.RFC3339Nano))
	v.Set("to", to.UTC().Format(time.RFC3339Nano))
	return reviewURL("/locks/"+strconv.FormatInt(id, 10), v)
}

// Review is the review page of r, the review rq asked for, at now;
// message, when not "", says why the review is not shown (too many locks).
func Review(rq review.Query, r review.Report, now time.Time, exports ReviewExports, message string) views.ReviewPage {
	v := reviewValues(rq)
	p := views.ReviewPage{
		Filter: views.ReviewFilter{
			From: rq.Window.From.UTC().Format(time.RFC3339Nano),
			To:   rq.Window.To.UTC().Format(time.RFC3339Nano),
		},
		Window:      windowText(rq.Window),
		MarkdownURL: reviewURL("/review.md", v),
		JSONURL:     reviewURL("/review.json", v),
		Notes:       printables(r.Notes),
		Quiet:       r.Quiet,
		Handovers:   r.Handovers(),
		Message:     printable(message),
	}
	for i, src := range rq.Sources {
		if i == 0 {
			p.Filter.Source = src
		} else {
			p.Filter.Extra = append(p.Filter.Extra, views.ReviewParam{Name: "source", Value: src})
		}
	}
	for i, l := range rq.Locks {
		if i == 0 {
			p.Filter.Lock = l
		} else {
			p.Filter.Extra = append(p.Filter.Extra, views.ReviewParam{Name: "lock", Value: l})
		}
	}
	now = now.UTC()
	for _, preset := range []struct {
		label string
		d     time.Duration
	}{{"last 15 min", 15 * time.Minute}, {"last hour", time.Hour}, {"last 6 h", 6 * time.Hour}, {"last 24 h", 24 * time.Hour}} {
		pv := reviewValues(rq)
		pv.Set("from", now.Add(-preset.d).Format(time.RFC3339))
		pv.Set("to", now.Format(time.RFC3339))
		p.Presets = append(p.Presets, views.ReviewLink{Label: preset.label, URL: reviewURL("/review", pv)})
	}
	for _, l := range r.Locks {
		p.Locks = append(p.Locks, reviewLock(rq, l, exports))
	}
	return p
}

// reviewLock is one lock's part of the review page.
func reviewLock(rq review.Query, l review.LockReport, exports ReviewExports) views.ReviewLock {
	vl := views.ReviewLock{
		ID:          l.Lock.ID,
		Source:      printable(l.Lock.Source),
		Name:        printable(l.Lock.Name),
		Kind:        string(l.Lock.Kind),
		TimelineURL: timelineURL(l.Lock.ID, rq.Window.From, rq.Window.To),
		Verdict:     string(l.Verdict.Kind),
		VerdictURL:  withQuery(fmt.Sprintf("/locks/%d", l.Lock.ID), url.Values{"from": {rq.Window.From.UTC().Format(time.RFC3339Nano)}, "to": {rq.Window.To.UTC().Format(time.RFC3339Nano)}}) + "#verdict",
	}
	switch {
	case l.Omitted > 0:
		vl.Omitted = fmt.Sprintf("%d earlier handovers in this window are not shown (the page shows the newest %d of this lock; the exports up to %d): narrow the window or review this lock alone to see them.",
			l.Omitted, len(l.Handovers), exports.Handovers)
	case l.Omitted < 0:
		vl.Omitted = fmt.Sprintf("Earlier handovers in this window are not shown (the page shows the newest %d of this lock; the exports up to %d): narrow the window or review this lock alone to see them.",
			len(l.Handovers), exports.Handovers)
	}
	for i, h := range l.Handovers {
		vl.Handovers = append(vl.Handovers, handoverView(l.Lock.ID, i, h, exports.Writes))
	}
	return vl
}

// handoverView is handover h, the i-th of lock lockID; exportWrites is how
// many of its writes the exports list.
func handoverView(lockID int64, i int, h review.Handover, exportWrites int) views.ReviewHandover {
	prev, next := h.Previous, h.Next
	// The timeline around the handover: from a minute before the previous
	// holder's end to a minute after the grant.
	from := prev.EndedAt
	if from.IsZero() || from.After(next.GrantedAt) {
		from = next.GrantedAt
	}
	v := views.ReviewHandover{
		Anchor:        fmt.Sprintf("handover-%d-%d", lockID, i+1),
		At:            reviewStamp(h.At()),
		TimelineURL:   timelineURL(lockID, from.Add(-time.Minute), next.GrantedAt.Add(time.Minute)),
		PrevHolder:    printable(prev.Holder),
		PrevHolderURL: holderURLOf(prev.Holder),
		PrevToken:     token(prev.Token),
		PrevGranted:   reviewStamp(prev.GrantedAt),
		PrevRenewed:   reviewStamp(prev.LastRenewedAt),
		PrevRenewals:  strconv.FormatInt(prev.Renewals, 10),
		PrevLease:     reviewDuration(prev.LeaseDuration),
		PrevExpires:   reviewStamp(prev.ExpiresAt),
		PrevEnded:     reviewStamp(prev.EndedAt),
		End:           string(prev.End),
		EndInferred:   h.EndInferred,
		NextHolder:    printable(next.Holder),
		NextHolderURL: holderURLOf(next.Holder),
		NextToken:     token(next.Token),
		NextInferred:  h.GrantInferred,
		Gap:           gapWords(h),
		Narrative:     printable(h.Narrative),
	}
	if h.Overlap != nil {
		v.Overlap = review.Human(h.Overlap.Duration())
	}
	for _, e := range h.Exposures {
		v.Exposures = append(v.Exposures, views.ReviewExposure{Resource: printable(e.Resource), Duration: review.Human(e.Duration()), From: reviewStamp(e.From), To: reviewStamp(e.To)})
	}
	for _, b := range h.Blind {
		text := fmt.Sprintf("%s to %s", reviewStamp(b.From).Text, reviewStamp(b.To).Text)
		if b.Reason != "" {
			text += " (" + b.Reason + ")"
		}
		v.Blind = append(v.Blind, printable(text))
	}
	for _, f := range h.Findings {
		v.Findings = append(v.Findings, views.ReviewNote{Kind: string(f.Kind), Severity: string(f.Severity), Summary: printable(f.Summary)})
	}
	handoverWrites(&v, h, exportWrites)
	return v
}

// handoverWrites lists h's writes in v, and counts those not listed.
func handoverWrites(v *views.ReviewHandover, h review.Handover, exportWrites int) {
	c := h.WriteCount
	v.WritesTotal = c.Total
	v.Unfenced, v.Stale = c.Unfenced > 0, c.Stale > 0
	var listed review.WriteCount // to count the writes not listed
	for _, w := range h.Writes {
		v.Writes = append(v.Writes, views.ReviewWrite{
			At: reviewStamp(w.At), Resource: printable(w.Resource), Holder: printable(w.Holder), Token: token(w.Token),
			Outcome: string(w.Outcome), Verdict: string(w.Verdict),
		})
		listed.Add(w)
	}
	if more := c.Total - len(h.Writes); more > 0 {
		v.WritesMore = fmt.Sprintf("%d of %d writes are listed; %d more (%d accepted, %d rejected",
			len(h.Writes), c.Total, more, c.Accepted-listed.Accepted, c.Rejected-listed.Rejected)
		if flagged := c.Flagged() - listed.Flagged(); flagged > 0 {
			v.WritesMore += fmt.Sprintf(", %d of them stale or unfenced", flagged)
		}
		v.WritesMore += fmt.Sprintf(") are left out. The exports list up to %d a handover; the lock's timeline and its events in the API show every one.", exportWrites)
	}
}

func gapWords(h review.Handover) string {
	switch {
	case h.Previous.End == audit.EndSuperseded && h.Previous.ExpiresAt.IsZero():
		return "unknown"
	case h.Gap <= -time.Millisecond:
		return "−" + review.Human(-h.Gap) + " (overlap)"
	case h.Gap < time.Millisecond:
		return "none"
	}
	return review.Human(h.Gap)
}

func reviewDuration(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return review.Human(d)
}

// windowText says the window in words.
func windowText(w review.Window) string {
	return fmt.Sprintf("%s to %s (%s)", reviewStamp(w.From).Text, reviewStamp(w.To).Text, review.Human(w.To.Sub(w.From)))
}

// reviewStamp formats t for the review page, in UTC to millisecond precision.
func reviewStamp(t time.Time) views.Stamp {
	if t.IsZero() {
		return views.Stamp{}
	}
	t = t.UTC()
	return views.Stamp{Text: t.Format("2006-01-02 15:04:05.000Z"), ISO: t.Format(time.RFC3339Nano)}
}
