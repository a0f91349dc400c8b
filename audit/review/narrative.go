package review

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/leasewatch/leasewatch/audit"
)

// escaper makes an untrusted string (a holder, a resource, a reason, a
// finding's summary) safe for the output format; plain leaves it as it is.
type escaper func(string) string

func plain(s string) string { return s }

// narrate tells a handover in plain words. Untrusted strings pass through esc,
// the words around them do not, so one narrative serves as text (JSON, HTML
// through the template's own escaping) and as Markdown. No sentence starts
// with an untrusted string, so none can start a Markdown block.
func narrate(h Handover, clock string, esc escaper) string {
	prev, next := h.Previous, h.Next
	p := who(prev.Holder, esc)
	n := who(next.Holder, esc)
	at := func(t time.Time) string { return t.UTC().Format(clock) }
	var b []string

	// How the previous tenure ended.
	switch prev.End {
	case audit.EndExpired:
		if h.EndInferred {
			s := fmt.Sprintf("%s (%s) stopped renewing", p, tokenWords(prev.Token))
			switch {
			case !prev.LastRenewedAt.IsZero() && prev.Renewals > 0:
				s = fmt.Sprintf("After its last renewal at %s, %s", at(prev.LastRenewedAt), s)
			case !prev.GrantedAt.IsZero():
				s = fmt.Sprintf("After its grant at %s, %s", at(prev.GrantedAt), s)
			default:
				s = "The previous holder, " + s
			}
			if !prev.ExpiresAt.IsZero() && prev.ExpiresAt.Before(prev.EndedAt) {
				s += fmt.Sprintf("; its lease ran out at %s, and leasewatch inferred the expiry at %s", at(prev.ExpiresAt), at(prev.EndedAt))
			} else {
				s += fmt.Sprintf("; leasewatch inferred its expiry at %s", at(prev.EndedAt))
			}
			b = append(b, s+".")
			break
		}
		s := fmt.Sprintf("At %s %s (%s) stopped renewing; its lease expired", at(prev.EndedAt), p, tokenWords(prev.Token))
		if !prev.LastRenewedAt.IsZero() && !prev.EndedAt.Before(prev.LastRenewedAt) {
			s += " " + human(prev.EndedAt.Sub(prev.LastRenewedAt)) + " after the last renewal"
		}
		b = append(b, s+".")
	case audit.EndReleased:
		s := fmt.Sprintf("At %s %s (%s) released the lock", at(prev.EndedAt), p, tokenWords(prev.Token))
		if h.EndInferred {
			s += " (inferred by leasewatch, not seen)"
		}
		b = append(b, s+".")
	case audit.EndSuperseded:
		// Told together with the grant below.
	default:
		b = append(b, fmt.Sprintf("The previous holder, %s (%s), still held the lock.", p, tokenWords(prev.Token)))
	}

	// How the next tenure began.
	took := fmt.Sprintf("%s took the lock with %s", n, tokenWords(next.Token))
	switch {
	case prev.End == audit.EndSuperseded && h.Overlap != nil:
		b = append(b, fmt.Sprintf("At %s %s was granted the lock with %s while the lease of %s (%s) was still valid for %s: both may have believed they held it.",
			at(next.GrantedAt), n, tokenWords(next.Token), p, tokenWords(prev.Token), human(h.Overlap.Duration())))
	case prev.End == audit.EndSuperseded && !prev.ExpiresAt.IsZero():
		b = append(b, fmt.Sprintf("The lease of %s (%s) ran out at %s without the collector seeing it end; %s later %s.",
			p, tokenWords(prev.Token), at(prev.ExpiresAt), human(h.Gap), took))
	case prev.End == audit.EndSuperseded:
		b = append(b, fmt.Sprintf("At %s %s from %s (%s).", at(next.GrantedAt), took, p, tokenWords(prev.Token)))
	case h.Gap >= time.Millisecond:
		b = append(b, fmt.Sprintf("%s later %s.", capital(human(h.Gap)), took))
	case h.Gap <= -time.Millisecond:
		b = append(b, fmt.Sprintf("%s earlier %s.", capital(human(-h.Gap)), took))
	default:
		b = append(b, "At the same moment "+took+".")
	}
	if h.GrantInferred {
		b = append(b, "leasewatch inferred this grant: it did not see it happen.")
	}
	if next.Observed {
		b = append(b, "The grant came before the collector started watching; its time is when it was first seen.")
	}

	// Could a resource tell the two apart?
	switch {
	case next.Token == nil:
		b = append(b, fmt.Sprintf("The grant carries no fencing token, so no resource could fence %s out.", p))
	case prev.Token != nil && *next.Token <= *prev.Token:
		b = append(b, fmt.Sprintf("Token %d is not greater than token %d, so a resource cannot tell the new holder from the old.", *next.Token, *prev.Token))
	}

	// What the resources learned and which late writes arrived.
	var clauses []string
	for _, e := range h.Exposures {
		clauses = append(clauses, fmt.Sprintf("the %s learned token %d %s after the grant", esc(e.Resource), *next.Token, human(e.Duration())))
	}
	clauses = append(clauses, lateWrites(h, esc)...)
	if len(clauses) > 0 {
		b = append(b, capital(strings.Join(clauses, "; "))+".")
	}

	for _, bl := range h.Blind {
		s := fmt.Sprintf("The collector could not see the backend from %s to %s", at(bl.From), at(bl.To))
		if bl.Reason != "" {
			s += " (" + esc(bl.Reason) + ")"
		}
		b = append(b, s+"; what happened in between is inferred.")
	}
	for _, f := range h.Findings {
		if f.Kind == audit.FindingOverlap {
			continue // told above
		}
		b = append(b, fmt.Sprintf("leasewatch also found %s: %s.", f.Kind, strings.TrimSuffix(esc(f.Summary), ".")))
	}
	return strings.Join(b, " ")
}

