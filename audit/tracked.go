package audit

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// lockState is what the tracker keeps of one lock: a TrackState in compact
// form. The lock's current state is not kept but derived from its newest
// tenure (lock), and tenures keep their times as Unix nanoseconds. A busy
// source has a hundred thousand locks, so each byte here counts that often:
// its kind and class, the same for most locks, are one code (lockMetas).
type lockState struct {
	key            LockKey
	meta           uint16   // lockMetas' code of the lock's kind and class
	recent         []tenure // newest last, consecutive by seq up to nextSeq; the last is current while held
	nextSeq        int64    // the seq of the newest grant, 0 before the first
	lastGrantToken *int64
	resources      map[string]*ResourceState

	// As in TrackState.
	expireByClock, sequentialTokens, tokenPerTenure, unfencedReported bool

	// Leadership health (health.go): when the lock, free now, becomes
	// leaderless (Unix nanoseconds; 0: it does not), read by every Tick;
	// and what was reported, nil until something was: few locks need it.
	leaderlessDue int64
	reported      *reported
}

// reported is what leadership health and zombie findings a lock has had,
// so that each is raised once: when the last flapping finding was (Unix
// nanoseconds), the tenures that tight_renewal and clock_skew were raised
// for, and the zombie tenures whose zombie_holder finding was (belief.go).
type reported struct {
	flappingAt, tightSeq, skewSeq int64
	zombies                       []ZombieMark
}

// lockMeta is what a lock shares with most others: its source's kind and
// its class.
type lockMeta struct {
	kind  SourceKind
	class Class
}

// lockMetas codes each lock's kind and class; endReasons each tenure's end,
// "" (still held) being 0.
var (
	lockMetas  codebook[lockMeta]
	endReasons = newCodebook("", EndReleased, EndExpired, EndSuperseded)
)

func (st *lockState) kind() SourceKind { return lockMetas.value(st.meta).kind }
func (st *lockState) class() Class     { return lockMetas.value(st.meta).class }

func (st *lockState) setKind(kind SourceKind) {
	st.meta = lockMetas.code(lockMeta{kind: kind, class: st.class()})
}

func (st *lockState) setClass(class Class) {
	st.meta = lockMetas.code(lockMeta{kind: st.kind(), class: class})
}

// newLockState returns the state of a lock not seen before.
func newLockState(key LockKey, kind SourceKind, class Class) *lockState {
	return &lockState{key: key, meta: lockMetas.code(lockMeta{kind: kind, class: class})}
}

// codebook gives each distinct value it is handed a small code, for what
// the tracker keeps per lock or tenure that takes few values across a
// process: two bytes or one where a string takes 16. Codes are never
// reused, so one read takes no lock.
type codebook[T comparable] struct {
	mu     sync.Mutex
	values atomic.Pointer[[]T] // by code; replaced, never changed, to add one
}

func newCodebook[T comparable](values ...T) *codebook[T] {
	c := &codebook[T]{}
	c.values.Store(&values)
	return c
}

