// Package review builds the incident review of locks over a window of time:
// every handover (one tenure ending and the next beginning), how the previous
// tenure ended, the gap or overlap between the two, the resources' exposure
// windows, the writes around it, blind windows, and a plain-words narrative.
//
// Build is pure: it works only on the tenures, events and findings it is
// given, so the same data always gives the same report. Load gathers that data
// from a Store (the audit.Store methods it calls) and builds the same report
// with the same steps, except that it reads a lock's writes a page at a time
// and keeps only what the report lists (writes.go), so its memory does not
// grow with the writes. The dashboard's review page, its Markdown and JSON
// exports and `leasewatch report` all use Load, so they agree.
//
// It imports only the standard library, audit and audit/verdict.
package review

import (
	"cmp"
	"slices"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// Window is the closed interval a report covers.
type Window struct {
	From, To time.Time
}

// Contains reports whether t lies within w, ends included.
func (w Window) Contains(t time.Time) bool {
	return !t.Before(w.From) && !t.After(w.To)
}

// Report is the incident review of one or more locks over a window.
type Report struct {
	Window  Window
	Sources []string // the source filter it was built with; empty means every source
	Locks   []LockReport
	// Quiet counts the locks that were considered but had no handover in the
	// window.
	Quiet int
	// Notes say what the report left out and why (caps on handovers, events or
	// findings), in words for people.
	Notes []string
}

// Handovers returns how many handovers the report lists.
func (r Report) Handovers() int {
	n := 0
	for _, l := range r.Locks {
		n += len(l.Handovers)
	}
	return n
}

// LockReport is one lock's part of a report.
type LockReport struct {
	Lock      audit.Lock
	Handovers []Handover // in time order
	// Omitted counts earlier handovers in the window that were left out to
	// keep the report to Options.MaxHandovers; -1 means some were, but how
	// many is unknown.
	Omitted int
	// Verdict is the lock's safety verdict over the report's window, which
	// Load judges; its Kind is empty in a report Build made.
	Verdict verdict.Verdict
}

// Handover is one change of hands: Previous's tenure ended (or was
// superseded) and Next's began.
type Handover struct {
	Previous audit.Tenure
	// EndInferred says leasewatch deduced how Previous ended (an expiry by its
	// own clock, a release it did not see) rather than saw it.
	EndInferred bool
	Next        audit.Tenure
	// GrantInferred says leasewatch deduced Next's grant (it saw a renewal, or
	// the holder after a blind window) rather than saw it.
	GrantInferred bool
	// Gap is the unavailability gap: from Previous's effective end to Next's
	// grant. Negative when the two overlap. Previous's effective end is when
	// it ended, or, when it was superseded, when its lease ran out.
	Gap time.Duration
	// Overlap is when both held a valid lease: from Next's grant until
	// Previous's lease would have run out. Nil when they did not overlap.
	Overlap *Interval
	// Exposures are, per resource, the window from Next's grant to the
	// resource's first write with Next's token or a newer one, during which it
	// still accepted Previous's token.
	Exposures []Exposure
	// Writes are the writes around the handover, in time order: all of
	// them, or, when there are more than Options.MaxWrites, the stale and
	// unfenced ones first and then the earliest, up to MaxWrites.
	Writes []Write
	// WriteCount counts all the handover's writes, listed or not.
	WriteCount WriteCount
	// Blind are the collector's blind windows that touch the handover.
	Blind []Blind
	// Findings are other findings about the handover (overlap, token
	// regression, reuse or skip, late renewal, deleted or evicted lock).
	Findings []Note
	// Narrative tells the handover in plain words.
	Narrative string

	late []*lateGroup // the late writes, grouped, for the narrative
}

// At is when the handover happened: Next's grant.
func (h Handover) At() time.Time { return h.Next.GrantedAt }

// Interval is a span of time.
type Interval struct {
	From, To time.Time
}

// Duration is the interval's length.
func (i Interval) Duration() time.Duration { return i.To.Sub(i.From) }

// Exposure is a resource's exposure window after a grant.
type Exposure struct {
	Resource string
	Interval
}

// Verdict says what a write meant for fencing.
type Verdict string

// Write verdicts, from the tracker's findings.
const (
	// VerdictNone: an ordinary write.
	VerdictNone Verdict = ""
	// VerdictStale: the resource rejected a write from an ended tenure or
	// with an old token: fencing held (a stale_write finding).
	VerdictStale Verdict = "stale"
	// VerdictUnfenced: the resource accepted a write from an ended tenure or
	// with an old token: the protection failed (an unfenced_write finding).
	VerdictUnfenced Verdict = "unfenced"
)

// Write is one write a protected resource reported.
type Write struct {
	At           time.Time
	Resource     string
	Holder       string
	Token        *int64
	Outcome      audit.WriteOutcome
	HighestToken *int64 // the highest token the resource had accepted, if it said
	Verdict      Verdict
}

// Blind is a window in which the collector could not see its backend.
type Blind struct {
	Interval
	Reason string
}

// Note is a finding related to a handover.
type Note struct {
	Kind     audit.FindingKind
	Severity audit.Severity
	At       time.Time
	Summary  string
}

// Options tune which writes belong to a handover and how long a report gets.
type Options struct {
	// Lead: a handover's writes start this long before the previous tenure
	// ended. Default 2s.
	Lead time.Duration
	// Trail: and end this long after the new grant (or where the next
	// handover's writes start, if sooner). Writes with the previous holder's
	// token after its end belong to the handover however late they come.
	// Default 5s.
	Trail time.Duration
	// MaxHandovers caps the handovers per lock; the newest are kept.
	// Default 500.
	MaxHandovers int
	// MaxHandoversTotal, when positive, caps the handovers of a report Load
	// builds: each lock may have its equal share of it, at least
	// MinHandoversPerLock, when that is less than MaxHandovers. The
	// handovers left out are counted (LockReport.Omitted).
	MaxHandoversTotal int
	// MaxWrites, when positive, caps the writes listed per handover; the
	// rest are only counted (Handover.WriteCount). Zero lists every write.
	MaxWrites int
}

// MinHandoversPerLock is the least share of Options.MaxHandoversTotal a lock
// gets, however many locks a report covers.
const MinHandoversPerLock = 3

// Defaults of Options.
const (
	DefaultLead         = 2 * time.Second
	DefaultTrail        = 5 * time.Second
	DefaultMaxHandovers = 500
)

func (o Options) withDefaults() Options {
	if o.Lead <= 0 {
		o.Lead = DefaultLead
	}
	if o.Trail <= 0 {
		o.Trail = DefaultTrail
	}
	if o.MaxHandovers <= 0 {
		o.MaxHandovers = DefaultMaxHandovers
	}
	return o
}

// LockData is what Build needs of one lock: its tenures that overlap the
// window plus the one before the first grant in it, and its events and
// findings around them. Events of other kinds than grant, release, expire,
// write_accepted, write_rejected and blind are ignored.
type LockData struct {
	Lock     audit.Lock
	Tenures  []audit.Tenure
	Events   []audit.Event
	Findings []audit.Finding
	// Omitted counts handovers in the window the data leaves out (see
	// LockReport.Omitted).
	Omitted int
}

// Build computes the report of locks over w. It is pure and deterministic.
// Locks without a handover in the window count as Quiet.
func Build(w Window, locks []LockData, opts Options) Report {
	opts = opts.withDefaults()
	lrs := make([]LockReport, 0, len(locks))
	for _, ld := range locks {
		verdicts := make(writeVerdicts)
		for _, f := range ld.Findings {
			if m, ok := audit.WriteMarkOf(f); ok {
				verdicts.note(m)
			}
		}
		lr, writes := buildLock(w, ld, verdicts, opts)
		for _, e := range ld.Events {
			if w, ok := audit.WriteEventOf(e); ok {
				writes.add(w)
			}
		}
		writes.finish()
		lrs = append(lrs, lr)
	}
	return assemble(w, lrs)
}

// assemble makes the report of lock reports whose writes are in: it tells
// each handover and counts the locks without one as quiet.
func assemble(w Window, lrs []LockReport) Report {
	r := Report{Window: w}
	clock := clockFormat(w)
	for _, lr := range lrs {
		if len(lr.Handovers) == 0 && lr.Omitted == 0 {
			r.Quiet++
			continue
		}
		for i := range lr.Handovers {
			lr.Handovers[i].Narrative = narrate(lr.Handovers[i], clock, plain)
		}
		r.Locks = append(r.Locks, lr)
	}
	slices.SortStableFunc(r.Locks, func(a, b LockReport) int {
		return cmp.Or(cmp.Compare(a.Lock.Source, b.Lock.Source), cmp.Compare(a.Lock.Name, b.Lock.Name))
	})
	return r
}

// buildLock computes a lock's handovers from its tenures, events and findings
// (writes aside), and returns the assigner that gives them their writes,
// judged by verdicts.
func buildLock(w Window, ld LockData, verdicts writeVerdicts, opts Options) (LockReport, *writeAssigner) {
	lr := LockReport{Lock: ld.Lock, Omitted: ld.Omitted}
	tenures := slices.Clone(ld.Tenures)
	slices.SortFunc(tenures, func(a, b audit.Tenure) int { return cmp.Compare(a.Seq, b.Seq) })

	var hs []Handover
	for i := 1; i < len(tenures); i++ {
		prev, next := tenures[i-1], tenures[i]
		if prev.Seq != next.Seq-1 || !w.Contains(next.GrantedAt) {
			continue
		}
		hs = append(hs, Handover{Previous: prev, Next: next})
	}
	if n := len(hs); n > opts.MaxHandovers {
		if lr.Omitted >= 0 {
			lr.Omitted += n - opts.MaxHandovers
		}
		hs = hs[n-opts.MaxHandovers:]
	}
	lr.Handovers = hs
	if len(hs) == 0 {
		return lr, newWriteAssigner(nil, verdicts, opts)
	}

	// The events that tell how tenures began and ended, and blind windows,
	// in time order.
	var events []audit.Event
	for _, e := range ld.Events {
		if e.Kind != audit.EventWriteAccepted && e.Kind != audit.EventWriteRejected {
			events = append(events, e)
		}
	}
	slices.SortStableFunc(events, func(a, b audit.Event) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.ID, b.ID))
	})
	for i := range hs {
		h := &hs[i]
		h.EndInferred, h.GrantInferred = inferred(events, h.Previous, h.Next)
		h.Gap, h.Overlap = gap(h.Previous, h.Next)
		h.Exposures = exposures(ld.Findings, h.Next)
		h.Findings = related(ld.Findings, h.Previous, h.Next)
		h.Blind = blinds(events, writeSpan(hs, i, opts))
	}
	return lr, newWriteAssigner(hs, verdicts, opts)
}

