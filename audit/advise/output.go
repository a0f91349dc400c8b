package advise

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// Rule is the rule the suggested settings follow, in words, for the
// readers of the API and the command line.
const Rule = "lease_duration >= longest stall × (1 + margin) + retry_period; " +
	"renew_deadline = lease_duration - retry_period; retry_period <= renew_deadline / retries; " +
	"the current lease is kept when it meets the rule, and the retry period is the longest it allows"

// Document is advice as JSON: GET /api/v1/locks/{id}/advice and leasewatch
// advise --json. Durations are in milliseconds; null is unknown.
type Document struct {
	LockID       int64   `json:"lock_id"`
	Source       string  `json:"source"`
	Lock         string  `json:"lock"`
	From         string  `json:"from"`
	To           string  `json:"to"`
	RenewalsFrom string  `json:"renewals_from"`
	Capped       bool    `json:"capped"`
	Renewals     int     `json:"renewals"`
	Margin       float64 `json:"margin"`
	Retries      int     `json:"retries"`
	JitterFactor float64 `json:"jitter_factor"`
	Rule         string  `json:"rule"`
	// Gaps are every holder's together; Holders each one's.
	Gaps      GapsDocument      `json:"gaps"`
	Holders   []HolderDocument  `json:"holders"`
	Current   SettingsDocument  `json:"current"`
	Suggested *SettingsDocument `json:"suggested"`
	NeededMS  *int64            `json:"needed_lease_ms"`
	Short     bool              `json:"short"`
	Cost      *float64          `json:"cost_factor"`
	Costly    bool              `json:"costly"`
}

// GapsDocument is Gaps as JSON.
type GapsDocument struct {
	Count int     `json:"count"`
	P50MS *int64  `json:"p50_ms"`
	P90MS *int64  `json:"p90_ms"`
	P99MS *int64  `json:"p99_ms"`
	MaxMS *int64  `json:"max_ms"`
	MaxAt *string `json:"max_at"`
}

// HolderDocument is Holder as JSON.
type HolderDocument struct {
	Holder   string       `json:"holder"`
	Gaps     GapsDocument `json:"gaps"`
	NeededMS int64        `json:"needed_lease_ms"`
	Short    bool         `json:"short"`
}

// SettingsDocument is Settings as JSON.
type SettingsDocument struct {
	LeaseDurationMS *int64  `json:"lease_duration_ms"`
	RenewDeadlineMS *int64  `json:"renew_deadline_ms"`
	RetryPeriodMS   *int64  `json:"retry_period_ms"`
	WritesPerSecond float64 `json:"writes_per_second"`
}

// DocumentOf returns a as JSON.
func DocumentOf(a Advice) Document {
	d := Document{
		LockID: a.Lock.ID, Source: a.Lock.Source, Lock: a.Lock.Name, From: stamp(a.Window.From), To: stamp(a.Window.To),
		RenewalsFrom: stamp(a.RenewalsFrom), Capped: a.Capped, Renewals: a.Renewals,
		Margin: a.Options.Margin, Retries: a.Options.Retries, JitterFactor: JitterFactor, Rule: Rule,
		Gaps: gapsDocument(a.Gaps), Holders: []HolderDocument{}, Current: settingsDocument(a.Current),
		Short: a.Short, Costly: a.Costly,
	}
	for _, h := range a.Holders {
		d.Holders = append(d.Holders, HolderDocument{Holder: h.Holder, Gaps: gapsDocument(h.Gaps), NeededMS: h.Needed.Milliseconds(), Short: h.Short})
	}
	if a.Gaps.Count > 0 {
		s := settingsDocument(a.Suggested)
		d.Suggested, d.NeededMS = &s, ms(a.Needed)
		cost := math.Round(a.Cost*1000) / 1000
		d.Cost = &cost
	}
	return d
}

// WriteJSON writes a as an indented JSON document.
func WriteJSON(w io.Writer, a Advice) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(DocumentOf(a))
}

func gapsDocument(g Gaps) GapsDocument {
	if g.Count == 0 {
		return GapsDocument{}
	}
	at := stamp(g.MaxAt)
	return GapsDocument{Count: g.Count, P50MS: ms(g.P50), P90MS: ms(g.P90), P99MS: ms(g.P99), MaxMS: ms(g.Max), MaxAt: &at}
}

