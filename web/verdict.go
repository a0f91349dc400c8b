package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/verdict"
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
