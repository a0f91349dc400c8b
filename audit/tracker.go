package audit

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// TrackerConfig tunes the tracker.
type TrackerConfig struct {
	// RenewMarginRatio: a renewal that arrives with less than this fraction of
	// the lease left is late (alerts.renew_margin_ratio). Default 0.25.
	RenewMarginRatio float64
	// RecentTenures is how many past tenures per lock the tracker keeps to join
	// write reports to; older tokens are still judged by comparison with the
	// newest grant. Default 16.
	RecentTenures int
	// SourceKinds names the kind of each configured source, for locks that a
	// write report mentions before any collector has seen them.
	SourceKinds map[string]SourceKind
	// Health tunes the leadership health findings (health.go).
	Health HealthConfig
	// MaxResources bounds the resources per lock whose state the tracker
	// keeps: a write report that names one more is refused
	// (AdmitResources). Default DefaultMaxResources.
	MaxResources int
}

// DefaultMaxResources is the default of TrackerConfig.MaxResources: more
// resources than a lock's writes go to in any deployment seen, and few
// enough that a grant, which opens an exposure window at each of them,
// stays cheap.
const DefaultMaxResources = 1024

const (
	maxPendingGrants = 8
	// maxAcceptedWrites bounds the accepted writes per resource kept for a
	// grant the collector reports after them.
	maxAcceptedWrites = 4
)

// Tracker is a pure, deterministic per-lock state machine. It turns collector
// inputs, write reports and clock ticks into events, tenures and findings.
// Time comes only from its inputs (the injected clock is the caller's), so the
// same inputs always give the same output. It is not safe for concurrent use;
// the Recorder owns one.
type Tracker struct {
	cfg   TrackerConfig
	locks map[LockKey]*lockState
	now   time.Time // the latest time the tracker has been told of
	// live is, per source, the time up to which its collector has delivered
	// every change (Input.Live): clock expiry never runs past it.
	live map[string]time.Time
	// dueFrom, when not zero, is a time no held lock that expires by the
	// clock expires before, so Tick need not look at any lock until then.
	// Every step lowers it to the expiry of each lock it changed; a Tick
	// that looks at every lock sets it to the earliest expiry it saw.
	dueFrom time.Time
}

// NewTracker returns an empty tracker.
func NewTracker(cfg TrackerConfig) *Tracker {
	if cfg.RenewMarginRatio <= 0 {
		cfg.RenewMarginRatio = 0.25
	}
	if cfg.RecentTenures <= 0 {
		cfg.RecentTenures = 16
	}
	if cfg.MaxResources <= 0 {
		cfg.MaxResources = DefaultMaxResources
	}
	cfg.Health = cfg.Health.withDefaults()
	// Flapping counts the grants of the last hour among the tenures kept.
	cfg.RecentTenures = max(cfg.RecentTenures, cfg.Health.FlappingPerHour+1)
	return &Tracker{cfg: cfg, locks: make(map[LockKey]*lockState), live: make(map[string]time.Time)}
}

// Restore replaces the tracker's memory with states saved by a Journal. The
// renewals stored since they were saved go on with ReplayRenewal.
func (t *Tracker) Restore(states []TrackState) {
	t.locks = make(map[LockKey]*lockState, len(states))
	t.add(states)
}

// RestoreSource replaces the tracker's memory of one source with states
// saved by a Journal, and keeps the rest: a replica takes the source over.
func (t *Tracker) RestoreSource(source string, states []TrackState) {
	t.Forget(source)
	t.add(states)
}

// add puts saved states into the tracker's memory.
func (t *Tracker) add(states []TrackState) {
	t.dueFrom = time.Time{} // unknown until a Tick looks
	for i := range states {
		st := lockStateOf(states[i])
		t.locks[st.key] = st
		l := st.lock()
		t.advance(l.ChangedAt)
		t.advance(l.RenewedAt)
	}
}

// Forget drops every lock of source from the tracker's memory, and how far
// its collector had delivered: another replica records the source now.
func (t *Tracker) Forget(source string) {
	for k := range t.locks {
		if k.Source == source {
			delete(t.locks, k)
		}
	}
	delete(t.live, source)
}

// State returns a copy of what the tracker knows of one lock.
func (t *Tracker) State(key LockKey) (TrackState, bool) {
	st, ok := t.locks[key]
	if !ok {
		return TrackState{}, false
	}
	ts := st.export()
	ts.Resources = cloneResources(st.resources)
	return ts, true
}

// AdmitResources checks that recording writes keeps every lock within
// MaxResources resources, and fails with EINVALID naming the first report
// that would take a lock past it. The tracker judges each report against
// its resource's own state, so the bound keeps what a lock holds, and what
// a grant touches, in proportion.
func (t *Tracker) AdmitResources(writes []WriteReport) error {
	var added map[LockKey]map[string]bool
	for i, w := range writes {
		key := w.Key()
		var known map[string]*ResourceState
		if st := t.locks[key]; st != nil {
			known = st.resources
		}
		if _, ok := known[w.Resource]; ok || added[key][w.Resource] {
			continue
		}
		if len(known)+len(added[key]) >= t.cfg.MaxResources {
			return Errorf(EINVALID, "%s: lock %q of source %q already has %d resources, the most leasewatch keeps per lock; "+
				"report writes of the resources its holders write to", writeField(i, len(writes), "resource"), key.Name, key.Source, t.cfg.MaxResources)
		}
		if added == nil {
			added = make(map[LockKey]map[string]bool)
		}
		if added[key] == nil {
			added[key] = make(map[string]bool)
		}
		added[key][w.Resource] = true
	}
	return nil
}

// Lock returns a lock as the tracker has it.
func (t *Tracker) Lock(key LockKey) (Lock, bool) {
	st, ok := t.locks[key]
	if !ok {
		return Lock{}, false
	}
	return st.lock(), true
}

// Class returns the tracked lock's class, "" when it is not tracked.
func (t *Tracker) Class(key LockKey) Class {
	if st, ok := t.locks[key]; ok {
		return st.class()
	}
	return ""
}