// effectiveEnd is when prev stopped holding the lock: when it ended, or, when a
// new grant superseded it, when its lease ran out (zero if unknown).
func effectiveEnd(prev audit.Tenure) time.Time {
	if prev.End == audit.EndSuperseded && !prev.ExpiresAt.IsZero() {
		return prev.ExpiresAt
	}
	return prev.EndedAt
}

func gap(prev, next audit.Tenure) (time.Duration, *Interval) {
	end := effectiveEnd(prev)
	if end.IsZero() {
		return 0, nil
	}
	g := next.GrantedAt.Sub(end)
	if prev.End == audit.EndSuperseded && g < 0 {
		return g, &Interval{From: next.GrantedAt, To: end}
	}
	return g, nil
}

// inferred reports whether prev's end and next's grant were deduced rather
// than seen, from the events that recorded them.
func inferred(events []audit.Event, prev, next audit.Tenure) (endInferred, grantInferred bool) {
	for _, e := range events {
		switch e.Kind {
		case audit.EventRelease, audit.EventExpire:
			if e.At.Equal(prev.EndedAt) && sameToken(e.Token, prev.Token) && e.Holder == prev.Holder {
				endInferred = e.Inferred
			}
		case audit.EventGrant, audit.EventObserved:
			if e.At.Equal(next.GrantedAt) && sameToken(e.Token, next.Token) && e.Holder == next.Holder {
				grantInferred = e.Inferred
			}
		}
	}
	return endInferred, grantInferred
}

