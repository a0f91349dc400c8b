package redis

import (
	"slices"
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

// writeEvent reports whether a keyspace event can create a lock key.
// EXPIRE, PERSIST and HDEL cannot. "new" is left out: when enabled it always
// comes just before the write that creates the key.
func writeEvent(ev string) bool {
	switch ev {
	case "set", "hset", "hincrby", "hincrbyfloat", "rename_to", "move_to",
		"restore", "copy_to", "setrange", "append", "incrby", "incrbyfloat":
		return true
	}
	return false
}

// replacingWrite reports whether a write replaces a string lock's whole
// value, and so may hand the key to another holder without an end event (SET
// without NX over a held lock). Hash writes change a holder's count.
func replacingWrite(ev string) bool {
	switch ev {
	case "set", "rename_to", "restore", "copy_to":
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
	H      *holding // shared: never changed once made
	At     time.Time
	Reason endReason // changeEnd
	// Inferred: the collector deduced it rather than saw it (an end whose
	// event never came, a hold it never managed to read).
	Inferred bool
	// Overtaken marks a renewal (changeRenew) whose notification the
	// collector received but whose deadline no read showed on its own: a
	// read had already shown a later renewal's deadline, or the hold ended
	// first. It counts as a renewal and carries no deadline of its own.
	Overtaken bool
	Why       string // for inferred changes
	// waiting marks an end found by a read before its end event arrived:
	// it and every change queued after it wait for that event, which says
	// how the hold ended.
	waiting bool
}

// keyState is what the collector knows of one key on one instance.
type keyState struct {
	cur *holding // the key's hold as last read; nil when gone
	// queue holds changes not yet reported, in order: each waiting end
	// blocks the changes after it until its end event arrives.
	queue []change
	// expectWrite: cur was read before the event of the write that created
	// it arrived; that write is still to come and is not an overwrite.
	expectWrite bool
	// afterWrite: the key's last event was a write, so an expire event
	// that follows is that write's own TTL (SET PX emits set, then
	// expire), not a renewal. It carries over between batches.
	afterWrite bool
	touched    int64 // when the key's last notification was received, Unix nanoseconds (0: never)
}

func (ks *keyState) waiting() bool {
	for _, ch := range ks.queue {
		if ch.waiting {
			return true
		}
	}
	return false
}

// resolve gives the first waiting end its reason, from its end event: the
// end is no longer inferred, so it needs no explanation.
func (ks *keyState) resolve(r endReason) {
	for i := range ks.queue {
		if ks.queue[i].waiting {
			ks.queue[i].waiting, ks.queue[i].Reason, ks.queue[i].Why = false, r, ""
			return
		}
	}
}

// renewWaiting queues an overtaken renewal of the first waiting end's hold,
// ahead of that end.
func (ks *keyState) renewWaiting(key string, at time.Time) {
	i := slices.IndexFunc(ks.queue, func(ch change) bool { return ch.waiting })
	ks.queue = slices.Insert(ks.queue, i, change{Kind: changeRenew, Key: key, H: ks.queue[i].H, At: at, Overtaken: true})
}

// flush returns the queued changes up to the first waiting end.
func (ks *keyState) flush() []change {
	n := 0
	for n < len(ks.queue) && !ks.queue[n].waiting {
		n++
	}
	out := append([]change(nil), ks.queue[:n]...)
	ks.queue = ks.queue[n:]
	if len(ks.queue) == 0 {
		ks.queue = nil
	}
	return out
}

// instanceState is one instance's keys. It turns keyspace events followed
// by a read of the key into per-instance changes. It is pure: time comes only
// from its arguments.
type instanceState struct {
	keys map[string]*keyState
	// queued are the keys with changes waiting for an end event: the few
	// that resolvePending and oldestWaiting look at among many keys.
	queued map[string]bool
}

func newInstanceState() *instanceState {
	return &instanceState{keys: make(map[string]*keyState), queued: make(map[string]bool)}
}

// track keeps queued up to date after key's queue changed.
func (s *instanceState) track(key string, ks *keyState) {
	if len(ks.queue) > 0 {
		s.queued[key] = true
	} else {
		delete(s.queued, key)
	}
}

// applyEvents interprets the events received for key, in order, followed by
// a read of it (h, present) that ran after all of them on the server. h.At
// is the read's time even when the key is gone; vanished stands for a hold
// the collector never read.
//
// Reads tell who holds the key; events tell how holds ended. A read may run
// after changes whose events have not arrived yet: a hold it finds gone (or
// replaced, with no write in between) waits for its end event, which is the
// next end event to arrive, and the changes found after it wait behind it.
// A key written and gone again between two reads is a hold the collector
// never saw: a vanished grant and its end.
func (s *instanceState) applyEvents(key string, events []event, present bool, h holding, vanished holding) []change {
	ks := s.keys[key]
	if ks == nil {
		ks = &keyState{}
		s.keys[key] = ks
	}
	if len(events) > 0 {
		ks.touched = events[len(events)-1].At.UnixNano()
	}

	const (
		stNone    = iota // no hold
		stCur            // ks.cur
		stUnknown        // written after none: a value the collector has not read
	)
	state := stNone
	if ks.cur != nil {
		state = stCur
	}
	var wroteAt time.Time
	overwritten := false // a replacing write landed on ks.cur
	// renewals are the times of ks.cur's renewal notifications in this
	// batch: each expire event that no write caused, and each write that
	// replaced the value (SET XX PX renews when the holder does it; by
	// another client it is a grant, below). Counted one by one, two
	// renewals that one read overtook are still two.
	var buf [4]time.Time
	renewals := buf[:0]
	wrote := false // a write to ks.cur in this batch
	for _, ev := range events {
		afterWrite := ks.afterWrite
		ks.afterWrite = false
		if r, ok := endEvent(ev.Name); ok {
			if ks.waiting() {
				ks.resolve(r)
				continue
			}
			switch state {
			case stCur:
				ks.queue = appendOvertaken(ks.queue, key, ks.cur, renewals)
				renewals = renewals[:0]
				ks.queue = append(ks.queue, endChange(key, ks.cur, ev.At, r, false, ""))
				ks.cur, ks.expectWrite = nil, false
			case stUnknown:
				ks.queue = append(ks.queue, vanishedGrant(key, &vanished, wroteAt), endChange(key, &vanished, ev.At, r, false, ""))
			}
			state, overwritten = stNone, false
			continue
		}
		if ev.Name == "expire" && !afterWrite {
			switch {
			case ks.waiting():
				// A renewal of the hold a read found gone, before the
				// event that says how it ended.
				ks.renewWaiting(key, ev.At)
			case state == stCur && !ks.expectWrite:
				renewals = append(renewals, ev.At)
			}
			continue
		}
		if !writeEvent(ev.Name) {
			continue
		}
		ks.afterWrite = true
		if ks.waiting() {
			// Until a waiting end's event arrives, writes are changes
			// to the hold that ended.
			continue
		}
		switch {
		case state == stNone:
			state, wroteAt = stUnknown, ev.At
		case state == stCur && ks.expectWrite:
			ks.expectWrite = false // the write that created ks.cur
		case state == stCur && replacingWrite(ev.Name):
			overwritten, wrote = true, true
			renewals = append(renewals, ev.At)
		case state == stCur:
			wrote = true // a Redisson re-entry: HINCRBY, then PEXPIRE
		}
	}

	switch {
	case present && state == stCur && ks.cur.ID == h.ID:
		prev := ks.cur
		h.Token = prev.Token // the grant's: a re-entrant counter may have moved since
		later, earlier := deadlineMoved(*prev, h)
		counted := len(renewals) > 0 || wrote
		if (later || earlier) && len(renewals) > 0 {
			// The deadline read is the last renewal's; the ones
			// before it were overtaken.
			renewals = renewals[:len(renewals)-1]
		}
		ks.queue = appendOvertaken(ks.queue, key, prev, renewals)
		switch {
		case (later || earlier) && !counted:
			// Nothing in this batch set the deadline (say, only a SET's
			// own expire): a renewal whose notification is still to come
			// did, and that notification will count it.
			ks.cur = &h
		case later || earlier:
			ks.queue = append(ks.queue, change{Kind: changeRenew, Key: key, H: &h, At: h.At})
			ks.cur = &h
		default:
			n := narrow(*prev, h)
			n.Count = h.Count
			ks.cur = &n
		}
	case present && state == stCur && overwritten:
		// SET over a held lock: the tracker decides whether that
		// superseded a valid lease (an overlap) or a lapsed one.
		ks.queue = append(ks.queue, change{Kind: changeGrant, Key: key, H: &h, At: h.At})
		ks.cur = &h
	case present && state == stCur:
		// The read ran ahead: the previous hold ended and this one began
		// after the events seen so far.
		ks.queue = appendOvertaken(ks.queue, key, ks.cur, renewals)
		ks.queue = append(ks.queue, waitingEnd(key, ks.cur, h.At), change{Kind: changeGrant, Key: key, H: &h, At: h.At})
		ks.cur, ks.expectWrite = &h, true
	case present:
		ks.queue = append(ks.queue, change{Kind: changeGrant, Key: key, H: &h, At: h.At})
		ks.cur, ks.expectWrite = &h, state != stUnknown
	case state == stCur:
		ks.queue = appendOvertaken(ks.queue, key, ks.cur, renewals)
		ks.queue = append(ks.queue, waitingEnd(key, ks.cur, h.At))
		ks.cur, ks.expectWrite = nil, false
	case state == stUnknown:
		ks.queue = append(ks.queue, vanishedGrant(key, &vanished, wroteAt), waitingEnd(key, &vanished, h.At))
	}
	out := ks.flush()
	s.track(key, ks)
	s.prune(key)
	return out
}

// gone applies a read that found key gone at at, with no notification
// before it, as applyEvents does; why explains the hold's end if its end
// event never comes.
func (s *instanceState) gone(key string, at time.Time, why string) []change {
	queued := 0
	if ks := s.keys[key]; ks != nil {
		queued = len(ks.queue)
	}
	out := s.applyEvents(key, nil, false, holding{At: at}, holding{})
	if ks := s.keys[key]; ks != nil && len(ks.queue) > queued && ks.queue[len(ks.queue)-1].waiting {
		ks.queue[len(ks.queue)-1].Why = why // the end this read found, not one found before
	}
	return out
}

// Why a hold ended without its end event, when a read after notifications
// found it gone, and when a periodic pass never found it.
const (
	readGone = "no end event for a key found gone"
	passGone = "gone when every key was read again"
)

// resolvePending gives up waiting for the end events that are not coming:
// the notification stream has delivered everything published before seen,
// so a hold found gone by a read before then whose end event has not arrived
// ended without one (FLUSHALL, FLUSHDB, SWAPDB). It guesses how each ended
// from its deadline, and returns the changes that were waiting. Under a
// backlog this waits as long as the backlog lasts, and so counts the
// renewals still queued ahead of the end event.
func (s *instanceState) resolvePending(seen time.Time) []change {
	due := make(map[string]bool)
	for key := range s.queued {
		if ks := s.keys[key]; ks.queue[0].waiting && ks.queue[0].At.Before(seen) {
			due[key] = true
		}
	}
	var out []change
	for _, key := range sortedKeys(due) {
		ks := s.keys[key]
		for len(ks.queue) > 0 && ks.queue[0].waiting && ks.queue[0].At.Before(seen) {
			why := ks.queue[0].Why
			if why == "" {
				why = readGone
			}
			ks.queue[0] = inferredEnd(key, ks.queue[0].H, ks.queue[0].At, why)
			out = append(out, ks.flush()...)
		}
		s.track(key, ks)
		s.prune(key)
	}
	return out
}

// oldestWaiting returns when the oldest hold still waiting for its end
// event was found gone; zero if none is.
func (s *instanceState) oldestWaiting() time.Time {
	var oldest time.Time
	for key := range s.queued {
		for _, ch := range s.keys[key].queue {
			if ch.waiting && (oldest.IsZero() || ch.At.Before(oldest)) {
				oldest = ch.At
			}
		}
	}
	return oldest
}

func (s *instanceState) prune(key string) {
	if ks := s.keys[key]; ks != nil && ks.cur == nil && len(ks.queue) == 0 {
		delete(s.keys, key)
	}
}

// replace makes a full scan the instance's state. A hold that kept its ID
// keeps its grant's token and its narrowed deadline window unless the scan
// shows the deadline moved. Queued changes are dropped: the source snapshot
// this scan feeds settles what they were about.
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
	clear(s.queued)
}

// reconcile makes reads of some keys that found them held (a page of a
// periodic pass) their state, as replace does for every key, with one
// difference: a hold that kept its ID keeps its deadline whatever the read
// found. A renewal the read ran after is the notification stream's to
// report; taking its deadline here would leave the read that follows its
// notification nothing new to show, and the renewal would count only as
// overtaken. Keys a pass found gone are gone's, not reconcile's: their
// notifications may still be on their way. It returns the keys, in order.
func (s *instanceState) reconcile(read map[string]holding) []string {
	settled := make([]string, 0, len(read))
	for key, h := range read {
		if old := s.keys[key]; old != nil && old.cur != nil && old.cur.ID == h.ID {
			s.keys[key] = &keyState{cur: old.cur, afterWrite: old.afterWrite, touched: old.touched}
		} else {
			s.keys[key] = &keyState{cur: &h}
		}
		delete(s.queued, key)
		settled = append(settled, key)
	}
	slices.Sort(settled)
	return settled
}

// unseen returns, in order, the keys a periodic pass that began at since
// did not find and no notification touched since then: gone without an
// event (FLUSHALL, FLUSHDB). A key written after the pass passed its place
// is not found but is touched.
func (s *instanceState) unseen(seen map[string]bool, since time.Time) []string {
	gone := make(map[string]bool)
	before := since.UnixNano()
	for key, ks := range s.keys {
		if !seen[key] && ks.touched < before {
			gone[key] = true
		}
	}
	return sortedKeys(gone)
}

// holds returns every key's current hold, shared (see change.H).
func (s *instanceState) holds() map[string]*holding {
	out := make(map[string]*holding, len(s.keys))
	for key, ks := range s.keys {
		if ks.cur != nil {
			out[key] = ks.cur
		}
	}
	return out
}

func endChange(key string, h *holding, at time.Time, r endReason, inferred bool, why string) change {
	return change{Kind: changeEnd, Key: key, H: h, At: at, Reason: r, Inferred: inferred, Why: why}
}

// appendOvertaken appends an overtaken renewal of h for each notification
// time in at.
func appendOvertaken(q []change, key string, h *holding, at []time.Time) []change {
	for _, t := range at {
		q = append(q, change{Kind: changeRenew, Key: key, H: h, At: t, Overtaken: true})
	}
	return q
}

func waitingEnd(key string, h *holding, at time.Time) change {
	return change{Kind: changeEnd, Key: key, H: h, At: at, waiting: true}
}

// inferredEnd ends h at at without knowing how: expired if its deadline had
// surely passed by then, released otherwise.
func inferredEnd(key string, h *holding, at time.Time, why string) change {
	r := endReleased
	if h.expires() && !at.Before(h.Lo) {
		r = endExpired
	}
	return endChange(key, h, at, r, true, why)
}

func vanishedGrant(key string, h *holding, at time.Time) change {
	return change{Kind: changeGrant, Key: key, H: h, At: at, Inferred: true, Why: "the key was written and gone again before the collector could read it"}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