// Step applies one collector input.
func (t *Tracker) Step(in Input) Batch {
	at := in.At
	for _, ob := range in.Observations {
		if ob.At.After(at) {
			at = ob.At
		}
	}
	if at.IsZero() && in.Blind != nil {
		at = in.Blind.To
	}
	if at.IsZero() {
		at = t.now
	}
	t.advance(at)

	o := newOutput(len(in.Observations))
	// What the collector had vouched for before this input, as a tick just
	// before it would have seen it: the input's own Live arrives with its
	// observations, so it cannot expire a lease they renew.
	vouched := t.vouched(in.Source)
	if in.Live && at.After(t.live[in.Source]) {
		t.live[in.Source] = at
	}
	if in.Blind != nil {
		t.blind(o, in.Source, *in.Blind)
	}
	var seen map[LockKey]bool
	if in.Snapshot {
		seen = make(map[LockKey]bool, len(in.Observations))
	}
	for _, ob := range in.Observations {
		st := t.lock(o, ob.Lock, in.Kind)
		if st.expireByClock != in.ExpireByClock || st.sequentialTokens != in.SequentialTokens ||
			st.tokenPerTenure != in.TokenPerTenure || (ob.Class != "" && ob.Class != st.class()) {
			o.changed(st)
		}
		st.expireByClock, st.sequentialTokens, st.tokenPerTenure = in.ExpireByClock, in.SequentialTokens, in.TokenPerTenure
		if ob.Class != "" && ob.Class != st.class() {
			st.setClass(ob.Class)
		}
		t.expireRunOut(o, st, max(vouched, seenUpTo(st, ob, in.Snapshot)))
		t.follow(o, st, ob)
		if in.HolderClock {
			t.clockSkew(o, st, ob)
		}
		if seen != nil {
			seen[ob.Lock] = true
		}
	}
	if in.Snapshot {
		// Held locks missing from a full snapshot ended while the collector
		// could not see them; how, it can only guess from the lease.
		for _, key := range t.sourceLocks(in.Source) {
			st := t.locks[key]
			if cur := st.current(); cur != nil && !seen[key] && !t.expireRunOut(o, st, vouched) {
				t.endInferred(o, st, cur, at, map[string]any{"reason": "missing from snapshot"})
			}
		}
	}
	o.judgeSuspects()
	if in.Cursor != "" {
		o.b.Cursors = append(o.b.Cursors, Cursor{Source: in.Source, Position: in.Cursor, At: at})
	}
	return t.done(o)
}

// Tick ends the tenures of locks whose backends never report expiry
// (ExpireByClock) once last renewal + lease duration has passed, by now and
// by the time up to which their collector is live: while a collector is down
// or replaying, a renewal may yet arrive, so nothing expires. It raises the
// leaderless finding of a lock left without a holder (health.go) by the same
// rule, or by now where the backend ends leases itself.
func (t *Tracker) Tick(now time.Time) Batch {
	t.advance(now)
	if !t.dueFrom.IsZero() && now.Before(t.dueFrom) {
		return Batch{} // no lease can have run out yet
	}
	// Find the few due locks first, and sort only those, for a deterministic
	// output order; note the earliest expiry of the others.
	var (
		due      []LockKey
		earliest = NoNanos // none yet
		limits   = make(map[string]int64, len(t.live))
	)
	// How far the lock's history is known: a source whose leases expire by
	// the clock vouches for how far it has seen; elsewhere the backend ends
	// leases itself, and only a leader's absence is judged, by the clock.
	limit := func(key LockKey, st *lockState) int64 {
		if !st.expireByClock {
			return nanos(now)
		}
		l, ok := limits[key.Source]
		if !ok {
			l = min(t.vouched(key.Source), nanos(now))
			limits[key.Source] = l
		}
		return l
	}
	for key, st := range t.locks {
		var at int64 // when the lock is due: leaderless, or its lease run out
		switch cur := st.current(); {
		case st.leaderlessDue != 0:
			at = st.leaderlessDue
		case st.expireByClock && cur != nil && cur.expires != NoNanos:
			at = cur.expires
		default:
			continue
		}
		if limit(key, st) >= at {
			due = append(due, key)
		} else if earliest == NoNanos || at < earliest {
			earliest = at
		}
	}
	t.dueFrom = timeOf(earliest)
	if earliest == NoNanos {
		t.dueFrom = maxTime // nothing held expires by the clock
	}
	sortKeys(due)
	o := newOutput(len(due))
	for _, key := range due {
		st := t.locks[key]
		if st.leaderlessDue == 0 {
			t.expireRunOut(o, st, limit(key, st))
		}
		// A lease that ran out long ago leaves the lock leaderless at once.
		if due := st.leaderlessDue; due != 0 && due <= limit(key, st) {
			t.leaderless(o, st)
		}
	}
	return t.done(o)
}

// How a lease that runs out by the clock ends. A tenure of a lock that
// expires by the clock (Input.ExpireByClock) has run out once the tracker
// knows the lock's history, without a renewal, up to its expiry: from the
// collector's Live vouching, or from an observation of the lock that the
// collector saw as it happened (seenUpTo), which follows every earlier
// change of the lock in the backend's order. Either way it ends expired at
// its expiry, with its lease_expired finding. Tick applies the rule to every
// lock, and every step that touches a lock applies it first, so when ticks
// come changes when an expiry is recorded, never whether or when it
// happened.

// runOut reports whether the held tenure of st expires by the clock and had
// run out by by (Unix nanoseconds).
func (st *lockState) runOut(by int64) bool {
	cur := st.current()
	return st.expireByClock && cur != nil && LeaseRunOut(cur.expiresAt(), timeOf(by))
}

// expireRunOut ends the held tenure of st at its expiry if it had run out by
// by, and reports whether it did.
func (t *Tracker) expireRunOut(o *output, st *lockState, by int64) bool {
	if !st.runOut(by) {
		return false
	}
	cur := st.current()
	t.end(o, st, cur, EndExpired, cur.expiresAt(), true, map[string]any{"reason": "no renewal within the lease duration"})
	return true
}

// vouched returns the time up to which source's collector has delivered every
// change (Input.Live), in Unix nanoseconds; math.MinInt64 if it never said.
func (t *Tracker) vouched(source string) int64 {
	if live := t.live[source]; !live.IsZero() {
		return nanos(live)
	}
	return math.MinInt64
}