// exposures are the exposure findings of next's grant, by resource.
func exposures(findings []audit.Finding, next audit.Tenure) []Exposure {
	var out []Exposure
	for _, f := range findings {
		if f.Kind != audit.FindingExposure || len(f.Tokens) == 0 || next.Token == nil ||
			f.Tokens[0] != *next.Token || !f.At.Equal(next.GrantedAt) {
			continue
		}
		out = append(out, Exposure{Resource: f.Resource, Interval: Interval{From: f.At, To: f.Until}})
	}
	slices.SortFunc(out, func(a, b Exposure) int {
		return cmp.Or(a.To.Compare(b.To), cmp.Compare(a.Resource, b.Resource))
	})
	return out
}

// related returns the other findings about a handover: those the new grant
// raised (overlap, token regression, reuse or skip), those the previous
// tenure's end raised (deleted or evicted lock), and a late last renewal of
// the previous tenure.
func related(findings []audit.Finding, prev, next audit.Tenure) []Note {
	var out []Note
	for _, f := range findings {
		var ok bool
		switch f.Kind {
		case audit.FindingOverlap, audit.FindingTokenRegression, audit.FindingTokenReuse, audit.FindingTokenSkip:
			ok = f.At.Equal(next.GrantedAt)
		case audit.FindingLockDeleted, audit.FindingLockEvicted:
			ok = f.At.Equal(prev.EndedAt)
		case audit.FindingLateRenewal:
			ok = prev.Token != nil && slices.Contains(f.Tokens, *prev.Token) &&
				!f.At.Before(prev.LastRenewedAt) && !f.At.After(prev.EndedAt)
		}
		if ok {
			out = append(out, Note{Kind: f.Kind, Severity: f.Severity, At: f.At, Summary: f.Summary})
		}
	}
	return out
}

