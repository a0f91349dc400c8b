package redis

import (
	"sort"
	"time"
)

// endReason says how a hold ended on one instance.
type endReason int

const (
	endReleased endReason = iota // DEL, UNLINK, RENAME away, HDEL of the last field
	endExpired                   // the server reclaimed the key at its TTL
	endEvicted                   // maxmemory eviction
)

func (r endReason) String() string {
	switch r {
	case endExpired:
		return "expired"
	case endEvicted:
		return "evicted"
	}
	return "released"
}

// endEvent classifies a keyspace event that removes a key.
func endEvent(ev string) (endReason, bool) {
	switch ev {
	case "del", "rename_from", "move_from":
		return endReleased, true
	case "expired":
		return endExpired, true
	case "evicted":
		return endEvicted, true
	}
	return 0, false
}

// writeEvent reports whether a keyspace event can create or replace a
// lock's value. EXPIRE, PERSIST and HDEL cannot: they only change a hold the
// collector already knows of.
func writeEvent(ev string) bool {
	switch ev {
	case "set", "new", "hset", "hincrby", "hincrbyfloat", "rename_to", "move_to",
		"restore", "copy_to", "setrange", "append", "incrby", "incrbyfloat":
		return true
	}
	return false
}

// event is one keyspace notification and when the collector received it.
type event struct {
	Name string
	At   time.Time
}

// changeKind is what happened to a key on one instance.
type changeKind int

const (
	changeGrant changeKind = iota // a new hold
	changeRenew                   // the same hold, its deadline set again
	changeEnd                     // the hold is gone
)

// change is one transition of a key on one instance.
type change struct {
	Kind   changeKind
	Key    string
	H      holding
	At     time.Time
	Reason endReason // changeEnd
	// Inferred: the collector deduced it rather than saw it (an end whose
	// event never came, a hold it never managed to read).
	Inferred bool
	Why      string // for inferred changes
}

// keyState is what the collector knows of one key on one instance.
type keyState struct {
	cur *holding // the key's hold as last read; nil when gone
	// pending is a hold found gone by a read before its end event
	// (del/expired/evicted) arrived: the end waits for that event, to know
	// how the hold ended.
	pending   *holding
	pendingAt time.Time
}

// instanceState is one instance's keys. It turns keyspace events followed
// by a read of the key into per-instance changes. It is pure: time comes only
// from its arguments.
type instanceState struct {
	keys map[string]*keyState
}

func newInstanceState() *instanceState {
	return &instanceState{keys: make(map[string]*keyState)}
}

// applyEvents interprets the events received for key, in order, followed by
// a read of it (h, present) that ran after all of them on the server. h.At
// is the read's time even when the key is gone.
//
// The read may run after further changes whose events have not arrived yet,
// so a hold found gone with no end event among events waits (pending) for its
// end event, or for resolvePending. A key written and gone again between two
// reads is a hold the collector never saw: a vanished grant and its end.
func (s *instanceState) applyEvents(key string, events []event, present bool, h holding, vanished holding) []change {
	ks := s.keys[key]
	if ks == nil {
		ks = &keyState{}
		s.keys[key] = ks
	}
	var out []change
	i := 0
	if ks.pending != nil {
		// The key was gone when last read, so the first event that follows
		// is the pending hold's end event, unless that end had no event.
		if j := firstEnd(events); j >= 0 {
			r, _ := endEvent(events[j].Name)
			out = append(out, endChange(key, *ks.pending, ks.pendingAt, r, false, ""))
			i = j + 1
		} else {
			out = append(out, inferredEnd(key, *ks.pending, ks.pendingAt, "no end event for a key found gone"))
		}
		ks.pending = nil
	}

	// Walk the rest: state is what the key holds after each event as far
	// as the events tell; the read tells the rest.
	const (
		stNone    = iota // no hold
		stPrev           // ks.cur, possibly rewritten
		stUnknown        // written after none: a value the collector has not read
	)
	state := stNone
	if ks.cur != nil {
		state = stPrev
	}
	var wroteAt time.Time
	for _, ev := range events[i:] {
		if r, ok := endEvent(ev.Name); ok {
			switch state {
			case stPrev:
				out = append(out, endChange(key, *ks.cur, ev.At, r, false, ""))
				ks.cur = nil
			case stUnknown:
				out = append(out, vanishedGrant(key, vanished, wroteAt), endChange(key, vanished, ev.At, r, false, ""))
			}
			state = stNone
			continue
		}
		if writeEvent(ev.Name) && state == stNone {
			state, wroteAt = stUnknown, ev.At
		}
	}

	switch {
	case present && state == stPrev && ks.cur.ID == h.ID:
		prev := *ks.cur
		h.Token = prev.Token // the token is the grant's: a re-entrant counter may have moved since
		later, earlier := deadlineMoved(prev, h)
		if later || earlier {
			out = append(out, change{Kind: changeRenew, Key: key, H: h, At: h.At})
			ks.cur = &h
		} else {
			n := narrow(prev, h)
			n.Count, n.TTL = h.Count, prev.TTL
			ks.cur = &n
		}
	case present:
		// New, or a different value over the previous one (SET without NX,
		// or an end whose event arrives later): the tracker decides
		// whether that supersedes or overlaps.
		out = append(out, change{Kind: changeGrant, Key: key, H: h, At: h.At})
		ks.cur = &h
	case state == stPrev:
		ks.pending, ks.pendingAt, ks.cur = ks.cur, h.At, nil
	case state == stUnknown:
		out = append(out, vanishedGrant(key, vanished, wroteAt))
		ks.pending, ks.pendingAt = &vanished, h.At
	}
	if ks.cur == nil && ks.pending == nil {
		delete(s.keys, key)
	}
	return out
}