// code returns v's code, adding v when it is new.
func (c *codebook[T]) code(v T) uint16 {
	if i := c.index(v); i >= 0 {
		return uint16(i)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := c.index(v); i >= 0 {
		return uint16(i)
	}
	var values []T
	if p := c.values.Load(); p != nil {
		values = *p
	}
	if len(values) > 1<<16-1 {
		panic(fmt.Sprintf("audit: more than %d distinct %T values", 1<<16, v))
	}
	values = append(slices.Clip(values), v)
	c.values.Store(&values)
	return uint16(len(values) - 1)
}

func (c *codebook[T]) index(v T) int {
	if p := c.values.Load(); p != nil {
		return slices.Index(*p, v)
	}
	return -1
}

// value returns the value of a code code returned; the zero value for 0 in
// a codebook made empty.
func (c *codebook[T]) value(code uint16) T {
	var v T
	if p := c.values.Load(); p != nil && int(code) < len(*p) {
		v = (*p)[code]
	}
	return v
}

// health returns what st has reported, to be changed.
func (st *lockState) health() *reported {
	if st.reported == nil {
		st.reported = &reported{}
	}
	return st.reported
}

// reportedOf returns what st has reported, zero when nothing.
func (st *lockState) reportedOf() reported {
	if st.reported == nil {
		return reported{}
	}
	return *st.reported
}

// tenure is a Tenure as the tracker keeps it: without the lock's key, which
// its lockState has, and with times as Unix nanoseconds (see Nanos), NoNanos
// for none.
type tenure struct {
	seq      int64
	holder   string
	token    *int64
	position string
	granted  int64
	renewed  int64
	expires  int64 // NoNanos when unknown
	ended    int64 // NoNanos while held
	lease    time.Duration
	renewals int64
	end      endCode // endHeld while held
	observed bool
	// samples and gapMS are how many of the holder's renewal intervals
	// the tenure has seen and their typical length in milliseconds
	// (timeRenewal); not saved, so learnt again after a restart. Beside
	// observed, they take no more room than its padding did.
	samples uint8
	gapMS   int32
}

// endCode is a tenure's EndReason as endReasons codes it: one byte, which
// with the fields beside it takes a tenure from the 128-byte size class to
// the 112-byte one.
type endCode uint8

// endHeld is the end of a tenure still held.
const endHeld endCode = 0

func endOf(r EndReason) endCode {
	code := endReasons.code(r)
	if code > 255 {
		panic(fmt.Sprintf("audit: more than 256 distinct tenure end reasons: %q", r))
	}
	return endCode(code)
}

func (e endCode) reason() EndReason { return endReasons.value(uint16(e)) }
func (e endCode) String() string    { return string(e.reason()) }

func (tn *tenure) held() bool { return tn.end == endHeld }

func (tn *tenure) grantedAt() time.Time { return timeOf(tn.granted) }
func (tn *tenure) renewedAt() time.Time { return timeOf(tn.renewed) }
func (tn *tenure) expiresAt() time.Time { return timeOf(tn.expires) }
func (tn *tenure) endedAt() time.Time   { return timeOf(tn.ended) }

// export returns the tenure as the rest of the service sees it.
func (tn *tenure) export(key LockKey) Tenure {
	return Tenure{
		Lock: key, Seq: tn.seq, Holder: tn.holder, Token: tn.token,
		GrantedAt: tn.grantedAt(), Observed: tn.observed, Position: tn.position,
		Renewals: tn.renewals, LastRenewedAt: tn.renewedAt(), LeaseDuration: tn.lease,
		ExpiresAt: tn.expiresAt(), EndedAt: tn.endedAt(), End: tn.end.reason(),
	}
}

func tenureOf(t Tenure) tenure {
	return tenure{
		seq: t.Seq, holder: t.Holder, token: t.Token, position: t.Position,
		granted: nanos(t.GrantedAt), renewed: nanos(t.LastRenewedAt), expires: nanos(t.ExpiresAt), ended: nanos(t.EndedAt),
		lease: t.LeaseDuration, renewals: t.Renewals, end: endOf(t.End), observed: t.Observed,
	}
}

// lock returns the lock's current state, which follows from its newest
// tenure: held by it; expired, naming it, after it expired; free after it
// was released, or before any grant.
func (st *lockState) lock() Lock {
	meta := lockMetas.value(st.meta)
	l := Lock{Source: st.key.Source, Name: st.key.Name, Kind: meta.kind, Class: meta.class, State: StateFree}
	n := len(st.recent)
	if n == 0 {
		return l
	}
	ten := &st.recent[n-1]
	l.LeaseDuration = ten.lease
	switch ten.end.reason() {
	case "":
		l.State, l.ChangedAt = StateHeld, ten.grantedAt()
	case EndExpired:
		l.State, l.ChangedAt = StateExpired, ten.endedAt()
	default:
		l.ChangedAt = ten.endedAt()
		return l
	}
	l.Holder, l.Token = ten.holder, ten.token
	if !ten.observed {
		l.AcquiredAt = ten.grantedAt()
	}
	l.RenewedAt, l.ExpiresAt = ten.renewedAt(), ten.expiresAt()
	return l
}

// export returns a copy of the state as a TrackState, for a Journal: all but
// its resources, which a batch carries one by one (Batch.Resources).
func (st *lockState) export() TrackState {
	ts := TrackState{
		Lock: st.lock(), NextSeq: st.nextSeq, LastGrantToken: st.lastGrantToken,
		ExpireByClock: st.expireByClock, SequentialTokens: st.sequentialTokens, TokenPerTenure: st.tokenPerTenure,
		UnfencedReported: st.unfencedReported,
		LeaderlessDue:    timeOrZero(st.leaderlessDue),
	}
	if r := st.reported; r != nil {
		ts.FlappingAt, ts.TightSeq, ts.SkewSeq = timeOrZero(r.flappingAt), r.tightSeq, r.skewSeq
		ts.Zombies = slices.Clone(r.zombies)
	}
	if len(st.recent) > 0 {
		ts.Recent = make([]Tenure, len(st.recent))
		for i := range st.recent {
			ts.Recent[i] = st.recent[i].export(st.key)
		}
	}
	return ts
}

// lockStateOf returns a tracker's state of a lock from what a Journal saved.
// The lock's current state is derived again from the tenures, as the
// tracker wrote both.
func lockStateOf(ts TrackState) *lockState {
	st := &lockState{
		key: ts.Lock.Key(), meta: lockMetas.code(lockMeta{kind: ts.Lock.Kind, class: ts.Lock.Class}), nextSeq: ts.NextSeq, lastGrantToken: ts.LastGrantToken,
		expireByClock: ts.ExpireByClock, sequentialTokens: ts.SequentialTokens, tokenPerTenure: ts.TokenPerTenure,
		unfencedReported: ts.UnfencedReported,
		resources:        cloneResources(ts.Resources),
		leaderlessDue:    nanosOrZero(ts.LeaderlessDue),
	}
	if ts.FlappingAt != (time.Time{}) || ts.TightSeq != 0 || ts.SkewSeq != 0 || len(ts.Zombies) > 0 {
		st.reported = &reported{flappingAt: nanosOrZero(ts.FlappingAt), tightSeq: ts.TightSeq, skewSeq: ts.SkewSeq, zombies: slices.Clone(ts.Zombies)}
	}
	if len(ts.Recent) > 0 {
		st.recent = make([]tenure, len(ts.Recent))
		for i, t := range ts.Recent {
			st.recent[i] = tenureOf(t)
		}
	}
	return st
}

func cloneResources(m map[string]*ResourceState) map[string]*ResourceState {
	if m == nil {
		return nil
	}
	c := make(map[string]*ResourceState, len(m))
	for name, r := range m {
		rc := r.clone()
		c[name] = &rc
	}
	return c
}

// clone returns a copy of r that shares no slice with it.
func (r *ResourceState) clone() ResourceState {
	c := r.saved()
	if len(r.Accepted) > 0 {
		c.Accepted = append([]AcceptedWrite(nil), r.Accepted...)
	}
	return c
}

// saved returns a copy of what a store keeps of r: all but the accepted
// writes, which are memory only.
func (r *ResourceState) saved() ResourceState {
	c := ResourceState{Highest: r.Highest}
	if len(r.Pending) > 0 {
		c.Pending = append([]PendingGrant(nil), r.Pending...)
	}
	return c
}

// timeOrZero and nanosOrZero convert the lock state's optional times, 0 for
// none.
func timeOrZero(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return timeOf(n)
}

func nanosOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return nanos(t)
}

// nanos and timeOf are the tracker's short names for the time codec.
func nanos(t time.Time) int64  { return Nanos(t) }
func timeOf(n int64) time.Time { return TimeOf(n) }