// seenUpTo returns the time up to which ob shows the history of its lock
// complete, in Unix nanoseconds, when the collector saw it as it happened in
// the backend's order: a new holder's grant time (At, as the overlap finding
// judges it); for a renewal, a repeat of the held tenure or a release, the
// time the holder wrote it where the backend tells it (RenewedAt: the same
// clock as the lease's expiry, so a write made in time but delivered late
// is in time), else At. It is math.MinInt64 for what the collector only
// read or inferred (a snapshot, an observed holder, an inferred change,
// after which changes may have been missed) and for an overtaken renewal,
// whose time is unknown. An expiry, seen or inferred, says the lease had run
// out by its time.
func seenUpTo(st *lockState, ob Observation, snapshot bool) int64 {
	switch {
	case ob.Kind == EventExpire:
		return nanos(ob.At)
	case snapshot || ob.Inferred || ob.Overtaken || ob.Kind == EventObserved:
		return math.MinInt64
	case ob.Kind == EventGrant:
		if cur := st.current(); cur == nil || !st.sameTenure(cur, ob.Holder, ob.Token) {
			return nanos(ob.At)
		}
	}
	return nanos(ob.Renewed())
}

// maxTime is later than any lease's expiry.
var maxTime = time.Unix(1<<62, 0)

// done ends a step: it lowers dueFrom to the expiry of every lock the step
// changed, and returns the step's batch.
func (t *Tracker) done(o *output) Batch {
	if !t.dueFrom.IsZero() {
		for _, st := range o.locks {
			if cur := st.current(); st.expireByClock && cur != nil && cur.expires != NoNanos && cur.expiresAt().Before(t.dueFrom) {
				t.dueFrom = cur.expiresAt()
			}
			if due := st.leaderlessDue; due != 0 && timeOf(due).Before(t.dueFrom) {
				t.dueFrom = timeOf(due)
			}
		}
	}
	return o.batch()
}

// ReportWrite joins a protected resource's write report to the tenure its
// token belongs to and derives stale_write, unfenced_write and exposure.
func (t *Tracker) ReportWrite(w WriteReport) Batch {
	t.advance(w.At)
	o := newOutput(1)
	st := t.lock(o, w.Key(), t.cfg.SourceKinds[w.Source])
	// Judged against the lock as a tick would have left it.
	t.expireRunOut(o, st, t.vouched(w.Source))
	kind := EventWriteAccepted
	if w.Outcome == WriteRejected {
		kind = EventWriteRejected
	}
	var detail map[string]any
	if w.HighestToken != nil {
		detail = map[string]any{"highest_token": *w.HighestToken}
	}
	o.event(st, Event{Kind: kind, At: w.At, Holder: w.Holder, Token: w.Token, Resource: w.Resource, RequestID: w.RequestID, Detail: detail})

	res := st.resources[w.Resource]
	if res == nil {
		res = &ResourceState{}
		if st.resources == nil {
			st.resources = make(map[string]*ResourceState)
		}
		st.resources[w.Resource] = res
		o.resource(st, w.Resource)
	}
	if w.Token == nil {
		return t.done(o)
	}
	token := *w.Token
	ten := st.tenureWithToken(token)
	// Reports arrive late and out of order with the collector's view, so a
	// write is judged against the grants made before it, not since.
	newest := st.newestTokenAt(w.At)
	switch w.Outcome {
	case WriteAccepted:
		judgeAccepted(o, st, res, w, ten, newest, t.vouched(w.Source))
	case WriteRejected:
		judgeRejected(o, st, w, token, ten, newest)
	}
	return t.done(o)
}

// judgeAccepted derives what a write the resource accepted shows: an
// unfenced write when its token was already superseded or its tenure over,
// an ungranted token when no grant had it, and the end of the exposure
// windows it closes. ten is the tenure of its token and newest the newest
// token granted before it, if any; vouched is how far the collector has
// delivered every change (Tracker.vouched).
func judgeAccepted(o *output, st *lockState, res *ResourceState, w WriteReport, ten *tenure, newest *int64, vouched int64) {
	token := *w.Token
	ungranted := ten == nil && st.ungranted(token, w.At, vouched)
	switch {
	case ungranted:
		o.finding(st, ungrantedToken(w.Resource, w.Holder, token, w.At,
			fmt.Sprintf("the newest grant the collector has delivered, up to the write and since, had token %d", *st.lastGrantToken)))
	case newest != nil && token < *newest:
		o.finding(st, Finding{Kind: FindingUnfencedWrite, At: w.At, Tokens: []int64{token, *newest}, Holders: holders(w.Holder, st.holderOf(*newest)), Resource: w.Resource,
			Summary: fmt.Sprintf("%s accepted a write with token %d although token %d had already been granted to %s: fencing did not protect it", w.Resource, token, *newest, orUnknown(st.holderOf(*newest)))})
	case ten != nil && !ten.held() && w.At.After(ten.endedAt()):
		o.finding(st, Finding{Kind: FindingUnfencedWrite, At: w.At, Tokens: []int64{token}, Holders: holders(ten.holder, w.Holder), Resource: w.Resource,
			Summary: fmt.Sprintf("%s accepted a write with token %d from %s %s after its tenure ended (%s)", w.Resource, token, orUnknown(ten.holder), w.At.Sub(ten.endedAt()).Round(time.Millisecond), ten.end)})
	}
	if len(res.Pending) > 0 || res.Highest == nil || token > *res.Highest {
		o.resource(st, w.Resource)
	}
	kept := res.Pending[:0]
	for _, p := range res.Pending {
		if p.Token > token {
			kept = append(kept, p)
			continue
		}
		if !w.At.After(p.GrantedAt) {
			continue // the resource had the new token before the collector saw the grant: no window
		}
		o.finding(st, Finding{Kind: FindingExposure, At: p.GrantedAt, Until: w.At, Tokens: []int64{p.Token}, Holders: holders(p.Holder), Resource: w.Resource,
			Summary: fmt.Sprintf("%s learned token %d %s after it was granted to %s; until then it still accepted older tokens", w.Resource, p.Token, w.At.Sub(p.GrantedAt).Round(time.Millisecond), orUnknown(p.Holder))})
	}
	res.Pending = kept
	if res.Highest == nil || token > *res.Highest {
		res.Highest = Int64(token)
	}
	if (newest == nil || token >= *newest) && !ungranted {
		// Fenced as far as the tracker knows: unless the collector has
		// yet to report a grant made before it.
		res.Accepted = append(res.Accepted, AcceptedWrite{Token: token, At: w.At, Holder: w.Holder})
		if n := len(res.Accepted); n > maxAcceptedWrites {
			res.Accepted = append(res.Accepted[:0], res.Accepted[n-maxAcceptedWrites:]...)
		}
	}
}