func settingsDocument(s Settings) SettingsDocument {
	return SettingsDocument{LeaseDurationMS: ms(s.LeaseDuration), RenewDeadlineMS: ms(s.RenewDeadline), RetryPeriodMS: ms(s.RetryPeriod),
		WritesPerSecond: math.Round(s.WritesPerSecond*1000) / 1000}
}

// ms is d in milliseconds, rounded; nil when zero (unknown).
func ms(d time.Duration) *int64 {
	if d == 0 {
		return nil
	}
	v := d.Round(time.Millisecond).Milliseconds()
	return &v
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// WriteText writes a for a terminal: the gaps per holder, the current and
// suggested settings, and what is flagged.
func WriteText(w io.Writer, a Advice) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s (lock %d), %s to %s\n", a.Lock.Source, a.Lock.Name, a.Lock.ID, stamp(a.Window.From), stamp(a.Window.To))
	fmt.Fprintf(&b, "%d renewals", a.Renewals)
	if a.Capped {
		fmt.Fprintf(&b, ", the newest %d, complete from %s", MaxRenewals, stamp(a.RenewalsFrom))
	}
	b.WriteString("\n\n")
	if a.Gaps.Count == 0 {
		b.WriteString("No gap between two writes of one holder in the window: no stall to size the lease to.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	b.WriteString("Gaps between one holder's writes (its grant and renewals, and across an expiry to its own next grant):\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "holder\tgaps\tp50\tp90\tp99\tlongest stall\tlease needed\t")
	row := func(name string, g Gaps, need time.Duration, short bool) {
		flag := ""
		if short {
			flag = "  longer than the lease"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s%s\t%s\t\n", name, g.Count, Duration(g.P50), Duration(g.P90), Duration(g.P99), Duration(g.Max), flag, Duration(need))
	}
	row("(all)", a.Gaps, a.Needed, a.Short)
	for _, h := range a.Holders {
		row(h.Holder, h.Gaps, h.Needed, h.Short)
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nSettings (margin %g, %d retries per renew deadline):\n", a.Options.Margin, a.Options.Retries)
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tlease duration\trenew deadline\tretry period\twrites/s\t")
	c, s := a.Current, a.Suggested
	fmt.Fprintf(tw, "current\t%s\tnot shown by the backend\t%s (the median gap)\t%.3f\t\n", Duration(c.LeaseDuration), Duration(c.RetryPeriod), c.WritesPerSecond)
	fmt.Fprintf(tw, "suggested\t%s\t%s\t%s\t%.3f\t\n", Duration(s.LeaseDuration), Duration(s.RenewDeadline), Duration(s.RetryPeriod), s.WritesPerSecond)
	tw.Flush()
	b.WriteString("\n")
	for _, line := range Flags(a) {
		b.WriteString(line + "\n")
	}
	fmt.Fprintf(&b, "Rule: %s.\n", Rule)
	_, err := io.WriteString(w, b.String())
	return err
}

// Flags are what a's lock is flagged for, in sentences: a lease shorter
// than a stall, and renewals costing CostlyFactor times what the stalls
// need or more.
func Flags(a Advice) []string {
	var flags []string
	if a.Short {
		flags = append(flags, fmt.Sprintf("The lease (%s) is shorter than the longest stall (%s, ended at %s): a holder that paused that long lost the lock without knowing it.",
			Duration(a.Current.LeaseDuration), Duration(a.Gaps.Max), stamp(a.Gaps.MaxAt)))
	}
	if a.Costly {
		flags = append(flags, fmt.Sprintf("The holders renew %.1f times as often as the stalls need (every %s, where %s would do): %.3f writes/s instead of %.3f.",
			a.Cost, Duration(a.Current.RetryPeriod), Duration(a.Suggested.RetryPeriod), a.Current.WritesPerSecond, a.Suggested.WritesPerSecond))
	}
	return flags
}

// Duration writes d for a reader, to the millisecond; "unknown" for zero.
func Duration(d time.Duration) string {
	if d == 0 {
		return "unknown"
	}
	return d.Round(time.Millisecond).String()
}
