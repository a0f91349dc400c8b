package alert

import (
	"container/heap"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// WatchList finds the held leases that may be near expiry without looking
// at every lock, for a caller that keeps many locks and passes Evaluate only
// those that matter (Input.Locks): evaluation runs several times a second,
// and a scan of 100,000 locks each time took most of a core. A lease can be near expiry only once
// no more than the widest renew margin of it is left, so each held lock is
// scheduled for that moment; a renewal moves the moment later, and the
// schedule is corrected lazily when its entry comes up. Not safe for
// concurrent use.
type WatchList struct {
	widest    float64 // Config.WidestMargin
	watched   func(audit.Class) bool
	scheduled map[audit.LockKey]int64 // each lock's one entry in queue, at (Unix nanoseconds)
	queue     watchQueue
	near      map[audit.LockKey]bool // past their moment at the last Due
}

// NewWatchList returns an empty watch list for cfg's margins and classes.
func NewWatchList(cfg Config) *WatchList {
	return &WatchList{
		widest:    cfg.WidestMargin(),
		watched:   func(c audit.Class) bool { return c != audit.ClassHeartbeat || cfg.IncludeHeartbeats },
		scheduled: make(map[audit.LockKey]int64),
		near:      make(map[audit.LockKey]bool),
	}
}

// from returns when l may first be near expiry; false if it never can be
// (not held, no deadline, or a class alerts leave out).
func (w *WatchList) from(l audit.Lock) (time.Time, bool) {
	if l.State != audit.StateHeld || l.ExpiresAt.IsZero() || l.LeaseDuration <= 0 || !w.watched(l.Class) {
		return time.Time{}, false
	}
	return l.ExpiresAt.Add(-time.Duration(w.widest * float64(l.LeaseDuration))), true
}

// Update schedules l as it now is. An entry already due earlier stays:
// when it comes up, Due reschedules it from the lock as it is then.
func (w *WatchList) Update(l audit.Lock) {
	at, ok := w.from(l)
	if !ok {
		return
	}
	w.schedule(l.Key(), at.UnixNano())
}

// schedule puts the lock k in the queue at at (Unix nanoseconds), unless it
// is there already no later.
func (w *WatchList) schedule(k audit.LockKey, at int64) {
	if cur, ok := w.scheduled[k]; ok && cur <= at {
		return
	}
	w.scheduled[k] = at
	heap.Push(&w.queue, watchEntry{at: at, key: k})
}

// Due returns the locks that may be near expiry at now, as lock returns them,
// each judged as of its source's live time (see Input.Live) if earlier.
func (w *WatchList) Due(now time.Time, live map[string]time.Time, lock func(audit.LockKey) (audit.Lock, bool)) []audit.LockKey {
	for len(w.queue) > 0 && w.queue[0].at <= now.UnixNano() {
		e := heap.Pop(&w.queue).(watchEntry)
		if w.scheduled[e.key] != e.at {
			continue // superseded by an earlier entry
		}
		delete(w.scheduled, e.key)
		l, _ := lock(e.key)
		at, ok := w.from(l)
		switch {
		case !ok:
		case at.After(now):
			w.schedule(e.key, at.UnixNano()) // renewed since it was scheduled
		default:
			w.near[e.key] = true
		}
	}
	var out []audit.LockKey
	for k := range w.near {
		l, _ := lock(k)
		at, ok := w.from(l)
		if !ok || at.After(now) {
			delete(w.near, k) // renewed, released or gone: Update has scheduled it again if held
			continue
		}
		if at.After(asOf(now, live, k.Source)) {
			continue // its collector has not delivered that far yet
		}
		out = append(out, k)
	}
	return out
}

// watchEntry is a lock's moment in the queue, in Unix nanoseconds: a
// time.Time would take 16 bytes more an entry, of 100,000.
type watchEntry struct {
	at  int64
	key audit.LockKey
}

// watchQueue is a min-heap of entries by time.
type watchQueue []watchEntry

func (q watchQueue) Len() int           { return len(q) }
func (q watchQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q watchQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *watchQueue) Push(x any)        { *q = append(*q, x.(watchEntry)) }
func (q *watchQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}
