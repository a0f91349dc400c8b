package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit/recheck"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// recheckAPI is the listing of GET /api/v1/locks/{id}/recheck: at most
// recheck.MaxOperations operations, all of them unless asked for fewer.
var recheckAPI = listing{rows: recheck.MaxOperations, most: recheck.MaxOperations}

// handleAPIRecheck is GET /api/v1/locks/{id}/recheck?from=&to=&limit=: the
// lock's history over the window (default: its whole retained history, up
// to now, as for its verdict) as operations Porcupine checks, in
// recheck.History's JSON (docs/recheck.md).
func (s *Server) handleAPIRecheck(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	f, err := parseTimeFilter(c.QueryParams(), recheckAPI)
	if err != nil {
		return err
	}
	h, err := recheck.Load(c.Request().Context(), s.query.Store(), id, verdict.Window{From: f.From, To: f.To}, f.Limit, s.now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h)
}
