package web

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/query"
)

// GET /api/v1/costs: what leases cost their backends, the writes (grants,
// renewals, releases) of the last hour or day per lock, namespace, holder
// or source, the most first (query.Reader.Costs; docs/costs.md).

// costsAPI is the costs API's rows.
var costsAPI = listing{rows: query.DefaultCostLimit, most: query.MaxCostLimit}

// costsQuery is what GET /api/v1/costs asks.
type costsQuery struct {
	window time.Duration
	by     query.CostBy
	limit  int
}

// parseCostsQuery reads window (1h when absent), by (lock when absent) and
// limit, naming the parameter and the values it takes when one is wrong.
func parseCostsQuery(q url.Values) (costsQuery, error) {
	cq := costsQuery{window: time.Hour, by: query.CostByLock}
	if w := q.Get("window"); w != "" {
		i := slices.IndexFunc(query.CostWindows, func(d time.Duration) bool { return query.CostWindowName(d) == w })
		if i < 0 {
			return cq, audit.Errorf(audit.EINVALID, "window: must be one of %s", query.CostWindowNames())
		}
		cq.window = query.CostWindows[i]
	}
	if by := q.Get("by"); by != "" {
		if !slices.Contains(query.CostGroupings, query.CostBy(by)) {
			names := make([]string, len(query.CostGroupings))
			for i, g := range query.CostGroupings {
				names[i] = string(g)
			}
			return cq, audit.Errorf(audit.EINVALID, "by: must be one of %s", strings.Join(names, ", "))
		}
		cq.by = query.CostBy(by)
	}
	var err error
	cq.limit, err = costsAPI.limit(q)
	return cq, err
}

// writesJSON is a count of writes, and its rate over the window.
type writesJSON struct {
	Grants    int64   `json:"grants"`
	Renewals  int64   `json:"renewals"`
	Releases  int64   `json:"releases"`
	Writes    int64   `json:"writes"`
	PerSecond float64 `json:"per_second"`
}

// costRowJSON is one group's writes.
type costRowJSON struct {
	Key    string           `json:"key"`
	Source string           `json:"source"`
	Kind   audit.SourceKind `json:"kind"`
	LockID *int64           `json:"lock_id"` // by lock only
	writesJSON
}

func toWritesJSON(w query.Writes, perSecond float64) writesJSON {
	return writesJSON{Grants: w.Grants, Renewals: w.Renewals, Releases: w.Releases, Writes: w.Total(), PerSecond: perSecond}
}

func (s *Server) handleAPICosts(c echo.Context) error {
	cq, err := parseCostsQuery(c.QueryParams())
	if err != nil {
		return err
	}
	costs, err := s.query.Costs(c.Request().Context(), s.now(), cq.window, cq.by, cq.limit)
	if err != nil {
		return err
	}
	rows := make([]costRowJSON, 0, len(costs.Rows))
	for _, r := range costs.Rows {
		row := costRowJSON{Key: r.Key, Source: r.Source, Kind: r.Kind, writesJSON: toWritesJSON(r.Writes, r.PerSecond)}
		if cq.by == query.CostByLock {
			row.LockID = &r.LockID
		}
		rows = append(rows, row)
	}
	secs := costs.Window.To.Sub(costs.Window.From).Seconds()
	return c.JSON(http.StatusOK, map[string]any{
		"window": query.CostWindowName(cq.window), "by": cq.by,
		"from": jsonTime(costs.Window.From), "to": jsonTime(costs.Window.To),
		"groups": costs.Groups, "total": toWritesJSON(costs.Total, float64(costs.Total.Total())/secs),
		"rows": rows,
	})
}
