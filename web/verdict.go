package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/audit/verdict"
	"github.com/leasewatch/leasewatch/views"
)

// verdictJSON is GET /api/v1/locks/{id}/verdict: the lock's safety verdict
// over from..to (default: its whole retained history, up to now).
type verdictJSON struct {
	LockID     int64          `json:"lock_id"`
	From       *string        `json:"from"`
	To         *string        `json:"to"`
	Purpose    string         `json:"purpose"`
	Verdict    verdict.Kind   `json:"verdict"`
	Reasons    []reasonJSON   `json:"reasons"`
	Grants     int            `json:"grants"`
	Tokened    int            `json:"tokened_grants"`
	TokenShare float64        `json:"token_share"`
	Resources  []resourceJSON `json:"resources"`
	Overlaps   int            `json:"overlaps"`
	OverlapMS  int64          `json:"overlap_ms"`
	BlindMS    int64          `json:"blind_ms"`
	BlindShare float64        `json:"blind_share"`
	// LongestGapMS is the longest time from a holder's end to the next
	// grant; LongestGapAfter is the seq of the tenure it follows, null when
	// no tenure was followed by another.
	LongestGapMS    int64    `json:"longest_gap_ms"`
	LongestGapAfter *int64   `json:"longest_gap_after_seq"`
	Notes           []string `json:"notes"`
}

type reasonJSON struct {
	Code     verdict.ReasonCode `json:"code"`
	Decides  bool               `json:"decides"`
	Text     string             `json:"text"`
	Findings []int64            `json:"findings"`
	Count    int                `json:"count"`
	Resource *string            `json:"resource"`
}

type resourceJSON struct {
	Resource        string  `json:"resource"`
	Accepted        int     `json:"accepted"`
	Rejected        int     `json:"rejected"`
	Untokened       int     `json:"untokened"`
	StaleStopped    int     `json:"stale_stopped"`
	UnfencedLanded  int     `json:"unfenced_landed"`
	MaxExposureMS   int64   `json:"max_exposure_ms"`
	TotalExposureMS int64   `json:"total_exposure_ms"`
	LastReportAt    *string `json:"last_report_at"`
}

func (s *Server) handleAPIVerdict(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	q := c.QueryParams()
	var w verdict.Window
	if w.From, err = parseTime(q, "from"); err != nil {
		return err
	}
	if w.To, err = parseTime(q, "to"); err != nil {
		return err
	}
	v, err := s.query.Verdict(c.Request().Context(), id, w, s.now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toVerdictJSON(v))
}

func toVerdictJSON(v verdict.Verdict) verdictJSON {
	j := verdictJSON{
		LockID: v.Lock.ID, From: jsonTime(v.Window.From), To: jsonTime(v.Window.To), Purpose: string(v.Purpose), Verdict: v.Kind,
		Reasons: make([]reasonJSON, 0, len(v.Reasons)), Grants: v.Grants, Tokened: v.Tokened, TokenShare: v.TokenShare(),
		Resources: make([]resourceJSON, 0, len(v.Resources)), Overlaps: v.Overlaps, OverlapMS: v.OverlapTime.Milliseconds(),
		BlindMS: v.Blind.Milliseconds(), BlindShare: v.BlindShare(), LongestGapMS: v.LongestGap.Milliseconds(), Notes: v.Notes,
	}
	if j.Notes == nil {
		j.Notes = []string{}
	}
	if v.GapAfter.Seq != 0 {
		j.LongestGapAfter = audit.Int64(v.GapAfter.Seq)
	}
	for _, r := range v.Reasons {
		rj := reasonJSON{Code: r.Code, Decides: r.Decides, Text: r.Text, Findings: r.Findings, Count: r.Count}
		if rj.Findings == nil {
			rj.Findings = []int64{}
		}
		if r.Resource != "" {
			rj.Resource = &r.Resource
		}
		j.Reasons = append(j.Reasons, rj)
	}
	for _, r := range v.Resources {
		j.Resources = append(j.Resources, resourceJSON{
			Resource: r.Resource, Accepted: r.Accepted, Rejected: r.Rejected, Untokened: r.Untokened,
			StaleStopped: r.Stale, UnfencedLanded: r.Unfenced, MaxExposureMS: r.MaxExposure.Milliseconds(), TotalExposureMS: r.TotalExposure.Milliseconds(),
			LastReportAt: jsonTime(r.LastReport),
		})
	}
	return j
}

