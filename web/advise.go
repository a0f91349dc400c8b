package web

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/advise"
)

// adviceWindow is the window GET /api/v1/locks/{id}/advice covers when the
// request names no start: the day up to its end.
const adviceWindow = 24 * time.Hour

// handleAPIAdvice is GET /api/v1/locks/{id}/advice: the lease settings that
// fit the stalls of the lock's holders over from..to (advise.Document).
func (s *Server) handleAPIAdvice(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	q := c.QueryParams()
	w, err := adviceQueryWindow(q, s.now())
	if err != nil {
		return err
	}
	o := advise.DefaultOptions()
	if v := q.Get("margin"); v != "" {
		if o.Margin, err = strconv.ParseFloat(v, 64); err != nil {
			return audit.Errorf(audit.EINVALID, "margin: must be a number, a share of the longest stall such as 0.5")
		}
	}
	if v := q.Get("retries"); v != "" {
		if o.Retries, err = strconv.Atoi(v); err != nil {
			return audit.Errorf(audit.EINVALID, "retries: must be an integer")
		}
	}
	if err := o.Validate(); err != nil {
		return err
	}
	ctx := c.Request().Context()
	l, err := s.store.Lock(ctx, id)
	if err != nil {
		return err
	}
	a, err := advise.Load(ctx, s.store, l, w, o)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, advise.DocumentOf(a))
}

// adviceQueryWindow reads from and to (RFC 3339): to defaults to now, from
// to a day before to; the window may be at most maxWindow long.
func adviceQueryWindow(q url.Values, now time.Time) (advise.Window, error) {
	var w advise.Window
	var err error
	if w.From, err = parseTime(q, "from"); err != nil {
		return w, err
	}
	if w.To, err = parseTime(q, "to"); err != nil {
		return w, err
	}
	if w.To.IsZero() {
		w.To = now
	}
	if w.From.IsZero() {
		w.From = w.To.Add(-adviceWindow)
	}
	switch {
	case w.To.Before(w.From):
		return w, audit.Errorf(audit.EINVALID, "to: must not be before from")
	case w.To.Sub(w.From) > maxWindow:
		return w, audit.Errorf(audit.EINVALID, "from: the window may be at most 92 days long")
	}
	return w, nil
}
