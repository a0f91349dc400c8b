package web

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/views"
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
	p := views.AlertsPage{
		Live:    views.Live{ID: "alerts-live", URL: c.Request().URL.RequestURI(), Every: refreshOverview},
		Now:     stampIn(now, loc),
		Margin:  s.marginText(),
		NearURL: nearExpiryURL,
	}
	if s.sources != nil {
		var elsewhere []string
		for _, src := range s.sources() {
			if src.State == audit.SourceStandby {
				elsewhere = append(elsewhere, printable(src.Name))
			}
		}
		p.Elsewhere = strings.Join(elsewhere, ", ")
	}
	if s.alerts != nil {
		firing, resolved := s.alerts()
		for _, a := range firing {
			p.Firing = append(p.Firing, s.alertRow(c, a, loc))
		}
		for _, a := range resolved {
			p.Resolved = append(p.Resolved, s.alertRow(c, a, loc))
		}
	}
	near, err := s.query.Expiring(ctx, now, alertsNearList)
	if err != nil {
		return err
	}
	for _, l := range near {
		p.NearExpiry = append(p.NearExpiry, s.lockRow(l, now, loc))
	}
	return render(c, http.StatusOK, views.Alerts(p))
}

// alertRow describes a for the alerts page, linking its lock's timeline
// around the alert when the lock is known.
func (s *Server) alertRow(c echo.Context, a alert.Alert, loc *time.Location) views.AlertRow {
	row := views.AlertRow{
		Name:     printable(a.Name()),
		Severity: a.Labels[alert.LabelSeverity],
		Source:   printable(a.Labels[alert.LabelSource]),
		Lock:     printable(a.Labels[alert.LabelLock]),
		Holder:   printable(a.Labels[alert.LabelHolder]),
		Summary:  printable(a.Annotations[alert.AnnotationSummary]),
		StartsAt: stampIn(a.StartsAt, loc),
	}
	if !a.Firing() {
		row.EndsAt = stampIn(a.EndsAt, loc)
	}
	key := audit.LockKey{Source: a.Labels[alert.LabelSource], Name: a.Labels[alert.LabelLock]}
	if key.Name == "" {
		return row
	}
	l, err := s.store.LockByKey(c.Request().Context(), key)
	if audit.ErrorCode(err) == audit.ENOTFOUND {
		return row
	}
	if err != nil {
		s.logger.Warn("alerts page: look up the alert's lock", "lock", key.String(), "err", err)
		return row
	}
	end := a.EndsAt
	if end.IsZero() {
		end = s.now()
	}
	row.LockURL = "/locks/" + strconv.FormatInt(l.ID, 10) + "?" + url.Values{
		"from": {a.StartsAt.Add(-5 * time.Minute).UTC().Format(time.RFC3339)},
		"to":   {end.Add(5 * time.Minute).UTC().Format(time.RFC3339)},
	}.Encode()
	return row
}