// judgeRejected derives the stale_write a rejected write shows, if its token
// belonged to an ended tenure or was older than a newer grant the tracker or
// the resource knows of.
func judgeRejected(o *output, st *lockState, w WriteReport, token int64, ten *tenure, newest *int64) {
	switch {
	case ten != nil && !ten.held() && !w.At.Before(ten.endedAt()):
		delay := w.At.Sub(ten.endedAt())
		o.finding(st, Finding{Kind: FindingStaleWrite, At: w.At, Tokens: []int64{token}, Holders: holders(ten.holder, w.Holder), Resource: w.Resource,
			Summary: fmt.Sprintf("%s rejected a write with token %d from %s %s after its tenure ended (%s): fencing stopped a zombie holder", w.Resource, token, orUnknown(ten.holder), delay.Round(time.Millisecond), ten.end)})
	case newest != nil && token < *newest:
		o.finding(st, Finding{Kind: FindingStaleWrite, At: w.At, Tokens: []int64{token, *newest}, Holders: holders(w.Holder), Resource: w.Resource,
			Summary: fmt.Sprintf("%s rejected a write with token %d, older than the newest grant %d: fencing stopped a stale holder", w.Resource, token, *newest)})
	case w.HighestToken != nil && token < *w.HighestToken:
		// The collector has not reported the newer grant yet; the
		// resource's own word is enough.
		o.finding(st, Finding{Kind: FindingStaleWrite, At: w.At, Tokens: []int64{token, *w.HighestToken}, Holders: holders(w.Holder), Resource: w.Resource,
			Summary: fmt.Sprintf("%s rejected a write with token %d, older than token %d it had already accepted: fencing stopped a stale holder", w.Resource, token, *w.HighestToken)})
	}
}

// follow applies one observation to one lock.
func (t *Tracker) follow(o *output, st *lockState, ob Observation) {
	cur := st.current()
	same := cur != nil && st.sameTenure(cur, ob.Holder, ob.Token)
	switch ob.Kind {
	case EventObserved, EventGrant:
		if same {
			// The same tenure seen again (a snapshot, a relist): a renewal
			// only if the backend says the holder renewed since.
			if !ob.RenewedAt.IsZero() {
				t.renew(o, st, cur, ob)
			}
			return
		}
		t.grant(o, st, cur, ob)
	case EventRenew:
		if ob.Overtaken {
			if ten := st.lastTenureOf(ob.Holder, ob.Token); ten != nil {
				t.overtaken(o, st, ten, ob)
			}
			return
		}
		if !same {
			// The grant happened where the collector could not see it.
			ob.Kind, ob.Inferred = EventGrant, true
			t.grant(o, st, cur, ob)
			return
		}
		t.renew(o, st, cur, ob)
	case EventRelease, EventExpire:
		if cur == nil || ((ob.Holder != "" || ob.Token != nil) && !st.sameTenure(cur, ob.Holder, ob.Token)) {
			return // already ended, e.g. by the tracker's clock before the backend confirmed
		}
		reason := EndReleased
		if ob.Kind == EventExpire {
			reason = EndExpired
		}
		if ob.Unjudged {
			t.endInferred(o, st, cur, ob.At, ob.Detail)
		} else {
			t.end(o, st, cur, reason, ob.At, ob.Inferred, ob.Detail)
		}
		switch {
		case ob.Deleted:
			o.finding(st, Finding{Kind: FindingLockDeleted, At: ob.At, Tokens: tokens(cur.token), Holders: holders(cur.holder),
				Summary: fmt.Sprintf("the lock object was deleted while %s held it: the holder may go on acting on a lease nobody else can see", orUnknown(cur.holder))})
		case ob.Evicted:
			o.finding(st, Finding{Kind: FindingLockEvicted, At: ob.At, Tokens: tokens(cur.token), Holders: holders(cur.holder),
				Summary: fmt.Sprintf("the backend evicted the lock under memory pressure while %s held it, before its lease ran out", orUnknown(cur.holder))})
		}
	}
}

// overlap raises an overlap where ob grants the lock while prev's lease
// was still valid, or while the backend still showed prev holding it
// (Observation.StillHeld).
func (t *Tracker) overlap(o *output, st *lockState, prev *tenure, ob Observation) {
	f := Finding{Kind: FindingOverlap, At: ob.At, Tokens: tokens(prev.token, ob.Token), Holders: holders(prev.holder, ob.Holder)}
	switch expires := prev.expiresAt(); {
	case !expires.IsZero() && ob.At.Before(expires):
		f.Until = expires
		f.Summary = fmt.Sprintf("%s was granted the lock while %s's lease was valid for %s more: both may believe they hold it",
			orUnknown(ob.Holder), orUnknown(prev.holder), expires.Sub(ob.At).Round(time.Millisecond))
	case ob.StillHeld:
		f.Summary = fmt.Sprintf("%s was granted the lock while the backend still showed %s holding it: both hold it at once",
			orUnknown(ob.Holder), orUnknown(prev.holder))
	default:
		return
	}
	o.finding(st, f)
}

