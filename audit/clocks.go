package audit

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"sync"
	"time"
)

// Holder clocks: how far each holder's clock runs from the collector's,
// estimated from the renewals of backends that record the holder's own time
// (Input.HolderClock: a Kubernetes renewTime, a PostgreSQL lease table's
// holder-clock column), as NTP estimates an offset from its least delayed
// samples.
//
// A renewal written at renewed by the holder's clock and seen at observed by
// the collector's took a delay d ≥ 0 to arrive, so
//
//	observed − renewed = d − offset, with offset = holder's clock − collector's
//
// and the least lag (observed − renewed) over a window, that of the renewal
// delivered fastest, gives offset ≥ −least: the estimate is exact when that
// renewal arrived at once, and low by the least delay otherwise (a few
// milliseconds from a nearby apiserver), which timestamps taken on one side
// of a one-way path cannot measure. Its bound is how far the least lag of
// each minute of the window spreads: a clock that steps or drifts, or a path
// whose delays change, widens it. A holder's renewals of every lock count
// together: one process, one clock.

// ClockWindow is how far back a holder's clock estimate reads its renewals,
// in ClockWindow/clockSlots slots of their own.
const ClockWindow = 10 * time.Minute

// DefaultMaxHolderClocks bounds the holders whose clocks a HolderClocks
// estimates at once: twice the Leases of the largest cluster leasewatch
// watches. A holder past it is counted (Dropped), not estimated, until
// holders silent for a window make room.
const DefaultMaxHolderClocks = 1 << 18

const (
	clockSlots = 10
	clockSlot  = ClockWindow / clockSlots
)

// HolderKey names one holder's clock: holders of different sources are
// different processes, even under one name.
type HolderKey struct {
	Source, Holder string
}

// ClockEstimate is what the renewals of one holder within ClockWindow say
// of its clock.
type ClockEstimate struct {
	HolderKey
	// Heartbeat says the holder's latest renewal was of a heartbeat lease
	// (a node's), not of a lock.
	Heartbeat bool
	// Offset is the holder's clock less the collector's, at least: the
	// holder's clock runs ahead by Offset or more (behind by -Offset or
	// less), the least delivery delay of its renewals more.
	Offset time.Duration
	// Bound is how far the least lags of the Minutes minutes that had
	// renewals spread (the greatest less the least); meaningful only when
	// Minutes is 2 or more (Bounded).
	Bound time.Duration
	// Samples are the renewals within the window, Minutes the minutes of
	// it that had one, Last when the newest was observed.
	Samples, Minutes int
	Last             time.Time
}

// Bounded says the estimate has a bound: renewals in two minutes at least.
func (e ClockEstimate) Bounded() bool { return e.Minutes >= 2 }

// Beyond reports whether the estimate shows the holder's clock ahead by
// more than threshold and by more than its bound: a clock ahead is proven
// by a single renewal written after it was seen, but one whose least lag
// moved more than that within the window cannot be told from a clock that
// stepped (the holder's or the collector's) or a path that slowed.
func (e ClockEstimate) Beyond(threshold time.Duration) bool {
	return e.Samples > 0 && e.Offset > threshold && (!e.Bounded() || e.Offset > e.Bound)
}

// String says what the estimate rests on, for a finding's summary.
func (e ClockEstimate) String() string {
	renewals := "renewals"
	if e.Samples == 1 {
		renewals = "renewal"
	}
	s := fmt.Sprintf("from %d %s in %d of the last %d minutes", e.Samples, renewals, e.Minutes, clockSlots)
	if e.Bounded() {
		s += fmt.Sprintf(", each minute's within %s", e.Bound.Round(time.Millisecond))
	}
	return s
}

// ClockFilter selects estimates (HolderClocks.Largest).
type ClockFilter struct {
	Source string // "" every source
	Holder string // "" every holder
	Class  Class  // "" every class; ClassHeartbeat the holders of heartbeat leases
	Limit  int    // at most this many; 0 every one
}

func (f ClockFilter) matches(k HolderKey, heartbeat bool) bool {
	return (f.Source == "" || k.Source == f.Source) && (f.Holder == "" || k.Holder == f.Holder) &&
		(f.Class == "" || (f.Class == ClassHeartbeat) == heartbeat)
}