// verdictScopes are the lock page's verdict scopes (its verdict parameter):
// the page's window, the last 24 hours, the whole retained history.
var verdictScopes = []struct {
	param        query.VerdictScope
	label, words string
}{
	{"", "this window", "in this window"},
	{"24h", "last 24 h", "over the last 24 hours"},
	{"all", "whole history", "over the whole history"},
}

// verdictPanel shapes the verdict j of lock l over scope for the lock page
// at base.
func verdictPanel(l audit.Lock, q url.Values, base string, j query.Judged, scope query.VerdictScope, loc *time.Location, now time.Time) views.VerdictPanel {
	v := j.Verdict
	p := views.VerdictPanel{Kind: string(v.Kind), Purpose: string(v.Purpose), Notes: v.Notes, Judged: stampAgo(j.At, loc, now)}
	for _, sc := range verdictScopes {
		p.Scopes = append(p.Scopes, views.Link{Label: sc.label, URL: withQuery(base, q, "verdict", string(sc.param)) + "#verdict", Current: sc.param == scope})
		if sc.param == scope {
			p.Scope = sc.words
		}
	}
	evidence := func(kind audit.FindingKind, resource string) string {
		return withQuery("/findings", url.Values{"lock": {strconv.FormatInt(l.ID, 10)},
			"from": {v.Window.From.UTC().Format(time.RFC3339Nano)}, "to": {v.Window.To.UTC().Format(time.RFC3339Nano)}},
			"kind", string(kind), "resource", resource)
	}
	for _, r := range v.Reasons {
		vr := views.VerdictReason{Text: printable(r.Text), Decides: r.Decides}
		if kind, ok := reasonFindings[r.Code]; ok && r.Count > 0 {
			vr.Href, vr.Label = evidence(kind, r.Resource), fmt.Sprintf("%d findings", r.Count)
			if r.Count == 1 {
				vr.Label = "the finding"
			}
		}
		p.Reasons = append(p.Reasons, vr)
	}
	p.Figures = []views.Field{
		{Key: "Grants with a token", Value: fmt.Sprintf("%d of %d (%.0f%%)", v.Tokened, v.Grants, 100*v.TokenShare())},
		{Key: "Overlaps", Value: fmt.Sprintf("%d, %s", v.Overlaps, durationOrNone(v.OverlapTime))},
		{Key: "Blind", Value: fmt.Sprintf("%.1f%% (%s)", 100*v.BlindShare(), durationOrNone(v.Blind))},
		{Key: "Longest wait for the next grant", Value: durationOrNone(v.LongestGap)},
	}
	for _, r := range v.Resources {
		p.Resources = append(p.Resources, views.VerdictResource{
			Name: printable(r.Resource), Accepted: r.Accepted, Rejected: r.Rejected, Untokened: r.Untokened,
			Stale: r.Stale, Unfenced: r.Unfenced, MaxExposure: duration(r.MaxExposure), TotalExposure: duration(r.TotalExposure),
			LastReport: stampAgo(r.LastReport, loc, now),
		})
	}
	return p
}

// reasonFindings is the finding kind behind each reason that has findings;
// "" where they are of two kinds (token regressions and reuses, zombies
// and their writes).
var reasonFindings = map[verdict.ReasonCode]audit.FindingKind{
	verdict.ReasonUnfencedWrite:    audit.FindingUnfencedWrite,
	verdict.ReasonOverlapWrites:    audit.FindingOverlap,
	verdict.ReasonOverlap:          audit.FindingOverlap,
	verdict.ReasonRegressionWrites: "",
	verdict.ReasonRegression:       "",
	verdict.ReasonStaleStopped:     audit.FindingStaleWrite,
	verdict.ReasonZombieWrites:     "",
	verdict.ReasonZombieHolder:     audit.FindingZombieHolder,
	verdict.ReasonUngrantedToken:   audit.FindingUngrantedToken,
}

// durationOrNone is d in words, "none" for zero.
func durationOrNone(d time.Duration) string {
	if d <= 0 {
		return "none"
	}
	return duration(d)
}