func (t *Tracker) grant(o *output, st *lockState, prev *tenure, ob Observation) {
	detail := copyDetail(ob.Detail)
	if prev != nil {
		switch {
		case ob.Inferred:
			t.endInferred(o, st, prev, ob.At, map[string]any{"reason": "a new holder appeared while the collector was blind"})
		case t.expireRunOut(o, st, nanos(ob.At)):
			// A grant made once the lease had run out, of a snapshot's
			// holder too: an expiry, as a tick would have made it.
		default:
			// Superseded: by the backend's word where the backend ends
			// leases itself (etcd deletes the key; the tracker's expiry
			// is only the collector's last reading), or while the lease
			// still ran.
			t.overlap(o, st, prev, ob)
			detail = withDetail(detail, "superseded", prev.holder)
			t.end(o, st, prev, EndSuperseded, ob.At, false, nil)
		}
	}

	// Taken only after it was due: leaderless all the same, as ticks in
	// between would have said.
	if due := st.leaderlessDue; due != 0 && nanos(ob.At) >= due {
		t.leaderless(o, st)
	}

	t.judgeToken(o, st, ob)

	var previous PreviousHolder
	if n := len(st.recent); n > 0 {
		previous = PreviousHolder{Holder: st.recent[n-1].holder, Known: true}
	}
	st.nextSeq++
	renewed := ob.Renewed()
	ten := tenure{
		seq: st.nextSeq, holder: ob.Holder, token: ob.Token, position: ob.Position,
		granted: nanos(ob.At), renewed: nanos(renewed), expires: NoNanos, ended: NoNanos, lease: ob.LeaseDuration, observed: ob.Kind == EventObserved,
	}
	ten.expires = nanos(LeaseExpiry(renewed, ob.LeaseDuration))
	st.recent = append(st.recent, ten)
	if n := len(st.recent); n > t.cfg.RecentTenures {
		st.recent = append(st.recent[:0], st.recent[n-t.cfg.RecentTenures:]...)
	}
	st.leaderlessDue = 0
	o.tenure(st, &st.recent[len(st.recent)-1])
	if ob.Kind == EventGrant {
		t.flapping(o, st)
	}
	o.event(st, Event{Kind: ob.Kind, At: ob.At, Holder: ob.Holder, Token: ob.Token, TTL: ob.LeaseDuration, Position: ob.Position, Inferred: ob.Inferred, Detail: detail,
		Previous: previous})
}

// judgeToken judges a grant's token against the lock's earlier grants
// (regression, reuse, skip), and against the writes its resources accepted
// before the tracker knew of it (unfenced_write); a grant without one makes
// the lock unfenced, once.
func (t *Tracker) judgeToken(o *output, st *lockState, ob Observation) {
	if ob.Token != nil {
		tok := *ob.Token
		if last := st.lastGrantToken; last != nil {
			switch {
			case tok < *last:
				o.finding(st, Finding{Kind: FindingTokenRegression, At: ob.At, Tokens: []int64{*last, tok}, Holders: holders(st.holderOf(*last), ob.Holder),
					Summary: fmt.Sprintf("token went backwards: %s was granted token %d after token %d", orUnknown(ob.Holder), tok, *last)})
			case tok == *last:
				o.finding(st, Finding{Kind: FindingTokenReuse, At: ob.At, Tokens: []int64{tok}, Holders: holders(st.holderOf(tok), ob.Holder),
					Summary: fmt.Sprintf("token %d was granted again, to %s: a resource cannot tell the two tenures apart", tok, orUnknown(ob.Holder))})
			case st.sequentialTokens && tok > *last+1:
				o.finding(st, Finding{Kind: FindingTokenSkip, At: ob.At, Tokens: []int64{*last, tok},
					Summary: fmt.Sprintf("token jumped from %d to %d: %d grant(s) happened that the collector never saw", *last, tok, tok-*last-1)})
			}
		}
		last := st.lastGrantToken
		st.lastGrantToken = ob.Token
		for _, name := range sortedResources(st.resources) {
			judgeGrantAt(o, st, name, ob, last)
		}
	} else if !st.unfencedReported && st.class() != ClassHeartbeat && !(ob.Inferred && ob.Holder == "") {
		// Heartbeats never carry tokens and guard nothing, and a grant the
		// collector only inferred, without even its holder, says nothing
		// about the lock's tokens: neither is a finding.
		st.unfencedReported = true
		o.finding(st, Finding{Kind: FindingUnfencedLock, At: ob.At, Holders: holders(ob.Holder),
			Summary: "grants of this lock carry no fencing token: a resource cannot reject a paused holder's late writes"})
	}
}

// judgeGrantAt judges the writes resource name accepted before the tracker
// knew of the grant ob (last was the token of the grant before it), and
// opens the grant's exposure window at the resource.
func judgeGrantAt(o *output, st *lockState, name string, ob Observation, last *int64) {
	tok := *ob.Token
	res := st.resources[name]
	for _, wr := range res.Accepted {
		switch {
		case wr.At.After(ob.At) && wr.Token < tok:
			// Reported before this grant reached the tracker but made
			// after it, with an older token: it got through.
			o.finding(st, Finding{Kind: FindingUnfencedWrite, At: wr.At, Tokens: []int64{wr.Token, tok}, Holders: holders(wr.Holder, ob.Holder), Resource: name,
				Summary: fmt.Sprintf("%s accepted a write with token %d %s after token %d had been granted to %s: fencing did not protect it",
					name, wr.Token, wr.At.Sub(ob.At).Round(time.Millisecond), tok, orUnknown(ob.Holder))})
		case !ob.Inferred && ob.At.Sub(wr.At) > ungrantedSlack && wr.Token > tok && (last == nil || wr.Token > *last) && st.tenureWithToken(wr.Token) == nil:
			o.suspect(st, wr.Token, ungrantedToken(name, wr.Holder, wr.Token, wr.At,
				fmt.Sprintf("token %d was granted to %s after it", tok, orUnknown(ob.Holder))))
		}
	}
	res.Accepted = slices.DeleteFunc(res.Accepted, func(wr AcceptedWrite) bool { return !wr.At.After(ob.At) || wr.Token < tok })
	res.Pending = append(res.Pending, PendingGrant{Token: tok, GrantedAt: ob.At, Holder: ob.Holder})
	if n := len(res.Pending); n > maxPendingGrants {
		res.Pending = append(res.Pending[:0], res.Pending[n-maxPendingGrants:]...)
	}
	o.resource(st, name)
}

// How a token no grant had shows. A resource sees a token only after the
// lock granted it, so a write it accepted under a token newer than every
// grant the tracker knows was made after a grant the collector has yet to
// deliver (judged when it comes), or under a token the lock never granted:
// a forged or foreign token, which the resource's fencing takes for the
// newest. The tracker tells them apart once the collector has vouched
// (Input.Live) for every change up to the write with no grant of the token,
// or once a grant made after the write carries a lower token, which a lock
// whose tokens grow would not do had it granted the write's.
//
// Both by more than ungrantedSlack: the write's time is the resource's
// clock, the grants' and the collector's another, and a holder writes
// right after its grant. And a grant with a lower token only suspects the
// write (output.suspect) until its input is done: a collector that lagged
// delivers the grants it missed together, each stamped when it saw them,
// and the write's own grant may follow in the same input.

