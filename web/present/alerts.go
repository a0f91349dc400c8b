package present

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/alert"
	"github.com/leasewatch/leasewatch/views"
)

// Alert is a live alert with the id of its lock, 0 when the lock is not
// known (an alert of a source, or of a lock no longer stored).
type Alert struct {
	alert.Alert
	LockID int64
}

// AlertsPage is what the alerts page shows: the alerts firing and those
// resolved lately, newest first, the held locks nearest their expiry, and
// the sources, whose standbys another replica evaluates.
type AlertsPage struct {
	Firing, Resolved []Alert
	NearExpiry       []audit.Lock
	Sources          []audit.Source
}

// Alerts is the alerts page of a.
func (p Pages) Alerts(r Request, a AlertsPage) views.AlertsPage {
	now, loc := r.Now, r.Loc
	v := views.AlertsPage{
		Live:    views.Live{ID: "alerts-live", URL: r.URI, Every: RefreshOverview},
		Now:     stampIn(now, loc),
		Margin:  p.marginText(),
		NearURL: nearExpiryURL,
	}
	if a.Sources != nil {
		var elsewhere []string
		for _, src := range a.Sources {
			if src.State == audit.SourceStandby {
				elsewhere = append(elsewhere, printable(src.Name))
			}
		}
		v.Elsewhere = strings.Join(elsewhere, ", ")
	}
	for _, al := range a.Firing {
		v.Firing = append(v.Firing, alertRow(al, loc, now))
	}
	for _, al := range a.Resolved {
		v.Resolved = append(v.Resolved, alertRow(al, loc, now))
	}
	for _, l := range a.NearExpiry {
		v.NearExpiry = append(v.NearExpiry, p.lockRow(l, now, loc))
	}
	return v
}

// alertRow describes a for the alerts page, linking its lock's timeline
// around the alert when the lock is known.
func alertRow(a Alert, loc *time.Location, now time.Time) views.AlertRow {
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
	if a.LockID == 0 {
		return row
	}
	end := a.EndsAt
	if end.IsZero() {
		end = now
	}
	row.LockURL = "/locks/" + strconv.FormatInt(a.LockID, 10) + "?" + url.Values{
		"from": {a.StartsAt.Add(-5 * time.Minute).UTC().Format(time.RFC3339)},
		"to":   {end.Add(5 * time.Minute).UTC().Format(time.RFC3339)},
	}.Encode()
	return row
}
