package review

import (
	"cmp"
	"slices"
	"sort"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// WriteCount counts a handover's writes, listed or not.
type WriteCount struct {
	Total, Accepted, Rejected int
	Stale, Unfenced           int // the writes with that verdict
}

// Flagged is how many writes were stale or unfenced.
func (c WriteCount) Flagged() int { return c.Stale + c.Unfenced }

// Add counts w.
func (c *WriteCount) Add(w Write) {
	c.Total++
	if w.Outcome == audit.WriteRejected {
		c.Rejected++
	} else {
		c.Accepted++
	}
	switch w.Verdict {
	case VerdictStale:
		c.Stale++
	case VerdictUnfenced:
		c.Unfenced++
	}
}

// lateGroup is the writes with one token, resource, outcome and verdict
// that arrived after the previous tenure ended with a token older than the
// new grant's: the narrative tells them as one clause.
type lateGroup struct {
	token       int64
	resource    string
	outcome     audit.WriteOutcome
	verdict     Verdict
	first, last time.Duration // after the previous tenure's end
	firstID     int64         // the event of the first write
	n           int
}

// writeSet gathers one handover's writes as they come, in any order, in
// memory bounded by its cap: it counts every write and groups the late ones,
// and keeps, when there are more than max (max > 0), the earliest stale and
// unfenced writes and then the earliest others.
type writeSet struct {
	max            int
	flagged, plain []listedWrite // each in (at, id) order; at most max when max > 0
	count          WriteCount
	late           []*lateGroup
}

// listedWrite is a write and the id of its event, which orders writes at the
// same instant.
type listedWrite struct {
	Write
	id int64
}

func (a listedWrite) compare(b listedWrite) int {
	return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.id, b.id))
}

func (s *writeSet) add(h *Handover, w Write, id int64) {
	s.count.Add(w)
	s.group(h, w, id)
	lw := listedWrite{Write: w, id: id}
	if w.Verdict != VerdictNone {
		s.flagged = keepEarliest(s.flagged, lw, s.max)
	} else {
		s.plain = keepEarliest(s.plain, lw, s.max)
	}
}

// keepEarliest inserts w in order into ws, and then drops the latest of ws
// while it holds more than max (max > 0).
func keepEarliest(ws []listedWrite, w listedWrite, max int) []listedWrite {
	if max > 0 && len(ws) == max && w.compare(ws[max-1]) > 0 {
		return ws // later than every write kept
	}
	i, _ := slices.BinarySearchFunc(ws, w, listedWrite.compare)
	ws = slices.Insert(ws, i, w)
	if max > 0 && len(ws) > max {
		ws = ws[:max]
	}
	return ws
}

// group counts w in its late group if it is a late write: one that arrived
// after the previous tenure ended, with a verdict or with a token older than
// the new grant's (or, without a new token, with the previous one).
func (s *writeSet) group(h *Handover, w Write, id int64) {
	prev, next := h.Previous, h.Next
	if prev.EndedAt.IsZero() || w.Token == nil || w.At.Before(prev.EndedAt) {
		return
	}
	late := w.Verdict != VerdictNone ||
		(next.Token != nil && *w.Token < *next.Token) ||
		(next.Token == nil && prev.Token != nil && *w.Token == *prev.Token)
	if !late {
		return
	}
	d := w.At.Sub(prev.EndedAt)
	for _, g := range s.late {
		if g.token == *w.Token && g.resource == w.Resource && g.outcome == w.Outcome && g.verdict == w.Verdict {
			if d < g.first || (d == g.first && id < g.firstID) {
				g.first, g.firstID = d, id
			}
			g.last = max(g.last, d)
			g.n++
			return
		}
	}
	s.late = append(s.late, &lateGroup{token: *w.Token, resource: w.Resource, outcome: w.Outcome, verdict: w.Verdict, first: d, last: d, firstID: id, n: 1})
}

// finish puts the set into h: the listed writes in time order (the stale and
// unfenced first, then the earliest others, up to max), the counts, and the
// late groups in the order of their first write.
func (s *writeSet) finish(h *Handover) {
	listed := s.flagged
	if s.max > 0 {
		listed = listed[:min(len(listed), s.max)]
	}
	n := len(s.plain)
	if s.max > 0 {
		n = min(n, s.max-len(listed))
	}
	listed = append(slices.Clip(listed), s.plain[:n]...)
	slices.SortFunc(listed, listedWrite.compare)
	h.Writes = make([]Write, len(listed))
	for i, w := range listed {
		h.Writes[i] = w.Write
	}
	h.WriteCount = s.count
	slices.SortFunc(s.late, func(a, b *lateGroup) int {
		return cmp.Or(cmp.Compare(a.first, b.first), cmp.Compare(a.firstID, b.firstID))
	})
	h.late = s.late
}