// ungrantedSlack is how much later than a write the evidence that no grant
// had its token must be: beyond the clock skew between a resource and the
// collector that an NTP-synchronised fleet sees.
const ungrantedSlack = time.Second

// ungranted reports whether token, accepted at at, is newer than every
// grant of the lock while the collector has delivered every change up to
// at (vouched, as Tracker.vouched). The caller knows no tenure of it.
func (st *lockState) ungranted(token int64, at time.Time, vouched int64) bool {
	return st.lastGrantToken != nil && token > *st.lastGrantToken && vouched >= nanos(at.Add(ungrantedSlack))
}

// ungrantedToken is the finding of a write accepted at at under a token no
// grant had; why says how that shows.
func ungrantedToken(resource, holder string, token int64, at time.Time, why string) Finding {
	return Finding{Kind: FindingUngrantedToken, At: at, Tokens: []int64{token}, Holders: holders(holder), Resource: resource,
		Summary: fmt.Sprintf("%s accepted a write with token %d from %s, a token no grant of the lock had (%s): its fencing now takes that token for the newest",
			resource, token, orUnknown(holder), why)}
}

// overtaken records an overtaken renewal of ten (see Observation.Overtaken).
// Its time and deadline are unknown, only that it happened: it counts, and
// its event carries its place in the count, for ReplayRenewal, which cannot
// go by its time. It may arrive after ten ended (the tracker's clock
// expired it while the collector lagged): it still happened before the
// end, so its event is placed no later than that.
func (t *Tracker) overtaken(o *output, st *lockState, ten *tenure, ob Observation) {
	ten.renewals++
	at := ob.At
	if ten.held() {
		o.renewal(st)
	} else {
		o.tenure(st, ten)
		if ended := ten.endedAt(); at.After(ended) {
			at = ended
		}
	}
	detail := withDetail(withDetail(copyDetail(ob.Detail), "overtaken", true), "renewal", ten.renewals)
	o.event(st, Event{Kind: EventRenew, At: at, Holder: ten.holder, Token: ten.token, TTL: ten.lease, Position: ob.Position, Inferred: ob.Inferred, Seq: ten.seq, Detail: detail})
}

func (t *Tracker) renew(o *output, st *lockState, cur *tenure, ob Observation) {
	at := ob.Renewed()
	if !at.After(cur.renewedAt()) {
		return // nothing new: a snapshot seeing the same tenure, or a replayed renewal
	}
	duration := cur.lease
	if ob.LeaseDuration > 0 {
		duration = ob.LeaseDuration
	}
	e := Event{Kind: EventRenew, At: ob.At, Holder: cur.holder, Token: cur.token, TTL: duration, Position: ob.Position, Inferred: ob.Inferred, Seq: cur.seq,
		Detail: copyDetail(ob.Detail)}
	// A renewal read after a blind window or at a start stands for renewals
	// the collector did not see: its margin says nothing.
	if cur.expires != NoNanos && cur.lease > 0 && !ob.Inferred && ob.Kind != EventObserved {
		left := cur.expiresAt().Sub(at)
		ratio := float64(left) / float64(cur.lease)
		e.setMargin(ratio)
		if ratio < t.cfg.RenewMarginRatio {
			o.finding(st, Finding{Kind: FindingLateRenewal, At: at, Tokens: tokens(cur.token), Holders: holders(cur.holder),
				Summary: fmt.Sprintf("%s renewed with %.0f%% of the lease left (%s of %s)", orUnknown(cur.holder), 100*ratio, left.Round(time.Millisecond), cur.lease)})
		}
	}
	if !ob.RenewedAt.IsZero() {
		e.Renewal.RenewedAt, e.Renewal.HasRenewedAt = nanos(ob.RenewedAt), true
	}
	if ob.Kind == EventRenew && !ob.Inferred {
		t.timeRenewal(o, st, cur, cur.renewedAt(), at)
	}
	cur.renew(at, duration)
	o.renewal(st)
	o.event(st, e)
}

// setMargin gives e its margin_ratio, ratio rounded to three places: typed,
// or in the detail beyond MaxMargin (a renewal long after a millisecond
// lease ran out, where nothing expired it meanwhile).
func (e *Event) setMargin(ratio float64) {
	p := math.Round(ratio * 1000)
	if math.Abs(p) >= MaxMargin {
		e.Detail = withDetail(e.Detail, "margin_ratio", round3(ratio))
		return
	}
	e.Renewal.Margin, e.Renewal.HasMargin = int64(p), true
}

// renew is all a renewal changes: the held tenure renewed at at for
// duration. A renewal is not a change of hands: Lock.ChangedAt stays.
func (tn *tenure) renew(at time.Time, duration time.Duration) {
	tn.renewals++
	tn.renewed, tn.lease = nanos(at), duration
	if expires := LeaseExpiry(at, duration); !expires.IsZero() {
		tn.expires = nanos(expires)
	}
}

// renewal returns the renewal columns of a held lock, for Batch.Renewed. It
// is false when the lock is not held.
func (st *lockState) renewal() (Renewal, bool) {
	cur := st.current()
	if cur == nil {
		return Renewal{}, false
	}
	return renewalOf(cur.export(st.key)), true
}

// ReplayRenewal applies a stored renew event to a restored lock exactly as
// the tracker applied it when it made the event, for a journal whose lock
// rows may lag their renew events (Batch.Renewed). It returns the lock's
// renewal columns when the lock changed: not when it already holds the
// renewal or the event's tenure has ended since.
func (t *Tracker) ReplayRenewal(e Event) (Renewal, bool) {
	st := t.locks[e.Lock]
	if st == nil || !st.replayRenewal(e) {
		return Renewal{}, false
	}
	r, _ := st.renewal()
	t.advance(r.RenewedAt)
	return r, true
}

