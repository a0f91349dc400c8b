package review

import (
	"cmp"
	"container/list"
	"context"
	"math"
	"slices"
	"sync"

	"github.com/leasewatch/leasewatch/audit"
)

// WriteCache keeps the write reports that reports read, a lock's writes of
// one outcome in one tick (audit.WriteTick) at a time, in memory bounded by
// a number of writes, the least recently read dropped first. A report that
// has one reads the store's count of each tick of its span
// (Store.WriteTicks, a row per tick) and reads again only the ticks whose
// count is not the one it kept: under ingest, the newest few. People
// reviewing an incident reload the same locks' last minutes while their
// resources keep writing, and each report read every write of them again,
// thousands of rows each, after each commit had dropped the database's
// pages from the read connection's memory.
//
// Writes are stored and pruned, never changed, so a tick whose count is
// unchanged holds the same writes, but for one case: as many writes pruned
// from it as were stored into it between two reports. Retention prunes
// writes older than days, and a write stored that old is pruned with the
// next sweep. The counts and the writes come from the store's own
// transactions, so the cache is right on every store, and with replicas
// writing into a shared PostgreSQL.
//
// A WriteCache is safe for concurrent use.
type WriteCache struct {
	max int // writes kept at most

	mu    sync.Mutex
	n     int                       // writes kept
	ticks map[tickKey]*list.Element // of *cachedTick
	lru   list.List                 // most recently read first
}

// NewWriteCache returns a cache of at most max writes (about 24 bytes each,
// and each tick's holders, resources and tokens once).
func NewWriteCache(max int) *WriteCache {
	return &WriteCache{max: max, ticks: make(map[tickKey]*list.Element)}
}

// Len returns how many writes the cache holds.
func (c *WriteCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

type tickKey struct {
	lock    int64
	outcome audit.WriteOutcome
	start   int64 // the tick's first nanosecond
}

// cachedTick is a tick's writes in (at, id) order, each in 24 bytes: its
// holders, resources and tokens are kept once per tick.
type cachedTick struct {
	key     tickKey
	n       int // the store's count when it was read
	rows    []tickRow
	strings []string
	tokens  []int64
}

type tickRow struct {
	id, at              int64
	holder, resource    uint16 // in strings
	token, highestToken uint16 // in tokens; noToken for none
}

const noToken = 1<<16 - 1

// maxPerTick is the most distinct holders, resources or tokens a tick may
// have to be kept.
const maxPerTick = noToken

// write is row i as the store gives it.
func (t *cachedTick) write(i int) audit.WriteEvent {
	r := t.rows[i]
	token := func(j uint16) *int64 {
		if j == noToken {
			return nil
		}
		return &t.tokens[j] // shared: no reader changes a write's token
	}
	return audit.WriteEvent{ID: r.id, At: audit.TimeOf(r.at), Outcome: t.key.outcome, Holder: t.strings[r.holder],
		Token: token(r.token), Resource: t.strings[r.resource], HighestToken: token(r.highestToken)}
}

// newCachedTick packs writes, which it sorts, or returns false if they have
// too many distinct values to pack.
func newCachedTick(key tickKey, n int, writes []audit.WriteEvent) (*cachedTick, bool) {
	slices.SortFunc(writes, func(a, b audit.WriteEvent) int { return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.ID, b.ID)) })
	t := &cachedTick{key: key, n: n, rows: make([]tickRow, len(writes))}
	strs, tokens := make(map[string]uint16), make(map[int64]uint16)
	tok := func(p *int64) (uint16, bool) {
		if p == nil {
			return noToken, true
		}
		return intern(tokens, &t.tokens, *p)
	}
	for i, w := range writes {
		r := tickRow{id: w.ID, at: audit.Nanos(w.At)}
		var ok [4]bool
		r.holder, ok[0] = intern(strs, &t.strings, w.Holder)
		r.resource, ok[1] = intern(strs, &t.strings, w.Resource)
		r.token, ok[2] = tok(w.Token)
		r.highestToken, ok[3] = tok(w.HighestToken)
		if ok != [4]bool{true, true, true, true} {
			return nil, false
		}
		t.rows[i] = r
	}
	return t, true
}

// intern returns v's index in values, appending it (and noting its index in
// index) if it is new; false if values already holds maxPerTick.
func intern[V comparable](index map[V]uint16, values *[]V, v V) (uint16, bool) {
	if j, ok := index[v]; ok {
		return j, true
	}
	if len(*values) == maxPerTick {
		return 0, false
	}
	j := uint16(len(*values))
	index[v] = j
	*values = append(*values, v)
	return j, true
}

// get returns the kept tick of key if the store still counts n writes in it.
func (c *WriteCache) get(key tickKey, n int) *cachedTick {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.ticks[key]
	if !ok {
		return nil
	}
	if t := e.Value.(*cachedTick); t.n == n {
		c.lru.MoveToFront(e)
		return t
	}
	c.remove(e) // stale: the caller reads it again
	return nil
}