// writeAssigner gives each write event of a lock to at most one of its
// handovers (see owner) and gathers it there. Writes may come in any order.
type writeAssigner struct {
	hs       []Handover
	spans    []Interval
	sets     []writeSet
	verdicts writeVerdicts
	opts     Options
	// The handovers whose previous and next tenures hold a token, in
	// order, by token; ordered says the spans follow one another.
	prevByToken, nextByToken map[int64][]int
	ordered                  bool
}

func newWriteAssigner(hs []Handover, verdicts writeVerdicts, opts Options) *writeAssigner {
	a := &writeAssigner{
		hs:          hs,
		spans:       make([]Interval, len(hs)),
		sets:        make([]writeSet, len(hs)),
		verdicts:    verdicts,
		opts:        opts,
		prevByToken: make(map[int64][]int),
		nextByToken: make(map[int64][]int),
		ordered:     true,
	}
	for i, h := range hs {
		a.spans[i] = writeSpan(hs, i, opts)
		a.sets[i].max = opts.MaxWrites
		if t := h.Previous.Token; t != nil {
			a.prevByToken[*t] = append(a.prevByToken[*t], i)
		}
		if t := h.Next.Token; t != nil {
			a.nextByToken[*t] = append(a.nextByToken[*t], i)
		}
		if i > 0 && (a.spans[i].From.Before(a.spans[i-1].From) || a.spans[i].From.Before(a.spans[i-1].To)) {
			a.ordered = false
		}
	}
	return a
}

// owner returns the index of the handover a write belongs to, or -1: the
// latest handover whose previous holder's token it carries and that ended
// before it (a late write, however late), else whose new holder's token it
// carries within Trail of the grant (the first writes, which end the
// exposure windows), else whose previous holder's token it carries within
// Lead of the end (the last writes before losing the lock), else whose span
// holds it.
func (a *writeAssigner) owner(at time.Time, token *int64) int {
	if token != nil {
		prev, next := a.prevByToken[*token], a.nextByToken[*token]
		for _, i := range slices.Backward(prev) {
			if end := a.hs[i].Previous.EndedAt; !end.IsZero() && !at.Before(end) {
				return i
			}
		}
		for _, i := range slices.Backward(next) {
			if g := a.hs[i].Next.GrantedAt; !at.Before(g) && !at.After(g.Add(a.opts.Trail)) {
				return i
			}
		}
		for _, i := range slices.Backward(prev) {
			if end := a.hs[i].Previous.EndedAt; !end.IsZero() && !at.Before(end.Add(-a.opts.Lead)) {
				return i
			}
		}
	}
	// Spans are half-open, except the last, which keeps its end.
	holds := func(i int) bool {
		sp := a.spans[i]
		return !at.Before(sp.From) && (at.Before(sp.To) || (i == len(a.spans)-1 && at.Equal(sp.To)))
	}
	if a.ordered {
		// Only the last span to start by at can hold it.
		i := sort.Search(len(a.spans), func(i int) bool { return a.spans[i].From.After(at) }) - 1
		if i >= 0 && holds(i) {
			return i
		}
		return -1
	}
	for i := len(a.spans) - 1; i >= 0; i-- {
		if holds(i) {
			return i
		}
	}
	return -1
}

type writeKey struct {
	resource string
	at       int64
	token    int64
}

// writeVerdicts are the verdicts of the writes that stale_write and
// unfenced_write findings are about.
type writeVerdicts map[writeKey]Verdict

// note notes the verdict of the write m is about.
func (v writeVerdicts) note(m audit.WriteMark) {
	verdict := VerdictStale
	if m.Kind == audit.FindingUnfencedWrite {
		verdict = VerdictUnfenced
	}
	if m.Token != nil {
		v[writeKey{m.Resource, m.At.UnixNano(), *m.Token}] = verdict
	}
}

// add assigns one write. The verdicts the assigner was given must be
// complete by then.
func (a *writeAssigner) add(e audit.WriteEvent) {
	target := a.owner(e.At, e.Token)
	if target < 0 {
		return
	}
	w := Write{At: e.At, Resource: e.Resource, Holder: e.Holder, Token: e.Token, Outcome: e.Outcome, HighestToken: e.HighestToken}
	if e.Token != nil {
		w.Verdict = a.verdicts[writeKey{e.Resource, e.At.UnixNano(), *e.Token}]
	}
	a.sets[target].add(&a.hs[target], w, e.ID)
}

// finish puts the gathered writes into the handovers.
func (a *writeAssigner) finish() {
	for i := range a.hs {
		a.sets[i].finish(&a.hs[i])
	}
}
