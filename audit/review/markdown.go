package review

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// WriteMarkdown writes r as a Markdown document for a postmortem. Strings
// that come from backends and resources (lock names, holders, resources,
// reasons, summaries) are escaped, so they cannot open links, code, tables or
// HTML, nor start a new line.
func WriteMarkdown(out io.Writer, r Report) error {
	w := bufio.NewWriter(out)
	clock := clockFormat(r.Window)
	at := func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format(clock)
	}

	writeHeader(w, r)

	for _, l := range r.Locks {
		fmt.Fprintf(w, "\n## %s\n\n", EscapeMarkdown(l.Lock.Key().String()))
		fmt.Fprintf(w, "Lock id %d, %s source, class %s: %s in the window.",
			l.Lock.ID, EscapeMarkdown(string(l.Lock.Kind)), EscapeMarkdown(string(l.Lock.Class)), plural(len(l.Handovers), "handover", "handovers"))
		switch {
		case l.Omitted > 0:
			fmt.Fprintf(w, " %s left out; narrow the window to see them.", plural(l.Omitted, "earlier handover", "earlier handovers"))
		case l.Omitted < 0:
			fmt.Fprintf(w, " Earlier handovers were left out; narrow the window to see them.")
		}
		fmt.Fprintf(w, "\n")
		writeVerdict(w, l.Verdict)

		for i, h := range l.Handovers {
			prev, next := h.Previous, h.Next
			fmt.Fprintf(w, "\n### %d. %s: %s (%s) → %s (%s)\n\n", i+1, at(h.At()),
				mdWho(prev.Holder), tokenWords(prev.Token), mdWho(next.Holder), tokenWords(next.Token))
			fmt.Fprintf(w, "%s\n\n", narrate(h, clock, EscapeMarkdown))

			fmt.Fprintf(w, "| | Previous | Next |\n|---|---|---|\n")
			fmt.Fprintf(w, "| Holder | %s | %s |\n", mdWho(prev.Holder), mdWho(next.Holder))
			fmt.Fprintf(w, "| Token | %s | %s |\n", tokenText(prev.Token), tokenText(next.Token))
			fmt.Fprintf(w, "| Granted | %s%s | %s%s |\n", at(prev.GrantedAt), observedText(prev), at(next.GrantedAt), grantText(h))
			fmt.Fprintf(w, "| Renewals | %d | %d |\n", prev.Renewals, next.Renewals)
			fmt.Fprintf(w, "| Last renewal | %s | %s |\n", at(prev.LastRenewedAt), at(next.LastRenewedAt))
			fmt.Fprintf(w, "| Lease | %s | %s |\n", leaseText(prev.LeaseDuration), leaseText(next.LeaseDuration))
			fmt.Fprintf(w, "| Expires | %s | %s |\n", at(prev.ExpiresAt), at(next.ExpiresAt))
			fmt.Fprintf(w, "| Ended | %s | %s |\n\n", endText(prev, h.EndInferred, at), endText(next, false, at))

			fmt.Fprintf(w, "- Gap: %s\n", gapText(h))
			if h.Overlap != nil {
				fmt.Fprintf(w, "- Overlap: %s, %s to %s\n", human(h.Overlap.Duration()), at(h.Overlap.From), at(h.Overlap.To))
			} else {
				fmt.Fprintf(w, "- Overlap: none\n")
			}
			if len(h.Exposures) == 0 {
				fmt.Fprintf(w, "- Exposure: none reported\n")
			}
			for _, e := range h.Exposures {
				fmt.Fprintf(w, "- Exposure: %s, %s, %s to %s\n", EscapeMarkdown(e.Resource), human(e.Duration()), at(e.From), at(e.To))
			}
			for _, b := range h.Blind {
				fmt.Fprintf(w, "- Blind: %s to %s", at(b.From), at(b.To))
				if b.Reason != "" {
					fmt.Fprintf(w, " (%s)", EscapeMarkdown(b.Reason))
				}
				fmt.Fprintf(w, "\n")
			}
			for _, f := range h.Findings {
				fmt.Fprintf(w, "- Finding: %s (%s) at %s: %s\n", f.Kind, f.Severity, at(f.At), EscapeMarkdown(f.Summary))
			}

			if len(h.Writes) == 0 {
				fmt.Fprintf(w, "\nNo writes reported around this handover.\n")
				continue
			}
			fmt.Fprintf(w, "\n| At | Resource | Holder | Token | Outcome | Fencing |\n|---|---|---|---|---|---|\n")
			for _, wr := range h.Writes {
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", at(wr.At), EscapeMarkdown(wr.Resource), mdWho(wr.Holder),
					tokenText(wr.Token), wr.Outcome, verdictText(wr.Verdict))
			}
			if c := h.WriteCount; c.Total > len(h.Writes) {
				fmt.Fprintf(w, "\n%d of %d writes listed (the stale and unfenced first, then the earliest); all told %d accepted, %d rejected, %d stale, %d unfenced.\n",
					len(h.Writes), c.Total, c.Accepted, c.Rejected, c.Stale, c.Unfenced)
			}
		}
	}
	return w.Flush()
}

