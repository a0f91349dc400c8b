package web

import (
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/views"
	"github.com/leasewatch/leasewatch/web/present"
)

// The clocks page and GET /api/v1/clocks: each holder's clock offset from
// leasewatch's (audit.HolderClocks), the largest either way first. Both
// read the estimator in memory, never the store.

// clocksList is the clocks page's and API's rows: every class unless asked,
// since a node's clock matters as much as a leader's.
var clocksList = listing{rows: 100, most: maxPageRows}

// parseClockFilter reads source, holder, class and limit.
func parseClockFilter(q url.Values) (audit.ClockFilter, error) {
	f := audit.ClockFilter{Source: q.Get("source"), Holder: q.Get("holder")}
	var err error
	if f.Class, err = clocksList.classOf(q); err != nil {
		return f, err
	}
	f.Limit, err = clocksList.limit(q)
	return f, err
}

// readClocks reads the largest estimates f selects; none without an
// estimator.
func (s *Server) readClocks(c echo.Context) (present.ClocksPage, error) {
	f, err := parseClockFilter(c.QueryParams())
	if err != nil || s.clocks == nil {
		return present.ClocksPage{Filter: f}, err
	}
	p := present.ClocksPage{Filter: f}
	p.Top, p.Total = s.clocks.Largest(s.now(), f)
	_, p.Dropped = s.clocks.Stats()
	return p, nil
}

func (s *Server) handleClocksPage(c echo.Context) error {
	loc, err := parseZone(c.QueryParams())
	if err != nil {
		return err
	}
	now := s.now()
	p, err := s.readClocks(c)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Clocks(present.Clocks(request(c, now, loc), p)))
}

// clockJSON is one holder's clock estimate in the API.
type clockJSON struct {
	Source   string  `json:"source"`
	Holder   string  `json:"holder"`
	Class    string  `json:"class"`
	OffsetMS int64   `json:"offset_ms"`
	BoundMS  *int64  `json:"bound_ms"`
	Samples  int     `json:"samples"`
	Minutes  int     `json:"minutes"`
	LastAt   *string `json:"last_at"`
}

func (s *Server) handleAPIClocks(c echo.Context) error {
	p, err := s.readClocks(c)
	if err != nil {
		return err
	}
	out := make([]clockJSON, 0, len(p.Top))
	for _, e := range p.Top {
		cj := clockJSON{Source: e.Source, Holder: e.Holder, Class: string(audit.ClassLock), OffsetMS: e.Offset.Milliseconds(),
			Samples: e.Samples, Minutes: e.Minutes, LastAt: jsonTime(e.Last)}
		if e.Heartbeat {
			cj.Class = string(audit.ClassHeartbeat)
		}
		if e.Bounded() {
			ms := e.Bound.Milliseconds() // 0 is a bound here, not unknown
			cj.BoundMS = &ms
		}
		out = append(out, cj)
	}
	return c.JSON(http.StatusOK, map[string]any{"clocks": out, "total": p.Total, "window_ms": audit.ClockWindow.Milliseconds()})
}