// writeSpan is the time span of handover i's writes: from Lead before the
// previous tenure ended to Trail after the new grant, cut where the next
// handover's span starts.
func writeSpan(hs []Handover, i int, opts Options) Interval {
	start := func(h Handover) time.Time {
		end := h.Previous.EndedAt
		if end.IsZero() || end.After(h.Next.GrantedAt) {
			end = h.Next.GrantedAt
		}
		return end.Add(-opts.Lead)
	}
	span := Interval{From: start(hs[i]), To: hs[i].Next.GrantedAt.Add(opts.Trail)}
	if i > 0 && span.From.Before(hs[i-1].Next.GrantedAt) {
		span.From = hs[i-1].Next.GrantedAt
	}
	if i+1 < len(hs) {
		if next := start(hs[i+1]); next.Before(span.To) {
			span.To = next
		}
	}
	if span.To.Before(span.From) {
		span.To = span.From
	}
	return span
}

// blinds returns the blind windows that touch span.
func blinds(events []audit.Event, span Interval) []Blind {
	var out []Blind
	for _, e := range events {
		if e.Kind != audit.EventBlind {
			continue
		}
		from, ok1 := detailTime(e.Detail["from"])
		to, ok2 := detailTime(e.Detail["to"])
		if !ok1 || !ok2 {
			from, to = e.At, e.At
		}
		if to.Before(span.From) || from.After(span.To) {
			continue
		}
		reason, _ := e.Detail["reason"].(string)
		b := Blind{Interval: Interval{From: from, To: to}, Reason: reason}
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out
}

func detailTime(v any) (time.Time, bool) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, false
	}
	return t.UTC(), true
}

func sameToken(a, b *int64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}
