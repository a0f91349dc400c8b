package query

import (
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// Window is the lock page's time window. A preset window ends now and
// follows it; a custom one (from/to given) is fixed.
type Window struct {
	From, To time.Time
	Preset   string // "15m", "1h", ...; "" for a custom window
}

// Span is how long w lasts.
func (w Window) Span() time.Duration { return w.To.Sub(w.From) }

// A preset window ending now is what the lock page opens on. Two locks are
// poorly served by it: one where nothing happened within it, whose window
// would be empty, and one whose whole history is shorter than it, squeezed
// into the window's last pixels. The page opens both on a window that shows
// their history, and says so (WindowNote).

// NoteReason says why the lock page shows another window than its preset's.
type NoteReason string

const (
	// NoteIdle: nothing changed within the preset; the window shows the
	// lock's last change.
	NoteIdle NoteReason = "idle"
	// NoteFitted: the lock's whole history began within the preset; the
	// window fits it.
	NoteFitted NoteReason = "fitted"
)

// WindowNote says why the lock page shows another window than the preset
// asked for; the zero note when it does not.
type WindowNote struct {
	Reason NoteReason
	// Asked is the preset's own window, for a link to it.
	Asked Window
	// History is how long ago the lock's history began (NoteFitted).
	History time.Duration
}

// idleWindow moves a preset window that was not asked for (the default) of
// a lock that nothing happened to within it (not held, last changed before
// it) to around its last change.
func idleWindow(l audit.Lock, w Window, asked bool) (Window, WindowNote) {
	if w.Preset == "" || asked || l.ChangedAt.IsZero() || !l.ChangedAt.Before(w.From) || l.State == audit.StateHeld {
		return w, WindowNote{}
	}
	span := w.Span()
	return Window{From: l.ChangedAt.Add(-span * 3 / 4), To: l.ChangedAt.Add(span / 4)}, WindowNote{Reason: NoteIdle, Asked: w}
}

// fitHistory narrows a preset window to the lock's history when all of it,
// from its first tenure (tenures, as read for w, holds seq 1), began within
// the window: the history and a tenth of its length before it, at least two
// seconds, unless that would leave out the page's instant at. The window
// still ends now and follows it.
func fitHistory(w Window, note WindowNote, tenures []audit.Tenure, at, now time.Time) (Window, WindowNote) {
	if w.Preset == "" || note.Reason != "" || len(tenures) == 0 || tenures[0].Seq != 1 {
		return w, note
	}
	first := tenures[0].GrantedAt
	history := now.Sub(first)
	pad := max(history/10, 2*time.Second)
	if !first.Add(-pad).After(w.From) || (!at.IsZero() && at.Before(first.Add(-pad))) {
		return w, note
	}
	return Window{From: first.Add(-pad), To: w.To, Preset: w.Preset}, WindowNote{Reason: NoteFitted, Asked: w, History: history}
}
