package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/views"
	"github.com/leasewatch/leasewatch/web/present"
)

// alertsNearList bounds the near-expiry list of the alerts page.
const alertsNearList = 50

// handleAlertsPage shows the live alerts (Config.Alerts), the recently
// resolved ones and the held leases near expiry, least lease left first.
func (s *Server) handleAlertsPage(c echo.Context) error {
	ctx := c.Request().Context()
	loc, err := parseZone(c.QueryParams())
	if err != nil {
		return err
	}
	now := s.now()
	var a present.AlertsPage
	if s.sources != nil {
		a.Sources = s.sources()
	}
	if s.alerts != nil {
		firing, resolved := s.alerts()
		a.Firing, a.Resolved = s.alertLocks(c, firing), s.alertLocks(c, resolved)
	}
	if a.NearExpiry, err = s.query.Expiring(ctx, now, alertsNearList); err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Alerts(s.pages.Alerts(request(c, now, loc), a)))
}

// alertLocks are alerts, each with the id of its lock when the store knows
// it, so that the page links its timeline.
func (s *Server) alertLocks(c echo.Context, alerts []alert.Alert) []present.Alert {
	out := make([]present.Alert, 0, len(alerts))
	for _, a := range alerts {
		pa := present.Alert{Alert: a}
		key := audit.LockKey{Source: a.Labels[alert.LabelSource], Name: a.Labels[alert.LabelLock]}
		if key.Name != "" {
			l, err := s.store.LockByKey(c.Request().Context(), key)
			switch {
			case err == nil:
				pa.LockID = l.ID
			case audit.ErrorCode(err) != audit.ENOTFOUND:
				s.logger.Warn("alerts page: look up the alert's lock", "lock", key.String(), "err", err)
			}
		}
		out = append(out, pa)
	}
	return out
}