func (st *lockState) replayRenewal(e Event) bool {
	cur := st.current()
	if e.Kind != EventRenew || cur == nil || !st.sameTenure(cur, e.Holder, e.Token) || (e.Seq != 0 && e.Seq != cur.seq) {
		return false
	}
	if n, ok := overtakenRenewal(e.Detail); ok {
		if n <= cur.renewals || e.At.Before(cur.grantedAt()) {
			return false
		}
		cur.renewals++
		return true
	}
	at := e.At
	if e.Renewal.HasRenewedAt {
		at = TimeOf(e.Renewal.RenewedAt)
	} else if s, ok := e.Detail["renewed_at"].(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			at = t
		}
	}
	if !at.After(cur.renewedAt()) {
		return false
	}
	cur.renew(at, e.TTL)
	return true
}

// overtakenRenewal returns an overtaken renewal's place in its tenure's
// count, from its event's detail: an int64 as the tracker made it, a JSON
// number (json.Number, or float64) as a store reads it back.
func overtakenRenewal(d map[string]any) (int64, bool) {
	if d["overtaken"] != true {
		return 0, false
	}
	switch n := d["renewal"].(type) {
	case int64:
		return n, true
	case float64:
		return int64(n), true
	case interface{ Int64() (int64, error) }:
		v, err := n.Int64()
		return v, err == nil
	}
	return 0, false
}

// end closes cur. Superseded tenures get no event of their own: the grant
// that superseded them records it.
func (t *Tracker) end(o *output, st *lockState, cur *tenure, reason EndReason, at time.Time, inferred bool, detail map[string]any) {
	// A lease can run out before the tracker first saw it: a holder whose
	// clock is behind the collector's by more than the lease writes a
	// renewal time that is already past. The tenure ends no earlier than it
	// began.
	if granted := cur.grantedAt(); at.Before(granted) {
		at = granted
	}
	cur.ended, cur.end = nanos(at), endOf(reason)
	at = cur.endedAt() // as it is kept, so that events, tenure and lock agree
	o.tenure(st, cur)
	t.markLeaderless(st)
	switch reason {
	case EndReleased:
		o.event(st, Event{Kind: EventRelease, At: at, Holder: cur.holder, Token: cur.token, TTL: cur.lease, Inferred: inferred, Detail: copyDetail(detail)})
	case EndExpired:
		o.event(st, Event{Kind: EventExpire, At: at, Holder: cur.holder, Token: cur.token, TTL: cur.lease, Inferred: inferred, Detail: copyDetail(detail)})
		how := "stopped renewing"
		if inferred {
			how = "stopped renewing (inferred)"
		}
		o.finding(st, Finding{Kind: FindingLeaseExpired, At: at, Tokens: tokens(cur.token), Holders: holders(cur.holder),
			Summary: fmt.Sprintf("%s %s: its lease expired instead of being released, %s after the last renewal", orUnknown(cur.holder), how, at.Sub(cur.renewedAt()).Round(time.Millisecond))})
	}
}

// endInferred closes a tenure that ended out of the collector's sight by at,
// or whose end the collector could not judge (Observation.Unjudged): expired
// if its lease had run out by then, released at at otherwise. An expiry by
// the clock is placed at the lease's expiry, as a tick places it; elsewhere
// (etcd) the tracker's expiry is only the collector's last TTL reading, and
// the backend's own expiry may have come any time up to at.
func (t *Tracker) endInferred(o *output, st *lockState, cur *tenure, at time.Time, detail map[string]any) {
	reason := EndReleased
	if expires := cur.expiresAt(); LeaseRunOut(expires, at) {
		reason = EndExpired
		if st.expireByClock {
			at = expires
		}
	}
	t.end(o, st, cur, reason, at, true, detail)
}

func (t *Tracker) blind(o *output, source string, b Blind) {
	for _, key := range t.sourceLocks(source) {
		st := t.locks[key]
		detail := map[string]any{"from": b.From.UTC().Format(time.RFC3339Nano), "to": b.To.UTC().Format(time.RFC3339Nano)}
		if b.Reason != "" {
			detail["reason"] = b.Reason
		}
		o.event(st, Event{Kind: EventBlind, At: b.To, Detail: detail})
		o.finding(st, Finding{Kind: FindingBlindWindow, At: b.From, Until: b.To,
			Summary: fmt.Sprintf("the collector could not see %s for %s (%s): transitions in between are inferred", source, b.To.Sub(b.From).Round(time.Millisecond), orUnknown(b.Reason))})
	}
}

// lock returns the lock's state, creating it on first sight.
func (t *Tracker) lock(o *output, key LockKey, kind SourceKind) *lockState {
	st, ok := t.locks[key]
	if !ok {
		st = newLockState(key, kind, ClassLock)
		t.locks[key] = st
		o.changed(st)
	}
	if kind != "" && st.kind() == "" {
		st.setKind(kind)
		o.changed(st)
	}
	return st
}

func (t *Tracker) advance(at time.Time) {
	if at.After(t.now) {
		t.now = at
	}
}

func (t *Tracker) sourceLocks(source string) []LockKey {
	var keys []LockKey
	for k := range t.locks {
		if k.Source == source {
			keys = append(keys, k)
		}
	}
	sortKeys(keys)
	return keys
}

// sortedResources returns the resource names in order, for a deterministic
// output.
func sortedResources(m map[string]*ResourceState) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func sortKeys(keys []LockKey) {
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Source != keys[j].Source {
			return keys[i].Source < keys[j].Source
		}
		return keys[i].Name < keys[j].Name
	})
}

// current returns the held tenure, or nil when the lock is not held.
func (st *lockState) current() *tenure {
	if n := len(st.recent); n > 0 && st.recent[n-1].held() {
		return &st.recent[n-1]
	}
	return nil
}

// sameTenure reports whether holder and token name the tenure cur: the
// token alone where the backend's tokens name one tenure each
// (Input.TokenPerTenure), else the holder and the token.
func (st *lockState) sameTenure(cur *tenure, holder string, token *int64) bool {
	switch {
	case token == nil && holder != "" && cur.token != nil:
		return cur.holder == holder // an end that names only the holder
	case st.tokenPerTenure && token != nil:
		return tokenEqual(cur.token, token)
	}
	return cur.holder == holder && tokenEqual(cur.token, token)
}

// lastTenureOf returns the newest remembered tenure of holder and token,
// held or not; nil if there is none.
func (st *lockState) lastTenureOf(holder string, token *int64) *tenure {
	for i := len(st.recent) - 1; i >= 0; i-- {
		if st.sameTenure(&st.recent[i], holder, token) {
			return &st.recent[i]
		}
	}
	return nil
}

