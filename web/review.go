package web

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/review"
	"github.com/leasewatch/leasewatch/views"
)

// The incident review: GET /review (the page), /review.md and /review.json
// (its exports). All three take the same query string:
//
//	from, to   RFC 3339; default the hour before now (to alone: the hour before it)
//	source     a source name; repeat for several
//	lock       a lock id or SOURCE/NAME; repeat for several (overrides source)

// Caps of one review from the dashboard.
const (
	reviewMaxLocks     = review.DefaultMaxLocks
	reviewMaxHandovers = 100 // per lock on the page and in its exports; the newest are kept
	reviewWriteRows    = 12  // writes listed per handover on the page; the rest are counted
	reviewExportWrites = 200 // and in its exports
	// reviewPageHandovers caps the handovers on the page, shared equally
	// among its locks (at least review.MinHandoversPerLock each); the
	// exports keep reviewMaxHandovers per lock.
	reviewPageHandovers = 50
	// reviewCacheWrites is how many write reports the reviews keep for the
	// next (review.WriteCache): about 24 bytes each, 12 MiB in all, room for
	// what the reviews of twenty busy locks read, each at most 10,000 writes
	// of each outcome.
	reviewCacheWrites = 1 << 19
)

// reviewQuery reads a review request's query string. It resolves the default
// window, so export links carry the exact window the page showed.
func (s *Server) reviewQuery(q url.Values) (review.Query, error) {
	from, err := parseTime(q, "from")
	if err != nil {
		return review.Query{}, err
	}
	to, err := parseTime(q, "to")
	if err != nil {
		return review.Query{}, err
	}
	if to.IsZero() {
		to = s.now().UTC()
		if !from.IsZero() && from.After(to) {
			to = from.Add(time.Hour)
		}
	}
	if from.IsZero() {
		from = to.Add(-time.Hour)
	}
	rq := review.Query{
		Window:   review.Window{From: from, To: to},
		Sources:  nonEmpty(q["source"]),
		Locks:    nonEmpty(q["lock"]),
		MaxLocks: reviewMaxLocks,
		Purposes: s.query.Purposes(),
		Cache:    s.reviewWrites,
		Options:  review.Options{MaxHandovers: reviewMaxHandovers},
	}
	if err := rq.Validate(); err != nil {
		return review.Query{}, err
	}
	return rq, nil
}

func nonEmpty(vs []string) []string {
	var out []string
	for _, v := range vs {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
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

func (s *Server) handleReviewPage(c echo.Context) error {
	rq, err := s.reviewQuery(c.QueryParams())
	if err != nil {
		return err
	}
	rq.MaxHandoversTotal = reviewPageHandovers
	rq.MaxWrites = reviewWriteRows
	r, err := s.loadReview(c.Request().Context(), rq)
	page := reviewPage(rq, r, s.now())
	if review.IsTooManyLocks(err) {
		// Not a failure: show the page with the message and the form to narrow it.
		page.Message = printable(err.Error())
		return render(c, http.StatusOK, views.Review(page))
	}
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Review(page))
}

func (s *Server) handleReviewMarkdown(c echo.Context) error {
	return s.exportReview(c, "md", "text/markdown; charset=utf-8", review.WriteMarkdown)
}

func (s *Server) handleReviewJSON(c echo.Context) error {
	return s.exportReview(c, "json", echo.MIMEApplicationJSON, review.WriteJSON)
}

// exportReview answers a review export as a download. Its errors are
// written in the export's own format (handleError): JSON for .json, text
// for .md.
func (s *Server) exportReview(c echo.Context, ext, contentType string, write func(w io.Writer, r review.Report) error) error {
	rq, err := s.reviewQuery(c.QueryParams())
	if err != nil {
		return err
	}
	rq.MaxWrites = reviewExportWrites
	r, err := s.loadReview(c.Request().Context(), rq)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := write(&buf, r); err != nil {
		return fmt.Errorf("write review: %w", err)
	}
	name := fmt.Sprintf("leasewatch-review-%s.%s", rq.Window.From.UTC().Format("20060102T150405Z"), ext)
	h := c.Response().Header()
	h.Set(echo.HeaderContentDisposition, fmt.Sprintf("attachment; filename=%q", name))
	return c.Blob(http.StatusOK, contentType, buf.Bytes())
}

// loadReview builds a review. A review reads much more than a page, so at
// most reviewTurns are built at a time, and the rest wait their turn: under
// many people at once they queue instead of piling up in memory.
func (s *Server) loadReview(ctx context.Context, rq review.Query) (review.Report, error) {
	if !s.reviews.TryAcquire(1) {
		s.metrics.reviewsWaiting.Inc()
		err := s.reviews.Acquire(ctx, 1)
		s.metrics.reviewsWaiting.Dec()
		if err != nil {
			return review.Report{}, err
		}
	}
	defer s.reviews.Release(1)
	return review.Load(ctx, s.store, rq)
}

// reviewTurns is how many reviews are built at once. A review in progress
// holds a page of events and what its handovers list (a few MB at most), so
// this bounds their memory. It is generous on purpose: the Go scheduler
// shares the CPU among goroutines, so under hundreds of ingest requests a
// few turns would starve reviews: with 16 turns, 10 of 4,393 reviews
// in a 30-minute ingest load waited past the client's 30 s.
const reviewTurns = 64

// reviewPage builds the page's view model.
func reviewPage(rq review.Query, r review.Report, now time.Time) views.ReviewPage {
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
				l.Omitted, len(l.Handovers), reviewMaxHandovers)
		case l.Omitted < 0:
			vl.Omitted = fmt.Sprintf("Earlier handovers in this window are not shown (the page shows the newest %d of this lock; the exports up to %d): narrow the window or review this lock alone to see them.",
				len(l.Handovers), reviewMaxHandovers)
		}
		for i, h := range l.Handovers {
			vl.Handovers = append(vl.Handovers, handoverView(l.Lock.ID, i, h))
		}
		p.Locks = append(p.Locks, vl)
	}
	return p
}

func handoverView(lockID int64, i int, h review.Handover) views.ReviewHandover {
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
		PrevToken:     reviewToken(prev.Token),
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
		NextToken:     reviewToken(next.Token),
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
	c := h.WriteCount
	v.WritesTotal = c.Total
	v.Unfenced, v.Stale = c.Unfenced > 0, c.Stale > 0
	var listed review.WriteCount // to count the writes not listed
	for _, w := range h.Writes {
		v.Writes = append(v.Writes, views.ReviewWrite{
			At: reviewStamp(w.At), Resource: printable(w.Resource), Holder: printable(w.Holder), Token: reviewToken(w.Token),
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
		v.WritesMore += fmt.Sprintf(") are left out. The exports list up to %d a handover; the lock's timeline and its events in the API show every one.", reviewExportWrites)
	}
	return v
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

func reviewToken(t *int64) string {
	if t == nil {
		return ""
	}
	return strconv.FormatInt(*t, 10)
}