// HolderClocks keeps each holder's clock estimate. The tracker feeds it
// (HealthConfig.Clocks) and judges clock_skew by it; readers (the clocks
// page, the API, metrics) read it at any time. It keeps about 210 bytes a
// holder, in one array that a reader walks in a few milliseconds at 100,000
// holders; holders silent for a window are dropped. Safe for concurrent use;
// one tracker feeds one HolderClocks.
type HolderClocks struct {
	mu      sync.Mutex
	max     int
	index   map[HolderKey]int // into entries
	entries []clockEntry
	// swept is the slot up to which holders silent for a window were
	// dropped; dropped counts the holders refused since the start.
	swept   int32
	dropped int
}

// clockEntry is one holder's renewals in the window's slots of clockSlot
// that end with its newest observation's, a ring by slot modulo
// clockSlots: each slot the least lag of the renewals observed within it.
type clockEntry struct {
	key       HolderKey
	slots     [clockSlots]lagSlot
	last      int64 // Unix ns of the newest observation; NoNanos before the first
	lastSlot  int32 // its slot, kept for the readers' walk
	heartbeat bool
}

// lagSlot is one slot's renewals: 8 bytes, where nanoseconds, the slot's
// time and a wider count took 16, a tenth of a holder's memory.
type lagSlot struct {
	least int32  // µs (observed − renewed), clamped to ±maxLag
	count uint16 // 0: empty; stays at its most
}

// maxLag bounds a lag kept: ±35 minutes in µs, beyond any lease. A holder
// further ahead shows as 35 minutes ahead, still true as an "at least".
const maxLag = math.MaxInt32 * time.Microsecond

// NewHolderClocks returns an empty HolderClocks keeping at most
// maxHolders holders (DefaultMaxHolderClocks when 0 or less).
func NewHolderClocks(maxHolders int) *HolderClocks {
	if maxHolders <= 0 {
		maxHolders = DefaultMaxHolderClocks
	}
	return &HolderClocks{max: maxHolders, index: make(map[HolderKey]int)}
}

// slotOf is the slot t falls in.
func slotOf(t time.Time) int32 { return slotOfNanos(Nanos(t)) }

// slotOfNanos is the slot of Unix ns n: Nanos spans ±292 years.
func slotOfNanos(n int64) int32 { return int32(n / int64(clockSlot)) }

// Observe adds a renewal of holder's written at renewed by its clock and
// observed at observed by the collector's, of a lock of class, and returns
// the holder's estimate at observed, renewals until then included. A holder
// past the cap is counted, and its estimate is empty.
func (c *HolderClocks) Observe(key HolderKey, class Class, observed, renewed time.Time) ClockEstimate {
	lag := min(max(observed.Sub(renewed), -maxLag), maxLag)
	now := slotOf(observed)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep(now)
	i, ok := c.index[key]
	if !ok {
		if len(c.entries) >= c.max {
			c.dropped++
			return ClockEstimate{HolderKey: key}
		}
		i = len(c.entries)
		c.entries = append(c.entries, clockEntry{key: key, last: NoNanos, lastSlot: slotOfNanos(NoNanos)})
		c.index[key] = i
	}
	e := &c.entries[i]
	e.add(Nanos(observed), int32(lag/time.Microsecond))
	e.heartbeat = class == ClassHeartbeat
	return e.estimate(now)
}

// sweep drops, once a slot, the holders with no renewal within the window
// before now: a node removed, a process gone.
func (c *HolderClocks) sweep(now int32) {
	if now <= c.swept {
		return
	}
	c.swept = now
	for i := len(c.entries) - 1; i >= 0; i-- {
		if c.entries[i].window(now).samples > 0 {
			continue
		}
		delete(c.index, c.entries[i].key)
		last := len(c.entries) - 1
		if i != last {
			c.entries[i] = c.entries[last]
			c.index[c.entries[i].key] = i
		}
		c.entries[last] = clockEntry{}
		c.entries = c.entries[:last]
	}
}

// add adds a renewal observed at Unix ns at with lag µs: a slot newer
// than the newest empties the slots the ring moves past; one older than
// the window that ends at the newest is out of it already.
func (e *clockEntry) add(at int64, lag int32) {
	slot, last := slotOfNanos(at), e.lastSlot
	switch {
	case slot > last:
		for s := max(last+1, slot-clockSlots+1); s <= slot; s++ {
			e.slots[mod(s, clockSlots)] = lagSlot{}
		}
		e.last, e.lastSlot = at, slot
	case slot <= last-clockSlots:
		return
	default:
		e.last = max(e.last, at)
	}
	s := &e.slots[mod(slot, clockSlots)]
	if s.count == 0 || lag < s.least {
		s.least = lag
	}
	s.count = min(s.count+1, math.MaxUint16)
}