// resolvePending ends the pending holds found gone before grace ago whose end
// event never came, guessing the reason from their deadline.
func (s *instanceState) resolvePending(now time.Time, grace time.Duration) []change {
	var out []change
	for _, key := range sortedKeys(s.keys) {
		ks := s.keys[key]
		if ks.pending == nil || now.Sub(ks.pendingAt) < grace {
			continue
		}
		out = append(out, inferredEnd(key, *ks.pending, ks.pendingAt, "no end event for a key found gone"))
		ks.pending = nil
		if ks.cur == nil {
			delete(s.keys, key)
		}
	}
	return out
}

// replace makes a full scan the instance's state. A hold that kept its ID
// keeps its grant's token and its narrowed deadline window unless the scan
// shows the deadline moved. Pending ends are dropped: the source snapshot
// this scan feeds ends what is gone.
func (s *instanceState) replace(scan map[string]holding) {
	keys := make(map[string]*keyState, len(scan))
	for key, h := range scan {
		if old := s.keys[key]; old != nil && old.cur != nil && old.cur.ID == h.ID {
			h.Token = old.cur.Token
			if later, earlier := deadlineMoved(*old.cur, h); !later && !earlier {
				n := narrow(*old.cur, h)
				n.Count = h.Count
				h = n
			}
		}
		keys[key] = &keyState{cur: &h}
	}
	s.keys = keys
}

// current returns key's hold on this instance as the changes so far tell
// it: a pending hold still counts until its end is known.
func (s *instanceState) current(key string) (holding, bool) {
	ks := s.keys[key]
	switch {
	case ks == nil:
		return holding{}, false
	case ks.cur != nil:
		return *ks.cur, true
	case ks.pending != nil:
		return *ks.pending, true
	}
	return holding{}, false
}

func endChange(key string, h holding, at time.Time, r endReason, inferred bool, why string) change {
	return change{Kind: changeEnd, Key: key, H: h, At: at, Reason: r, Inferred: inferred, Why: why}
}

// inferredEnd ends h at at without knowing how: expired if its deadline had
// surely passed by then, released otherwise.
func inferredEnd(key string, h holding, at time.Time, why string) change {
	r := endReleased
	if h.expires() && !at.Before(h.Lo) {
		r = endExpired
	}
	return endChange(key, h, at, r, true, why)
}

func vanishedGrant(key string, h holding, at time.Time) change {
	return change{Kind: changeGrant, Key: key, H: h, At: at, Inferred: true, Why: "the key was written and gone again before the collector could read it"}
}

// firstEnd returns the index of the first end event in events if no write
// comes before it, or -1.
func firstEnd(events []event) int {
	for i, ev := range events {
		if _, ok := endEvent(ev.Name); ok {
			return i
		}
		if writeEvent(ev.Name) {
			return -1
		}
	}
	return -1
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
