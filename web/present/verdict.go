package present

import (
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/query"
	"github.com/leasewatch/leasewatch/audit/verdict"
	"github.com/leasewatch/leasewatch/views"
)

// verdictCounts are the overview's counts of locks per kept verdict, in
// verdict order, each linked to the locks list filtered by it.
func verdictCounts(counts map[string]int) []views.VerdictCount {
	out := make([]views.VerdictCount, 0, len(verdict.Kinds))
	for _, k := range verdict.Kinds {
		out = append(out, views.VerdictCount{Kind: string(k), N: counts[string(k)],
			URL: "/locks?" + url.Values{"verdict": {string(k)}}.Encode()})
	}
	return out
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
