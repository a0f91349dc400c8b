package review

import (
	"encoding/json"
	"io"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// The JSON form of a report. Field names are stable: scripts depend on them.
// As in the HTTP API, times are RFC 3339 with nanoseconds in UTC (null when
// unknown), tokens are integers or null, durations are integer milliseconds in
// fields ending in _ms, and strings are never null.
type (
	jsonReport struct {
		From      string     `json:"from"`
		To        string     `json:"to"`
		Sources   []string   `json:"sources"`
		Handovers int        `json:"handovers"`
		Quiet     int        `json:"quiet_locks"`
		Notes     []string   `json:"notes"`
		Locks     []jsonLock `json:"locks"`
	}
	jsonLock struct {
		ID        int64          `json:"id"`
		Source    string         `json:"source"`
		Kind      string         `json:"kind"`
		Name      string         `json:"name"`
		Class     string         `json:"class"`
		Omitted   int            `json:"handovers_omitted"`
		Handovers []jsonHandover `json:"handovers"`
		// Verdict is the lock's safety verdict over the window; null in a
		// report that was not loaded from a store.
		Verdict *jsonVerdict `json:"verdict"`
	}
	jsonVerdict struct {
		Verdict string       `json:"verdict"`
		Purpose string       `json:"purpose"`
		Reasons []jsonReason `json:"reasons"`
	}
	jsonReason struct {
		Code     string  `json:"code"`
		Decides  bool    `json:"decides"`
		Text     string  `json:"text"`
		Findings []int64 `json:"findings"`
		Count    int     `json:"count"`
	}
	jsonHandover struct {
		At            string         `json:"at"`
		Previous      jsonTenure     `json:"previous"`
		EndInferred   bool           `json:"end_inferred"`
		Next          jsonTenure     `json:"next"`
		GrantInferred bool           `json:"grant_inferred"`
		GapMS         *int64         `json:"gap_ms"`
		Overlap       *jsonInterval  `json:"overlap"`
		Exposures     []jsonExposure `json:"exposures"`
		Writes        []jsonWrite    `json:"writes"`
		WriteCount    jsonWriteCount `json:"write_counts"`
		Blind         []jsonBlind    `json:"blind_windows"`
		Findings      []jsonNote     `json:"findings"`
		Narrative     string         `json:"narrative"`
	}
	jsonTenure struct {
		Seq             int64   `json:"seq"`
		Holder          string  `json:"holder"`
		Token           *int64  `json:"token"`
		GrantedAt       *string `json:"granted_at"`
		Observed        bool    `json:"observed"`
		Renewals        int64   `json:"renewals"`
		LastRenewedAt   *string `json:"last_renewed_at"`
		LeaseDurationMS *int64  `json:"lease_duration_ms"`
		ExpiresAt       *string `json:"expires_at"`
		EndedAt         *string `json:"ended_at"`
		End             *string `json:"end"`
	}
	jsonInterval struct {
		From       string `json:"from"`
		To         string `json:"to"`
		DurationMS int64  `json:"duration_ms"`
	}
	jsonExposure struct {
		Resource string `json:"resource"`
		jsonInterval
	}
	jsonWrite struct {
		At           string  `json:"at"`
		Resource     string  `json:"resource"`
		Holder       string  `json:"holder"`
		Token        *int64  `json:"token"`
		Outcome      string  `json:"outcome"`
		HighestToken *int64  `json:"highest_token"`
		Verdict      *string `json:"verdict"`
	}
	// jsonWriteCount counts all of a handover's writes; "writes" lists them
	// all unless the report capped them.
	jsonWriteCount struct {
		Total    int `json:"total"`
		Accepted int `json:"accepted"`
		Rejected int `json:"rejected"`
		Stale    int `json:"stale"`
		Unfenced int `json:"unfenced"`
	}
	jsonBlind struct {
		jsonInterval
		Reason string `json:"reason"`
	}
	jsonNote struct {
		Kind     string `json:"kind"`
		Severity string `json:"severity"`
		At       string `json:"at"`
		Summary  string `json:"summary"`
	}
)

// WriteJSON writes r as an indented JSON document.
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(toJSON(r))
}

