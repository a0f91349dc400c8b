package web

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit/review"
	"github.com/leasewatch/leasewatch/views"
	"github.com/leasewatch/leasewatch/web/present"
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

// reviewExports are the exports' caps, which the page tells of.
var reviewExports = present.ReviewExports{Handovers: reviewMaxHandovers, Writes: reviewExportWrites}

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

func (s *Server) handleReviewPage(c echo.Context) error {
	rq, err := s.reviewQuery(c.QueryParams())
	if err != nil {
		return err
	}
	rq.MaxHandoversTotal = reviewPageHandovers
	rq.MaxWrites = reviewWriteRows
	r, err := s.loadReview(c.Request().Context(), rq)
	var message string
	if review.IsTooManyLocks(err) {
		// Not a failure: show the page with the message and the form to narrow it.
		message, err = err.Error(), nil
	}
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Review(present.Review(rq, r, s.now(), reviewExports, message)))
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