// lags is what the slots of a window hold: the least and greatest of
// their least lags, and how many renewals in how many slots.
type lags struct {
	least, greatest  int64
	samples, minutes int
}

// window is e's lags over the window that ends at slot now. Renewals
// observed after now count: a reader's clock may be behind the inputs'.
func (e *clockEntry) window(now int32) lags {
	w := lags{least: math.MaxInt64, greatest: math.MinInt64}
	last := e.lastSlot
	// The ring's i holds the slot age slots before the newest; those
	// younger than keep are in the window.
	keep := last - (now - clockSlots)
	if keep <= 0 {
		return w
	}
	head := mod(last, clockSlots)
	for i, s := range e.slots {
		age := head - int32(i)
		if age < 0 {
			age += clockSlots
		}
		if s.count == 0 || age >= keep {
			continue
		}
		least := int64(s.least) * int64(time.Microsecond)
		w.least, w.greatest = min(w.least, least), max(w.greatest, least)
		w.samples += int(s.count)
		w.minutes++
	}
	return w
}

// offset is the estimate's offset: the least lag negated.
func (w lags) offset() time.Duration { return -time.Duration(w.least) }

// estimate is e's estimate over the window that ends at slot now.
func (e *clockEntry) estimate(now int32) ClockEstimate {
	w := e.window(now)
	est := ClockEstimate{HolderKey: e.key, Heartbeat: e.heartbeat, Last: TimeOf(e.last)}
	if w.samples == 0 {
		return est
	}
	est.Offset, est.Samples, est.Minutes = w.offset(), w.samples, w.minutes
	est.Bound = time.Duration(w.greatest - w.least) // at most 2 maxLag
	return est
}

func mod(a, n int32) int32 {
	return ((a % n) + n) % n
}

// Estimate returns holder's estimate over the window that ends at now, and
// false when it has no renewal within it.
func (c *HolderClocks) Estimate(key HolderKey, now time.Time) (ClockEstimate, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.index[key]
	if !ok {
		return ClockEstimate{}, false
	}
	e := c.entries[i].estimate(slotOf(now))
	return e, e.Samples > 0
}

// Largest returns the estimates f selects over the window that ends at now,
// those whose offset is largest either way first (then by source and
// holder), at most f.Limit of them, and how many f selects in all. It keeps
// only f.Limit at a time: a page of the largest is cheap at 100,000 holders.
func (c *HolderClocks) Largest(now time.Time, f ClockFilter) (top []ClockEstimate, total int) {
	slot := slotOf(now)
	var h clockHeap
	c.mu.Lock()
	for i := range c.entries {
		e := &c.entries[i]
		if !f.matches(e.key, e.heartbeat) {
			continue
		}
		w := e.window(slot)
		if w.samples == 0 {
			continue
		}
		total++
		full := f.Limit > 0 && len(h) >= f.Limit
		if full && absDuration(w.offset()) < absDuration(h[0].Offset) {
			continue // the common case, decided without building the estimate
		}
		est := e.estimate(slot)
		switch {
		case !full:
			heap.Push(&h, est)
		case ClockOrder(est, h[0]) < 0:
			h[0] = est
			heap.Fix(&h, 0)
		}
	}
	c.mu.Unlock()
	top = make([]ClockEstimate, len(h))
	for i := len(top) - 1; i >= 0; i-- {
		top[i] = heap.Pop(&h).(ClockEstimate)
	}
	return top, total
}

// Stats returns how many holders are kept and how many were refused, past
// the cap, since the start.
func (c *HolderClocks) Stats() (holders, dropped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries), c.dropped
}

// ClockOrder orders estimates as Largest lists them: the largest offset
// either way first, then by source and holder.
func ClockOrder(a, b ClockEstimate) int {
	if c := cmp.Compare(absDuration(b.Offset), absDuration(a.Offset)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Source, b.Source); c != 0 {
		return c
	}
	return cmp.Compare(a.Holder, b.Holder)
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d // -MinInt64 cannot be: offsets are negated lags, clamped
	}
	return d
}

// clockHeap keeps the estimates listed last by ClockOrder on top, so that
// the first f.Limit stay.
type clockHeap []ClockEstimate

func (h clockHeap) Len() int           { return len(h) }
func (h clockHeap) Less(i, j int) bool { return ClockOrder(h[i], h[j]) > 0 }
func (h clockHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *clockHeap) Push(x any)        { *h = append(*h, x.(ClockEstimate)) }
func (h *clockHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
