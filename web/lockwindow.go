package web

import (
	"fmt"
	"net/url"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// A preset window ending now is what the lock page opens on. Two locks are
// poorly served by it: one where nothing happened within it, whose window
// would be empty, and one whose whole history is shorter than it, squeezed
// into the window's last pixels. The page opens both on a window that shows
// their history, and says so (windowNote).

// windowNote says why the lock page shows another window than the preset
// asked for, with a link to the preset's own; zero when it does not.
type windowNote struct {
	Text    string
	Preset  string // the preset's label, for the link
	From    time.Time
	To      time.Time
	Applied bool
}

// idleWindow moves the default window of a lock that nothing happened to
// within it (not held, last changed before it) to around its last change.
func idleWindow(l audit.Lock, w window, q url.Values) (window, windowNote) {
	if w.Preset == "" || q.Get("window") != "" || l.ChangedAt.IsZero() || !l.ChangedAt.Before(w.From) || l.State == audit.StateHeld {
		return w, windowNote{}
	}
	span := w.span()
	note := windowNote{Applied: true, Preset: w.Preset, From: w.From, To: w.To,
		Text: fmt.Sprintf("Nothing changed in the last %s: the window shows the lock's last change instead.", w.Preset)}
	return window{From: l.ChangedAt.Add(-span * 3 / 4), To: l.ChangedAt.Add(span / 4)}, note
}

// fitHistory narrows a preset window to the lock's history when all of it,
// from its first tenure (tenures, as read for w, holds seq 1), began within
// the window: the history and a tenth of its length before it, at least two
// seconds, unless that would leave out the page's instant at. The window
// still ends now and follows it.
func fitHistory(w window, note windowNote, tenures []audit.Tenure, at, now time.Time) (window, windowNote) {
	if w.Preset == "" || note.Applied || len(tenures) == 0 || tenures[0].Seq != 1 {
		return w, note
	}
	first := tenures[0].GrantedAt
	history := now.Sub(first)
	pad := max(history/10, 2*time.Second)
	if !first.Add(-pad).After(w.From) || (!at.IsZero() && at.Before(first.Add(-pad))) {
		return w, note
	}
	fitted := window{From: first.Add(-pad), To: w.To, Preset: w.Preset}
	return fitted, windowNote{Applied: true, Preset: w.Preset, From: w.From, To: w.To,
		Text: fmt.Sprintf("The lock's history began %s ago, within the last %s: the window fits it.", duration(history), w.Preset)}
}
