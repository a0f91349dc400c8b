package postgres

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// A source watches up to three kinds of part at once: its advisory locks
// (polled), its published lease tables (one stream) and each unpublished
// table (a poller). They share the source's one sink and its one stored
// cursor. A part sees a sink of its own (partSink) whose Cursor is the
// part's share of the stored cursor and whose Record stores the input with
// every part's latest share, one input at a time, in the order handed.
//
// The stored cursor is a JSON object, sourceCursor; a cursor that is not
// one (the plain server start time an advisory-only source stored before
// lease tables came) is the advisory part's. A source with only its
// advisory locks goes on storing the plain time.
//
// Two things of an input are the source's, not a part's, so the parts
// share them carefully:
//   - Snapshot says the input lists every lock held in the source. A
//     part's snapshot lists only its own, so where a source has more than
//     one part it is not passed on as one: the locks the part held before
//     (kept in the cursor) and missing from its snapshot are ended instead,
//     as the tracker ends what a snapshot misses (Unjudged: expired if the
//     lease had run out, released otherwise).
//   - Live vouches that every change up to At was delivered, which lets
//     the tracker run out leases by the clock up to then. Advisory locks
//     have no lease: their inputs vouch only where the source has no lease
//     tables. And while one lease-table part is down, the others' inputs
//     do not vouch, so that a stalled stream's leases are not run out for
//     want of the renewals it has not delivered.

// Part names, in the stored cursor.
const (
	advisoryPart = "advisory"
	streamPart   = "stream"
	pollPart     = "poll "
)

// sourceCursor is the stored cursor of a source with lease tables.
type sourceCursor struct {
	// Parts are each part's own cursor.
	Parts map[string]string `json:"parts"`
	// Held are the locks each part held, with their holders, where the
	// source has more than one part.
	Held map[string]map[string]string `json:"held,omitempty"`
}

// parseCursor reads a stored cursor.
func parseCursor(stored string) sourceCursor {
	c := sourceCursor{Parts: map[string]string{}, Held: map[string]map[string]string{}}
	switch {
	case stored == "":
	case !strings.HasPrefix(stored, "{"):
		c.Parts[advisoryPart] = stored
	default:
		if err := json.Unmarshal([]byte(stored), &c); err != nil || c.Parts == nil {
			// Not one of ours: every part starts afresh, after a blind
			// window from the stored time.
			c = sourceCursor{Parts: map[string]string{}, Held: map[string]map[string]string{}}
		}
		if c.Held == nil {
			c.Held = map[string]map[string]string{}
		}
	}
	return c
}

// parts is the sink the parts of one source share.
type parts struct {
	sink   collectors.Sink
	names  []string // the source's parts
	tables bool     // the source has lease tables

	mu   sync.Mutex // held through a Record, so inputs are stored in order
	cur  sourceCursor
	at   time.Time // when the stored cursor was reached
	down map[string]bool
}

// newParts returns the sink of the parts names of source, with the stored
// cursor's shares of parts no longer configured left out.
func newParts(sink collectors.Sink, source string, names []string, tables bool) *parts {
	stored, at := sink.Cursor(source)
	all := parseCursor(stored)
	cur := sourceCursor{Parts: map[string]string{}, Held: map[string]map[string]string{}}
	for _, n := range names {
		if v, ok := all.Parts[n]; ok {
			cur.Parts[n] = v
		}
		if h, ok := all.Held[n]; ok && len(names) > 1 {
			cur.Held[n] = h
		}
	}
	return &parts{sink: sink, names: names, tables: tables, cur: cur, at: at, down: map[string]bool{}}
}

// part returns the sink of the part named name.
func (p *parts) part(name string) *partSink { return &partSink{p: p, name: name} }

// encode is the cursor to store.
func (p *parts) encode(c sourceCursor) string {
	if len(p.names) == 1 && p.names[0] == advisoryPart {
		return c.Parts[advisoryPart]
	}
	b, _ := json.Marshal(c) // strings and maps of strings only
	return string(b)
}

// partSink is one part's view of the source's sink.
type partSink struct {
	p    *parts
	name string
}

var _ collectors.Sink = (*partSink)(nil)

// Cursor returns the part's share of the stored cursor and when it was
// stored; "" and the zero time where the part stored none (the source did
// not have it then).
func (s *partSink) Cursor(string) (string, time.Time) {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	v, ok := s.p.cur.Parts[s.name]
	if !ok {
		return "", time.Time{}
	}
	return v, s.p.at
}

// setDown says whether the part is down (a lease-table part whose
// connection failed); while one is, the others' inputs do not vouch.
func (s *partSink) setDown(down bool) {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	s.p.down[s.name] = down
}

// Record stores in with the part's new share of the cursor and every other
// part's latest.
func (s *partSink) Record(ctx context.Context, in audit.Input) error {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if in.Live && (s.name == advisoryPart && p.tables || s.othersDown()) {
		in.Live = false
	}
	next := sourceCursor{Parts: maps.Clone(p.cur.Parts), Held: maps.Clone(p.cur.Held)}
	if _, ok := next.Parts[s.name]; in.Cursor != "" || !ok {
		next.Parts[s.name] = in.Cursor
	}
	if len(p.names) > 1 {
		held := s.follow(&in, p.cur.Held[s.name])
		next.Held[s.name] = held
	}
	in.Cursor = p.encode(next)
	if err := p.sink.Record(ctx, in); err != nil {
		return err
	}
	p.cur = next
	return nil
}

func (s *partSink) othersDown() bool {
	for n, d := range s.p.down {
		if d && n != s.name {
			return true
		}
	}
	return false
}

// follow returns the part's held locks after in, from those before it
// (prev). A snapshot of the part alone is not passed on as the source's:
// the locks it misses are ended instead, unjudged.
func (s *partSink) follow(in *audit.Input, prev map[string]string) map[string]string {
	held := maps.Clone(prev)
	if held == nil {
		held = map[string]string{}
	}
	if in.Snapshot {
		in.Snapshot = false
		listed := map[string]bool{}
		for _, ob := range in.Observations {
			listed[ob.Lock.Name] = true
		}
		at := in.At
		if in.Blind != nil {
			at = in.Blind.To
		}
		var ends []audit.Observation
		for _, name := range slices.Sorted(maps.Keys(held)) {
			if !listed[name] {
				ends = append(ends, audit.Observation{Lock: audit.LockKey{Source: in.Source, Name: name}, Kind: audit.EventRelease, At: at,
					Holder: held[name], Unjudged: true, Detail: map[string]any{"reason": "missing from snapshot"}})
				delete(held, name)
			}
		}
		in.Observations = append(ends, in.Observations...)
	}
	for _, ob := range in.Observations {
		switch ob.Kind {
		case audit.EventGrant, audit.EventObserved, audit.EventRenew:
			held[ob.Lock.Name] = ob.Holder
		case audit.EventRelease, audit.EventExpire:
			delete(held, ob.Lock.Name)
		}
	}
	return held
}