// verdictText says what a write meant for fencing, in words.
// writeHeader writes the report's title, window, sources, counts and notes.
func writeHeader(w io.Writer, r Report) {
	fmt.Fprintf(w, "# Incident review\n\n")
	fmt.Fprintf(w, "- Window: %s to %s (%s)\n", r.Window.From.UTC().Format(clockDateTime), r.Window.To.UTC().Format(clockDateTime), human(r.Window.To.Sub(r.Window.From)))
	if len(r.Sources) > 0 {
		names := make([]string, len(r.Sources))
		for i, s := range r.Sources {
			names[i] = EscapeMarkdown(s)
		}
		fmt.Fprintf(w, "- Sources: %s\n", strings.Join(names, ", "))
	}
	fmt.Fprintf(w, "- Handovers: %d in %s", r.Handovers(), plural(len(r.Locks), "lock", "locks"))
	if r.Quiet > 0 {
		fmt.Fprintf(w, " (%s without a handover not shown)", plural(r.Quiet, "other lock", "other locks"))
	}
	fmt.Fprintf(w, "\n")
	for _, n := range r.Notes {
		fmt.Fprintf(w, "- Note: %s\n", EscapeMarkdown(n))
	}
	if len(r.Locks) == 0 {
		fmt.Fprintf(w, "\nNo handovers in this window.\n")
	}
}

// writeVerdict writes a lock's safety verdict with its reasons, the
// deciding ones in bold; nothing for a verdict not judged.
func writeVerdict(w io.Writer, v verdict.Verdict) {
	if v.Kind == "" {
		return
	}
	fmt.Fprintf(w, "\nVerdict over the window: **%s** (for %s).\n\n", v.Kind, v.Purpose)
	for _, r := range v.Reasons {
		if r.Decides {
			fmt.Fprintf(w, "- **%s**\n", EscapeMarkdown(r.Text))
		} else {
			fmt.Fprintf(w, "- %s\n", EscapeMarkdown(r.Text))
		}
	}
}

func verdictText(v Verdict) string {
	switch v {
	case VerdictStale:
		return "stale write rejected: fencing held"
	case VerdictUnfenced:
		return "**unfenced write accepted: fencing failed**"
	}
	return ""
}

func mdWho(holder string) string {
	if holder == "" {
		return "—"
	}
	return EscapeMarkdown(holder)
}

func tokenText(t *int64) string {
	if t == nil {
		return "none"
	}
	return strconv.FormatInt(*t, 10)
}

func observedText(t audit.Tenure) string {
	if t.Observed {
		return " (first seen)"
	}
	return ""
}

func grantText(h Handover) string {
	switch {
	case h.Next.Observed:
		return " (first seen)"
	case h.GrantInferred:
		return " (inferred)"
	}
	return ""
}

func leaseText(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	return human(d)
}

func endText(t audit.Tenure, inferred bool, at func(time.Time) string) string {
	if t.Held() {
		return "held"
	}
	how := "seen"
	if inferred {
		how = "inferred"
	}
	if t.End == audit.EndSuperseded {
		return fmt.Sprintf("%s (superseded)", at(t.EndedAt))
	}
	return fmt.Sprintf("%s (%s, %s)", at(t.EndedAt), t.End, how)
}

func gapText(h Handover) string {
	switch {
	case h.Previous.End == audit.EndSuperseded && h.Previous.ExpiresAt.IsZero():
		return "unknown (the previous lease's end is unknown)"
	case h.Gap < 0:
		return fmt.Sprintf("-%s (overlap)", human(-h.Gap))
	case h.Gap < time.Millisecond:
		return "none"
	}
	return human(h.Gap) + " without a holder"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// EscapeMarkdown makes an untrusted string inline Markdown text that renders as
// itself: ASCII punctuation with a meaning in Markdown is backslash-escaped,
// HTML's special characters become entities, and line breaks, other control
// characters and bidirectional overrides (which would reorder the text
// around them) become spaces, so the string cannot end a table cell or
// open a link, emphasis, code or HTML. Reports never put one at the start of a
// line, where list and heading markers would need escaping too.
func EscapeMarkdown(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case r == '<':
			b.WriteString("&lt;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '&':
			b.WriteString("&amp;")
		case r == '"':
			b.WriteString("&quot;")
		case strings.ContainsRune("\\`*_{}[]()#+!|~", r):
			b.WriteByte('\\')
			b.WriteRune(r)
		case audit.Unprintable(r) || r == '\u2028' || r == '\u2029':
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