// newestTokenAt returns the token of the newest remembered grant made at or
// before at, or nil if none is remembered.
func (st *lockState) newestTokenAt(at time.Time) *int64 {
	for i := len(st.recent) - 1; i >= 0; i-- {
		if ten := &st.recent[i]; ten.token != nil && !ten.grantedAt().After(at) {
			return ten.token
		}
	}
	return nil
}

// tenureWithToken returns the newest remembered tenure granted token.
func (st *lockState) tenureWithToken(token int64) *tenure {
	for i := len(st.recent) - 1; i >= 0; i-- {
		if tk := st.recent[i].token; tk != nil && *tk == token {
			return &st.recent[i]
		}
	}
	return nil
}

func (st *lockState) holderOf(token int64) string {
	if ten := st.tenureWithToken(token); ten != nil {
		return ten.holder
	}
	return ""
}

// output gathers one step's changes. Each changed lock's state and each
// touched tenure is written once, as it stands at the end of the step.
type output struct {
	b         Batch
	locks     []*lockState
	changes   map[*lockState]change
	tenures   map[tenureKey]int
	resources []resourceKey // in the order first changed
	touched   map[resourceKey]bool
	suspects  []suspect // ungranted_token findings the rest of the input may clear
}

// suspect is a write's ungranted_token finding, raised unless a grant of its
// token comes later in the same input.
type suspect struct {
	st    *lockState
	token int64
	f     Finding
}

// suspect holds f, a finding that a write's token was never granted, until
// the input is done (judgeSuspects).
func (o *output) suspect(st *lockState, token int64, f Finding) {
	o.suspects = append(o.suspects, suspect{st: st, token: token, f: f})
}

// judgeSuspects raises the suspected ungranted_token findings whose token
// no grant of the input had.
func (o *output) judgeSuspects() {
	for _, s := range o.suspects {
		if s.st.tenureWithToken(s.token) == nil {
			o.finding(s.st, s.f)
		}
	}
	o.suspects = nil
}

// resourceKey names one resource of a lock in a step.
type resourceKey struct {
	st   *lockState
	name string
}

// change says what a step changed of a lock's state.
type change uint8

const (
	changeRenewal change = 1 << iota // what applyRenewal sets
	changeFull                       // anything else
)

type tenureKey struct {
	lock LockKey
	seq  int64
}

// newOutput returns an output for a step of about n observations.
func newOutput(n int) *output {
	o := &output{changes: make(map[*lockState]change, n), tenures: make(map[tenureKey]int)}
	o.b.Events = make([]Event, 0, n)
	return o
}

// mark records that st changed by c.
func (o *output) mark(st *lockState, c change) {
	old, ok := o.changes[st]
	if !ok {
		o.locks = append(o.locks, st)
	}
	o.changes[st] = old | c
}

// changed records a change to st beyond renewals.
func (o *output) changed(st *lockState) { o.mark(st, changeFull) }

// event and finding record what happened; the state changes that go with
// them are marked by tenure, renewal and changed.
func (o *output) event(st *lockState, e Event) {
	e.Lock = st.key
	o.b.Events = append(o.b.Events, e)
}

func (o *output) finding(st *lockState, f Finding) {
	f.Lock = st.key
	f.Severity = f.Kind.Severity()
	o.b.Findings = append(o.b.Findings, f)
}

// tenure records a grant or an end of ten, a change beyond renewals.
func (o *output) tenure(st *lockState, ten *tenure) {
	o.changed(st)
	k := tenureKey{st.key, ten.seq}
	if i, ok := o.tenures[k]; ok {
		o.b.Tenures[i] = ten.export(st.key)
		return
	}
	o.tenures[k] = len(o.b.Tenures)
	o.b.Tenures = append(o.b.Tenures, ten.export(st.key))
}

// resource records a change to st's resource name, which the batch writes
// as it stands at the end of the step, without rewriting the lock's other
// resources.
func (o *output) resource(st *lockState, name string) {
	k := resourceKey{st, name}
	if o.touched[k] {
		return
	}
	if o.touched == nil {
		o.touched = make(map[resourceKey]bool)
	}
	o.touched[k] = true
	o.resources = append(o.resources, k)
}

// renewal records that st's held tenure was renewed.
func (o *output) renewal(st *lockState) { o.mark(st, changeRenewal) }

// batch returns the step's changes: locks changed only by renewals go to
// Renewed; every other changed lock to Locks, with a renewed tenure that the
// step did not otherwise touch.
func (o *output) batch() Batch {
	o.b.Renewed = make([]Renewal, 0, len(o.locks))
	for _, st := range o.locks {
		c := o.changes[st]
		if c == changeRenewal {
			if r, ok := st.renewal(); ok {
				o.b.Renewed = append(o.b.Renewed, r)
				continue
			}
		}
		if cur := st.current(); c&changeRenewal != 0 && cur != nil {
			if _, ok := o.tenures[tenureKey{st.key, cur.seq}]; !ok {
				o.tenure(st, cur)
			}
		}
		o.b.Locks = append(o.b.Locks, st.export())
	}
	for _, k := range o.resources {
		if r := k.st.resources[k.name]; r != nil {
			o.b.Resources = append(o.b.Resources, ResourceRow{Lock: k.st.key, Resource: k.name, State: r.saved()})
		}
	}
	return o.b
}

func tokenEqual(a, b *int64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func tokens(ts ...*int64) []int64 {
	var out []int64
	for _, t := range ts {
		if t != nil {
			out = append(out, *t)
		}
	}
	return out
}

func holders(hs ...string) []string {
	var out []string
	for _, h := range hs {
		if h == "" {
			continue
		}
		dup := false
		for _, o := range out {
			dup = dup || o == h
		}
		if !dup {
			out = append(out, h)
		}
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown holder"
	}
	return s
}

func copyDetail(d map[string]any) map[string]any {
	if d == nil {
		return nil
	}
	c := make(map[string]any, len(d))
	for k, v := range d {
		c[k] = v
	}
	return c
}

func withDetail(d map[string]any, k string, v any) map[string]any {
	if d == nil {
		d = make(map[string]any, 1)
	}
	d[k] = v
	return d
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
