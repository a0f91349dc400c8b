package present

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/views"
)

// printable makes an untrusted string safe to read: audit.Unprintable
// characters (a terminal escape, a NUL, a bidirectional override) and
// invalid UTF-8 are replaced by U+FFFD. templ still escapes the result; this
// keeps it from hiding or reordering text around it.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || audit.Unprintable(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || audit.Unprintable(r) {
			r = '\uFFFD'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// printables is printable of each of ss.
func printables(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = printable(s)
	}
	return out
}

// stampIn formats t in loc to millisecond precision.
func stampIn(t time.Time, loc *time.Location) views.Stamp {
	if t.IsZero() {
		return views.Stamp{}
	}
	return views.Stamp{Text: stampText(t, loc), ISO: t.UTC().Format(time.RFC3339Nano)}
}

// stampAgo is stampIn with how long before now t was.
func stampAgo(t time.Time, loc *time.Location, now time.Time) views.Stamp {
	s := stampIn(t, loc)
	if !t.IsZero() {
		s.Ago = ago(now.Sub(t))
	}
	return s
}

// stampText is the Text of stampIn.
func stampText(t time.Time, loc *time.Location) string {
	if t.IsZero() {
		return "—"
	}
	if loc == nil || loc == time.UTC {
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	}
	return t.In(loc).Format("2006-01-02 15:04:05.000 MST")
}

// ago says how long ago, coarsely: "12s ago", "3m ago", "5h ago", "2d ago".
func ago(d time.Duration) string {
	if d < 0 {
		return "in " + coarse(-d)
	}
	return coarse(d) + " ago"
}

func coarse(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	default:
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
}