func toJSON(r Report) jsonReport {
	out := jsonReport{
		From:      stamp(r.Window.From),
		To:        stamp(r.Window.To),
		Sources:   nonNil(r.Sources),
		Handovers: r.Handovers(),
		Quiet:     r.Quiet,
		Notes:     nonNil(r.Notes),
		Locks:     []jsonLock{},
	}
	for _, l := range r.Locks {
		jl := jsonLock{
			ID: l.Lock.ID, Source: l.Lock.Source, Kind: string(l.Lock.Kind), Name: l.Lock.Name,
			Class: string(l.Lock.Class), Omitted: l.Omitted, Handovers: []jsonHandover{}, Verdict: verdictJSON(l.Verdict),
		}
		for _, h := range l.Handovers {
			jh := jsonHandover{
				At:            stamp(h.At()),
				Previous:      tenureJSON(h.Previous),
				EndInferred:   h.EndInferred,
				Next:          tenureJSON(h.Next),
				GrantInferred: h.GrantInferred,
				Exposures:     []jsonExposure{},
				Writes:        []jsonWrite{},
				WriteCount:    jsonWriteCount(h.WriteCount),
				Blind:         []jsonBlind{},
				Findings:      []jsonNote{},
				Narrative:     h.Narrative,
			}
			if !effectiveEnd(h.Previous).IsZero() {
				jh.GapMS = ms(h.Gap)
			}
			if h.Overlap != nil {
				jh.Overlap = intervalJSON(*h.Overlap)
			}
			for _, e := range h.Exposures {
				jh.Exposures = append(jh.Exposures, jsonExposure{Resource: e.Resource, jsonInterval: *intervalJSON(e.Interval)})
			}
			for _, w := range h.Writes {
				jw := jsonWrite{At: stamp(w.At), Resource: w.Resource, Holder: w.Holder, Token: w.Token,
					Outcome: string(w.Outcome), HighestToken: w.HighestToken}
				if w.Verdict != VerdictNone {
					v := string(w.Verdict)
					jw.Verdict = &v
				}
				jh.Writes = append(jh.Writes, jw)
			}
			for _, b := range h.Blind {
				jh.Blind = append(jh.Blind, jsonBlind{jsonInterval: *intervalJSON(b.Interval), Reason: b.Reason})
			}
			for _, f := range h.Findings {
				jh.Findings = append(jh.Findings, jsonNote{Kind: string(f.Kind), Severity: string(f.Severity), At: stamp(f.At), Summary: f.Summary})
			}
			jl.Handovers = append(jl.Handovers, jh)
		}
		out.Locks = append(out.Locks, jl)
	}
	return out
}

func verdictJSON(v verdict.Verdict) *jsonVerdict {
	if v.Kind == "" {
		return nil
	}
	jv := &jsonVerdict{Verdict: string(v.Kind), Purpose: string(v.Purpose), Reasons: []jsonReason{}}
	for _, r := range v.Reasons {
		ids := r.Findings
		if ids == nil {
			ids = []int64{}
		}
		jv.Reasons = append(jv.Reasons, jsonReason{Code: string(r.Code), Decides: r.Decides, Text: r.Text, Findings: ids, Count: r.Count})
	}
	return jv
}

func tenureJSON(t audit.Tenure) jsonTenure {
	jt := jsonTenure{
		Seq: t.Seq, Holder: t.Holder, Token: t.Token, GrantedAt: nullStamp(t.GrantedAt), Observed: t.Observed,
		Renewals: t.Renewals, LastRenewedAt: nullStamp(t.LastRenewedAt), ExpiresAt: nullStamp(t.ExpiresAt),
		EndedAt: nullStamp(t.EndedAt),
	}
	if t.LeaseDuration > 0 {
		jt.LeaseDurationMS = ms(t.LeaseDuration)
	}
	if !t.Held() {
		end := string(t.End)
		jt.End = &end
	}
	return jt
}

func intervalJSON(i Interval) *jsonInterval {
	return &jsonInterval{From: stamp(i.From), To: stamp(i.To), DurationMS: *ms(i.Duration())}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func nullStamp(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := stamp(t)
	return &s
}

func ms(d time.Duration) *int64 {
	v := d.Round(time.Millisecond).Milliseconds()
	return &v
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