// put keeps t, and drops the least recently read ticks past the cache's
// size.
func (c *WriteCache) put(t *cachedTick) {
	if len(t.rows) > c.max/4 {
		return // one tick would push out most others
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.ticks[t.key]; ok {
		c.remove(e)
	}
	c.ticks[t.key] = c.lru.PushFront(t)
	c.n += len(t.rows)
	for c.n > c.max {
		c.remove(c.lru.Back())
	}
}

func (c *WriteCache) remove(e *list.Element) {
	t := c.lru.Remove(e).(*cachedTick)
	delete(c.ticks, t.key)
	c.n -= len(t.rows)
}

// each passes the lock's writes of outcome in span (both ends included) to
// fn, newest first, up to max of them; more says there were more. It reads
// the ticks whose writes it does not hold, and keeps them. A span that
// starts before 1970, whose writes are in no tick, is read from the store
// as without a cache.
func (c *WriteCache) each(ctx context.Context, st Store, lockID int64, outcome audit.WriteOutcome, span Interval, max int, fn func(audit.WriteEvent)) (more bool, err error) {
	from := audit.Nanos(span.From)
	if from < 0 {
		return readWrites(ctx, st, lockID, outcome, span, max, fn)
	}
	first := audit.TimeOf(from - from%int64(audit.WriteTick))
	ticks, err := st.WriteTicks(ctx, lockID, outcome, audit.TimeFilter{From: first, To: span.To})
	if err != nil {
		return false, err
	}
	to, n := audit.Nanos(span.To), 0
	for _, tc := range slices.Backward(ticks) {
		t, err := c.tick(ctx, st, lockID, outcome, tc)
		if err != nil {
			return false, err
		}
		for i := t.len() - 1; i >= 0; i-- {
			if at := t.at(i); at < from || at > to {
				continue
			}
			if n == max {
				return true, nil
			}
			fn(t.write(i))
			n++
		}
	}
	return false, nil
}

// tickWrites is a tick's writes in (at, id) order: packed, or as read when
// they were too varied to pack.
type tickWrites struct {
	packed *cachedTick
	plain  []audit.WriteEvent
}

func (t tickWrites) len() int {
	if t.packed != nil {
		return len(t.packed.rows)
	}
	return len(t.plain)
}

func (t tickWrites) at(i int) int64 {
	if t.packed != nil {
		return t.packed.rows[i].at
	}
	return audit.Nanos(t.plain[i].At)
}

func (t tickWrites) write(i int) audit.WriteEvent {
	if t.packed != nil {
		return t.packed.write(i)
	}
	return t.plain[i]
}

// tick returns the writes of the tick tc counts: those kept, if the store
// still counts as many, else those read now, kept if they are as many as
// it counted (none stored or pruned in between).
func (c *WriteCache) tick(ctx context.Context, st Store, lockID int64, outcome audit.WriteOutcome, tc audit.TickCount) (tickWrites, error) {
	key := tickKey{lock: lockID, outcome: outcome, start: audit.Nanos(tc.Start)}
	if t := c.get(key, tc.N); t != nil {
		return tickWrites{packed: t}, nil
	}
	var writes []audit.WriteEvent
	tick := Interval{From: tc.Start, To: tc.Start.Add(audit.WriteTick - 1)}
	if _, err := readWrites(ctx, st, lockID, outcome, tick, math.MaxInt, func(w audit.WriteEvent) { writes = append(writes, w) }); err != nil {
		return tickWrites{}, err
	}
	t, ok := newCachedTick(key, tc.N, writes) // sorts writes
	if !ok {
		return tickWrites{plain: writes}, nil
	}
	if len(writes) == tc.N {
		c.put(t)
	}
	return tickWrites{packed: t}, nil
}

// readWrites passes the lock's writes of outcome in span (both ends
// included) to fn, from the store a page at a time, newest page first, up
// to max of them; more says there were more.
func readWrites(ctx context.Context, st Store, lockID int64, outcome audit.WriteOutcome, span Interval, max int, fn func(audit.WriteEvent)) (more bool, err error) {
	paged := audit.TimeFilter{From: span.From, To: span.To, Limit: pageSize}
	return eachPage(ctx, max,
		func(before audit.EventCursor) ([]audit.WriteEvent, error) {
			return st.WriteEvents(ctx, lockID, outcome, audit.EventFilter{TimeFilter: paged, Before: before})
		},
		func(e audit.WriteEvent) audit.EventCursor { return audit.EventCursor{At: e.At, ID: e.ID} },
		fn)
}

// eachWrite passes the lock's writes of outcome in span to fn, newest
// first up to max, through c when there is one.
func eachWrite(ctx context.Context, st Store, c *WriteCache, lockID int64, outcome audit.WriteOutcome, span Interval, max int, fn func(audit.WriteEvent)) (more bool, err error) {
	if c == nil {
		return readWrites(ctx, st, lockID, outcome, span, max, fn)
	}
	return c.each(ctx, st, lockID, outcome, span, max, fn)
}
