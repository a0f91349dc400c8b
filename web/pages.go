package web

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/views"
	"github.com/leasewatch/leasewatch/web/present"
)

// render writes a templ component as an HTML response. It renders into a
// buffer first, so a failing component yields a clean 500 instead of half a
// page.
func render(c echo.Context, status int, comp templ.Component) error {
	var buf bytes.Buffer
	if err := comp.Render(c.Request().Context(), &buf); err != nil {
		return fmt.Errorf("render %s: %w", c.Path(), err)
	}
	return c.HTMLBlob(status, buf.Bytes())
}

// request is what the page builders take of c, asked at now, with times
// in loc.
func request(c echo.Context, now time.Time, loc *time.Location) present.Request {
	return present.Request{Query: c.QueryParams(), URI: c.Request().URL.RequestURI(), Loc: loc, Now: now}
}

func (s *Server) handleOverview(c echo.Context) error {
	now := s.now()
	loc, err := parseZone(c.QueryParams())
	if err != nil {
		return err
	}
	o, err := s.query.Overview(c.Request().Context(), now)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Overview(s.pages.Overview(request(c, now, loc), o)))
}

func (s *Server) handleLocksPage(c echo.Context) error {
	q := c.QueryParams()
	lq, err := parseLockQuery(q, locksPage, s.kinds)
	if err != nil {
		return err
	}
	loc, err := parseZone(q)
	if err != nil {
		return err
	}
	pg, err := s.query.Locks(c.Request().Context(), query.LocksQuery{Filter: lq.LockFilter, Limit: lq.Limit, Count: true})
	if err != nil {
		return err
	}
	p := s.pages.Locks(request(c, s.now(), loc), lq.LockFilter, pg, s.kinds, s.query.SourceNames())
	return render(c, http.StatusOK, views.Locks(p))
}

// parseLockPageQuery reads the lock page's path and parameters at now, and
// the zone its times are shown in.
func parseLockPageQuery(c echo.Context, now time.Time) (lq query.LockPageQuery, loc *time.Location, err error) {
	if lq.ID, err = pathID(c); err != nil {
		return lq, nil, err
	}
	q := c.QueryParams()
	if loc, err = parseZone(q); err != nil {
		return lq, nil, err
	}
	if lq.Window, lq.At, err = parseLockWindow(q, now, loc); err != nil {
		return lq, nil, err
	}
	if lq.Events, err = parseEventFilter(url.Values{"kind": q["kind"], "limit": q["limit"]}, eventsPage); err != nil {
		return lq, nil, err
	}
	if lq.Verdict = query.VerdictScope(q.Get("verdict")); !lq.Verdict.Valid() {
		return lq, nil, audit.Errorf(audit.EINVALID, "verdict: want 24h or all, not %q", lq.Verdict)
	}
	lq.Now, lq.PresetAsked = now, q.Get("window") != ""
	lq.WriteBins = present.TimelineWriteBins
	lq.Events.Before, err = parseCursor(q, "before")
	return lq, loc, err
}

func (s *Server) handleLockPage(c echo.Context) error {
	now := s.now()
	lq, loc, err := parseLockPageQuery(c, now)
	if err != nil {
		return err
	}
	live := liveRefresh(c, present.LockLiveID)
	lq.LiveOnly = live
	pg, err := s.lockPage(c.Request().Context(), lq)
	if err != nil {
		return err
	}
	p := s.pages.Lock(request(c, now, loc), lq, pg)
	if live {
		return render(c, http.StatusOK, views.LockLive(p))
	}
	return render(c, http.StatusOK, views.Lock(p))
}

// lockPage reads the lock page lq asks for, and its renewal times when its
// timeline draws any one by one.
func (s *Server) lockPage(ctx context.Context, lq query.LockPageQuery) (query.LockPage, error) {
	pg, err := s.query.LockPage(ctx, lq)
	if err == nil && present.DrawsRenewals(pg, lq.Now) {
		err = s.query.ReadRenewals(ctx, &pg)
	}
	return pg, err
}

// liveRefresh reports whether the request is htmx refreshing the page's
// live region id, which is all it swaps in: the region alone is read and
// sent.
func liveRefresh(c echo.Context, id string) bool {
	h := c.Request().Header
	return h.Get("HX-Request") == "true" && h.Get("HX-Target") == id
}

func (s *Server) handleFindingsPage(c echo.Context) error {
	q := c.QueryParams()
	fq, err := parseFindingsQuery(q, findingsPage)
	if err != nil {
		return err
	}
	loc, err := parseZone(q)
	if err != nil {
		return err
	}
	page, err := s.query.Findings(c.Request().Context(), fq)
	if err != nil {
		return err
	}
	p := s.pages.Findings(request(c, s.now(), loc), fq, page, s.query.SourceNames())
	return render(c, http.StatusOK, views.Findings(p))
}

func (s *Server) handleSourcesPage(c echo.Context) error {
	loc, err := parseZone(c.QueryParams())
	if err != nil {
		return err
	}
	now := s.now()
	v, err := s.query.SourcesPage(c.Request().Context(), now)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Sources(present.Sources(request(c, now, loc), v)))
}