// lateWrites tells the writes that arrived after the previous tenure ended
// with a token older than the new grant's, grouped by token, resource and
// outcome.
func lateWrites(h Handover, esc escaper) []string {
	prev := h.Previous
	if prev.EndedAt.IsZero() {
		return nil
	}
	groups := h.late
	after := map[audit.EndReason]string{
		audit.EndExpired:    "the expiry",
		audit.EndReleased:   "the release",
		audit.EndSuperseded: "the handover",
	}[prev.End]
	if after == "" {
		after = "the end of its tenure"
	}
	var out []string
	var rest []*lateGroup
	if len(groups) > narrativeWriteGroups {
		// Tell the first few in full and count the rest, so a handover that
		// drew late writes from many resources still reads as a paragraph.
		groups, rest = groups[:narrativeWriteGroups], groups[narrativeWriteGroups:]
	}
	for _, g := range groups {
		verb := "was"
		s := fmt.Sprintf("a write with token %d arrived %s after %s", g.token, human(g.first), after)
		if g.n > 1 {
			verb = "were"
			s = fmt.Sprintf("%d writes with token %d arrived %s to %s after %s", g.n, g.token, human(g.first), human(g.last), after)
		}
		switch {
		case g.outcome == audit.WriteRejected && g.verdict == VerdictStale:
			s += fmt.Sprintf(" and %s rejected by the %s: fencing held", verb, esc(g.resource))
		case g.outcome == audit.WriteRejected:
			s += fmt.Sprintf(" and %s rejected by the %s", verb, esc(g.resource))
		case g.verdict == VerdictUnfenced:
			s += fmt.Sprintf(" and %s accepted by the %s: fencing did not protect it", verb, esc(g.resource))
		default:
			s += fmt.Sprintf(" and %s accepted by the %s", verb, esc(g.resource))
		}
		out = append(out, s)
	}
	if len(rest) > 0 {
		n := 0
		for _, g := range rest {
			n += g.n
		}
		word := "writes"
		if n == 1 {
			word = "write"
		}
		out = append(out, fmt.Sprintf("%d more late %s (%d more groups by token, resource and outcome) are listed with the writes",
			n, word, len(rest)))
	}
	return out
}

// narrativeWriteGroups is how many groups of late writes a narrative tells
// one by one.
const narrativeWriteGroups = 4

// who names a holder for a sentence.
func who(holder string, esc escaper) string {
	if holder == "" {
		return "an unknown holder"
	}
	return esc(holder)
}

func tokenWords(t *int64) string {
	if t == nil {
		return "no token"
	}
	return "token " + strconv.FormatInt(*t, 10)
}

// capital upper-cases the first letter of s.
func capital(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError || !unicode.IsLower(r) {
		return s
	}
	return string(unicode.ToUpper(r)) + s[n:]
}

// human formats a non-negative duration for reading: 180 ms, 2.0 s, 14 s,
// 3 min 5 s, 2 h 10 min.
func human(d time.Duration) string {
	if d < 0 {
		return "-" + human(-d)
	}
	switch {
	case d < time.Millisecond:
		return "under 1 ms"
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%d s", int64(d.Round(time.Second).Seconds()))
	case d < time.Hour:
		d = d.Round(time.Second)
		m, s := int64(d/time.Minute), int64(d%time.Minute/time.Second)
		if s == 0 {
			return fmt.Sprintf("%d min", m)
		}
		return fmt.Sprintf("%d min %d s", m, s)
	default:
		d = d.Round(time.Minute)
		h, m := int64(d/time.Hour), int64(d%time.Hour/time.Minute)
		if m == 0 {
			return fmt.Sprintf("%d h", h)
		}
		return fmt.Sprintf("%d h %d min", h, m)
	}
}

// Time layouts of a report: the time of day when the whole window lies within
// one UTC day, else the date too.
const (
	clockTime     = "15:04:05.000Z"
	clockDateTime = "2006-01-02 15:04:05.000Z"
)

func clockFormat(w Window) string {
	f, t := w.From.UTC(), w.To.UTC()
	if f.Year() == t.Year() && f.YearDay() == t.YearDay() {
		return clockTime
	}
	return clockDateTime
}

// Human formats a duration the way reports do (180 ms, 2.0 s, 3 min 5 s), for
// other views of a report.
func Human(d time.Duration) string { return human(d) }
