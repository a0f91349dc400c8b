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
}

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
	locks map[LockKey]*TrackState
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
	return &Tracker{cfg: cfg, locks: make(map[LockKey]*TrackState), live: make(map[string]time.Time)}
}

// Restore replaces the tracker's memory with states saved by a Journal.
func (t *Tracker) Restore(states []TrackState) {
	t.locks = make(map[LockKey]*TrackState, len(states))
	t.dueFrom = time.Time{} // unknown until a Tick looks
	for i := range states {
		st := states[i].clone()
		t.locks[st.Lock.Key()] = &st
		t.advance(st.Lock.ChangedAt)
		t.advance(st.Lock.RenewedAt)
	}
}

// State returns a copy of what the tracker knows of one lock.
func (t *Tracker) State(key LockKey) (TrackState, bool) {
	st, ok := t.locks[key]
	if !ok {
		return TrackState{}, false
	}
	return st.clone(), true
}

// Lock returns a lock as the tracker has it.
func (t *Tracker) Lock(key LockKey) (Lock, bool) {
	st, ok := t.locks[key]
	if !ok {
		return Lock{}, false
	}
	return st.Lock, true
}

// Observe applies one collector input.
func (t *Tracker) Observe(in Input) Batch {
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
		if st.ExpireByClock != in.ExpireByClock || st.SequentialTokens != in.SequentialTokens || (ob.Class != "" && ob.Class != st.Lock.Class) {
			o.changed(st)
		}
		st.ExpireByClock = in.ExpireByClock
		st.SequentialTokens = in.SequentialTokens
		if ob.Class != "" {
			st.Lock.Class = ob.Class
		}
		t.observe(o, st, ob)
		if seen != nil {
			seen[ob.Lock] = true
		}
	}
	if in.Snapshot {
		// Held locks missing from a full snapshot ended while the collector
		// could not see them; how, it can only guess from the lease.
		for _, key := range t.sourceLocks(in.Source) {
			st := t.locks[key]
			if cur := st.current(); cur != nil && !seen[key] {
				t.endInferred(o, st, cur, at, "missing from snapshot")
			}
		}
	}
	if in.Cursor != "" {
		o.b.Cursors = append(o.b.Cursors, Cursor{Source: in.Source, Position: in.Cursor, At: at})
	}
	return t.done(o)
}

// Tick ends the tenures of locks whose backends never report expiry
// (ExpireByClock) once last renewal + lease duration has passed, by now and
// by the time up to which their collector is live: while a collector is down
// or replaying, a renewal may yet arrive, so nothing expires.
func (t *Tracker) Tick(now time.Time) Batch {
	t.advance(now)
	if !t.dueFrom.IsZero() && now.Before(t.dueFrom) {
		return Batch{} // no lease can have run out yet
	}
	// Find the few due locks first, and sort only those, for a deterministic
	// output order; note the earliest expiry of the others.
	var (
		due      []LockKey
		earliest time.Time
	)
	for key, st := range t.locks {
		cur := st.current()
		if !st.ExpireByClock || cur == nil || cur.ExpiresAt.IsZero() {
			continue
		}
		limit := t.live[key.Source]
		if now.Before(limit) {
			limit = now
		}
		if !limit.Before(cur.ExpiresAt) {
			due = append(due, key)
		} else if earliest.IsZero() || cur.ExpiresAt.Before(earliest) {
			earliest = cur.ExpiresAt
		}
	}
	t.dueFrom = earliest
	if earliest.IsZero() {
		t.dueFrom = maxTime // nothing held expires by the clock
	}
	sortKeys(due)
	o := newOutput(len(due))
	for _, key := range due {
		st := t.locks[key]
		cur := st.current()
		t.end(o, st, cur, EndExpired, cur.ExpiresAt, true, map[string]any{"reason": "no renewal within the lease duration"})
	}
	return t.done(o)
}

// maxTime is later than any lease's expiry.
var maxTime = time.Unix(1<<62, 0)

// done ends a step: it lowers dueFrom to the expiry of every lock the step
// changed, and returns the step's batch.
func (t *Tracker) done(o *output) Batch {
	if !t.dueFrom.IsZero() {
		for _, st := range o.locks {
			if cur := st.current(); st.ExpireByClock && cur != nil && !cur.ExpiresAt.IsZero() && cur.ExpiresAt.Before(t.dueFrom) {
				t.dueFrom = cur.ExpiresAt
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
	kind := EventWriteAccepted
	if w.Outcome == WriteRejected {
		kind = EventWriteRejected
	}
	var detail map[string]any
	if w.HighestToken != nil {
		detail = map[string]any{"highest_token": *w.HighestToken}
	}
	o.event(st, Event{Kind: kind, At: w.At, Holder: w.Holder, Token: w.Token, Resource: w.Resource, RequestID: w.RequestID, Detail: detail})

	res := st.Resources[w.Resource]
	if res == nil {
		res = &ResourceState{}
		if st.Resources == nil {
			st.Resources = make(map[string]*ResourceState)
		}
		st.Resources[w.Resource] = res
		o.changed(st)
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
		switch {
		case newest != nil && token < *newest:
			o.finding(st, Finding{Kind: FindingUnfencedWrite, At: w.At, Tokens: []int64{token, *newest}, Holders: holders(w.Holder, st.holderOf(*newest)), Resource: w.Resource,
				Summary: fmt.Sprintf("%s accepted a write with token %d although token %d had already been granted to %s: fencing did not protect it", w.Resource, token, *newest, orUnknown(st.holderOf(*newest)))})
		case ten != nil && !ten.Held() && w.At.After(ten.EndedAt):
			o.finding(st, Finding{Kind: FindingUnfencedWrite, At: w.At, Tokens: []int64{token}, Holders: holders(ten.Holder, w.Holder), Resource: w.Resource,
				Summary: fmt.Sprintf("%s accepted a write with token %d from %s %s after its tenure ended (%s)", w.Resource, token, orUnknown(ten.Holder), w.At.Sub(ten.EndedAt).Round(time.Millisecond), ten.End)})
		}
		if len(res.Pending) > 0 || res.Highest == nil || token > *res.Highest {
			o.changed(st)
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
		if newest == nil || token >= *newest {
			// Fenced as far as the tracker knows: unless the collector has
			// yet to report a grant made before it.
			res.Accepted = append(res.Accepted, AcceptedWrite{Token: token, At: w.At, Holder: w.Holder})
			if n := len(res.Accepted); n > maxAcceptedWrites {
				res.Accepted = append(res.Accepted[:0], res.Accepted[n-maxAcceptedWrites:]...)
			}
		}
	case WriteRejected:
		switch {
		case ten != nil && !ten.Held() && !w.At.Before(ten.EndedAt):
			delay := w.At.Sub(ten.EndedAt)
			o.finding(st, Finding{Kind: FindingStaleWrite, At: w.At, Tokens: []int64{token}, Holders: holders(ten.Holder, w.Holder), Resource: w.Resource,
				Summary: fmt.Sprintf("%s rejected a write with token %d from %s %s after its tenure ended (%s): fencing stopped a zombie holder", w.Resource, token, orUnknown(ten.Holder), delay.Round(time.Millisecond), ten.End)})
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
	return t.done(o)
}

// observe applies one observation to one lock.
func (t *Tracker) observe(o *output, st *TrackState, ob Observation) {
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
		t.end(o, st, cur, reason, ob.At, ob.Inferred, ob.Detail)
		switch {
		case ob.Deleted:
			o.finding(st, Finding{Kind: FindingLockDeleted, At: ob.At, Tokens: tokens(cur.Token), Holders: holders(cur.Holder),
				Summary: fmt.Sprintf("the lock object was deleted while %s held it: the holder may go on acting on a lease nobody else can see", orUnknown(cur.Holder))})
		case ob.Evicted:
			o.finding(st, Finding{Kind: FindingLockEvicted, At: ob.At, Tokens: tokens(cur.Token), Holders: holders(cur.Holder),
				Summary: fmt.Sprintf("the backend evicted the lock under memory pressure while %s held it, before its lease ran out", orUnknown(cur.Holder))})
		}
	}
}

func (t *Tracker) grant(o *output, st *TrackState, prev *Tenure, ob Observation) {
	detail := copyDetail(ob.Detail)
	if prev != nil {
		if ob.Inferred {
			t.endInferred(o, st, prev, ob.At, "a new holder appeared while the collector was blind")
		} else {
			if !prev.ExpiresAt.IsZero() && ob.At.Before(prev.ExpiresAt) {
				o.finding(st, Finding{Kind: FindingOverlap, At: ob.At, Until: prev.ExpiresAt, Tokens: tokens(prev.Token, ob.Token), Holders: holders(prev.Holder, ob.Holder),
					Summary: fmt.Sprintf("%s was granted the lock while %s's lease was valid for %s more: both may believe they hold it", orUnknown(ob.Holder), orUnknown(prev.Holder), prev.ExpiresAt.Sub(ob.At).Round(time.Millisecond))})
			}
			detail = withDetail(detail, "superseded", prev.Holder)
			t.end(o, st, prev, EndSuperseded, ob.At, false, nil)
		}
	}

	if ob.Token != nil {
		tok := *ob.Token
		if last := st.LastGrantToken; last != nil {
			switch {
			case tok < *last:
				o.finding(st, Finding{Kind: FindingTokenRegression, At: ob.At, Tokens: []int64{*last, tok}, Holders: holders(st.holderOf(*last), ob.Holder),
					Summary: fmt.Sprintf("token went backwards: %s was granted token %d after token %d", orUnknown(ob.Holder), tok, *last)})
			case tok == *last:
				o.finding(st, Finding{Kind: FindingTokenReuse, At: ob.At, Tokens: []int64{tok}, Holders: holders(st.holderOf(tok), ob.Holder),
					Summary: fmt.Sprintf("token %d was granted again, to %s: a resource cannot tell the two tenures apart", tok, orUnknown(ob.Holder))})
			case st.SequentialTokens && tok > *last+1:
				o.finding(st, Finding{Kind: FindingTokenSkip, At: ob.At, Tokens: []int64{*last, tok},
					Summary: fmt.Sprintf("token jumped from %d to %d: %d grant(s) happened that the collector never saw", *last, tok, tok-*last-1)})
			}
		}
		st.LastGrantToken = Int64(tok)
		for _, name := range sortedResources(st.Resources) {
			res := st.Resources[name]
			// Writes reported before this grant reached the tracker but
			// made after it, with an older token: they got through.
			for _, wr := range res.Accepted {
				if wr.At.After(ob.At) && wr.Token < tok {
					o.finding(st, Finding{Kind: FindingUnfencedWrite, At: wr.At, Tokens: []int64{wr.Token, tok}, Holders: holders(wr.Holder, ob.Holder), Resource: name,
						Summary: fmt.Sprintf("%s accepted a write with token %d %s after token %d had been granted to %s: fencing did not protect it",
							name, wr.Token, wr.At.Sub(ob.At).Round(time.Millisecond), tok, orUnknown(ob.Holder))})
				}
			}
			res.Accepted = slices.DeleteFunc(res.Accepted, func(wr AcceptedWrite) bool { return !wr.At.After(ob.At) || wr.Token < tok })
			res.Pending = append(res.Pending, PendingGrant{Token: tok, GrantedAt: ob.At, Holder: ob.Holder})
			if n := len(res.Pending); n > maxPendingGrants {
				res.Pending = append(res.Pending[:0], res.Pending[n-maxPendingGrants:]...)
			}
		}
	} else if !st.UnfencedReported && st.Lock.Class != ClassHeartbeat && !(ob.Inferred && ob.Holder == "") {
		// Heartbeats never carry tokens and guard nothing, and a grant the
		// collector only inferred, without even its holder, says nothing
		// about the lock's tokens: neither is a finding.
		st.UnfencedReported = true
		o.finding(st, Finding{Kind: FindingUnfencedLock, At: ob.At, Holders: holders(ob.Holder),
			Summary: "grants of this lock carry no fencing token: a resource cannot reject a paused holder's late writes"})
	}

	st.NextSeq++
	renewed := renewedAt(ob)
	ten := Tenure{
		Lock: st.Lock.Key(), Seq: st.NextSeq, Holder: ob.Holder, Token: ob.Token,
		GrantedAt: ob.At, Observed: ob.Kind == EventObserved, Position: ob.Position,
		LastRenewedAt: renewed, LeaseDuration: ob.LeaseDuration,
	}
	if ob.LeaseDuration > 0 {
		ten.ExpiresAt = renewed.Add(ob.LeaseDuration)
	}
	st.Recent = append(st.Recent, ten)
	if n := len(st.Recent); n > t.cfg.RecentTenures {
		st.Recent = append(st.Recent[:0], st.Recent[n-t.cfg.RecentTenures:]...)
	}
	o.tenure(st, &st.Recent[len(st.Recent)-1])

	l := &st.Lock
	l.State, l.Holder, l.Token = StateHeld, ob.Holder, ob.Token
	l.AcquiredAt = ob.At
	if ten.Observed {
		l.AcquiredAt = time.Time{}
	}
	l.RenewedAt, l.ExpiresAt, l.LeaseDuration, l.ChangedAt = renewed, ten.ExpiresAt, ob.LeaseDuration, ob.At
	o.event(st, Event{Kind: ob.Kind, At: ob.At, Holder: ob.Holder, Token: ob.Token, TTL: ob.LeaseDuration, Position: ob.Position, Inferred: ob.Inferred, Detail: detail})
}

// overtaken records an overtaken renewal of ten (see Observation.Overtaken).
// Its time and deadline are unknown, only that it happened: it counts, and
// its event carries its place in the count, for ReplayRenewal, which cannot
// go by its time. It may arrive after ten ended (the tracker's clock
// expired it while the collector lagged): it still happened before the
// end, so its event is placed no later than that.
func (t *Tracker) overtaken(o *output, st *TrackState, ten *Tenure, ob Observation) {
	ten.Renewals++
	at := ob.At
	if ten.Held() {
		o.renewal(st)
	} else {
		o.tenure(st, ten)
		if at.After(ten.EndedAt) {
			at = ten.EndedAt
		}
	}
	detail := withDetail(withDetail(copyDetail(ob.Detail), "overtaken", true), "renewal", ten.Renewals)
	o.event(st, Event{Kind: EventRenew, At: at, Holder: ten.Holder, Token: ten.Token, TTL: ten.LeaseDuration, Position: ob.Position, Inferred: ob.Inferred, Seq: ten.Seq, Detail: detail})
}

func (t *Tracker) renew(o *output, st *TrackState, cur *Tenure, ob Observation) {
	at := renewedAt(ob)
	if !at.After(cur.LastRenewedAt) {
		return // nothing new: a snapshot seeing the same tenure, or a replayed renewal
	}
	duration := cur.LeaseDuration
	if ob.LeaseDuration > 0 {
		duration = ob.LeaseDuration
	}
	detail := copyDetail(ob.Detail)
	if !cur.ExpiresAt.IsZero() && cur.LeaseDuration > 0 {
		left := cur.ExpiresAt.Sub(at)
		ratio := float64(left) / float64(cur.LeaseDuration)
		detail = withDetail(detail, "margin_ratio", round3(ratio))
		if ratio < t.cfg.RenewMarginRatio {
			o.finding(st, Finding{Kind: FindingLateRenewal, At: at, Tokens: tokens(cur.Token), Holders: holders(cur.Holder),
				Summary: fmt.Sprintf("%s renewed with %.0f%% of the lease left (%s of %s)", orUnknown(cur.Holder), 100*ratio, left.Round(time.Millisecond), cur.LeaseDuration)})
		}
	}
	if !ob.RenewedAt.IsZero() {
		detail = withDetail(detail, "renewed_at", ob.RenewedAt.UTC().Format(time.RFC3339Nano))
	}
	st.applyRenewal(cur, at, duration)
	o.renewal(st)
	o.event(st, Event{Kind: EventRenew, At: ob.At, Holder: cur.Holder, Token: cur.Token, TTL: duration, Position: ob.Position, Inferred: ob.Inferred, Seq: cur.Seq, Detail: detail})
}

// applyRenewal is all a renewal changes: the held tenure cur renewed at at
// for duration. A renewal is not a change of hands: Lock.ChangedAt stays.
func (st *TrackState) applyRenewal(cur *Tenure, at time.Time, duration time.Duration) {
	cur.Renewals++
	cur.LastRenewedAt, cur.LeaseDuration = at, duration
	if duration > 0 {
		cur.ExpiresAt = at.Add(duration)
	}
	l := &st.Lock
	l.RenewedAt, l.ExpiresAt, l.LeaseDuration = at, cur.ExpiresAt, duration
}

// renewal returns the renewal columns of a held lock, for Batch.Renewed. It
// is false when the lock is not held.
func (st *TrackState) renewal() (Renewal, bool) {
	cur := st.current()
	if cur == nil {
		return Renewal{}, false
	}
	return Renewal{Lock: st.Lock.Key(), Seq: cur.Seq, Renewals: cur.Renewals, RenewedAt: cur.LastRenewedAt,
		ExpiresAt: cur.ExpiresAt, LeaseDuration: cur.LeaseDuration}, true
}

// ReplayRenewal applies a stored renew event to st exactly as the tracker
// applied it when it made the event, for a journal whose lock rows may lag
// their renew events (Batch.Renewed). It reports whether st changed: not when
// st already holds the renewal or the event's tenure has ended since.
func (st *TrackState) ReplayRenewal(e Event) bool {
	cur := st.current()
	if e.Kind != EventRenew || cur == nil || !st.sameTenure(cur, e.Holder, e.Token) || (e.Seq != 0 && e.Seq != cur.Seq) {
		return false
	}
	if n, ok := overtakenRenewal(e.Detail); ok {
		if n <= cur.Renewals || e.At.Before(cur.GrantedAt) {
			return false
		}
		cur.Renewals++
		return true
	}
	at := e.At
	if s, ok := e.Detail["renewed_at"].(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			at = t
		}
	}
	if !at.After(cur.LastRenewedAt) {
		return false
	}
	st.applyRenewal(cur, at, e.TTL)
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
func (t *Tracker) end(o *output, st *TrackState, cur *Tenure, reason EndReason, at time.Time, inferred bool, detail map[string]any) {
	// A lease can run out before the tracker first saw it: a holder whose
	// clock is behind the collector's by more than the lease writes a
	// renewal time that is already past. The tenure ends no earlier than it
	// began.
	if at.Before(cur.GrantedAt) {
		at = cur.GrantedAt
	}
	cur.EndedAt, cur.End = at, reason
	o.tenure(st, cur)
	l := &st.Lock
	l.ChangedAt = at
	switch reason {
	case EndReleased:
		l.State, l.Holder, l.Token = StateFree, "", nil
		l.AcquiredAt, l.RenewedAt, l.ExpiresAt = time.Time{}, time.Time{}, time.Time{}
		o.event(st, Event{Kind: EventRelease, At: at, Holder: cur.Holder, Token: cur.Token, TTL: cur.LeaseDuration, Inferred: inferred, Detail: copyDetail(detail)})
	case EndExpired:
		l.State = StateExpired
		o.event(st, Event{Kind: EventExpire, At: at, Holder: cur.Holder, Token: cur.Token, TTL: cur.LeaseDuration, Inferred: inferred, Detail: copyDetail(detail)})
		how := "stopped renewing"
		if inferred {
			how = "stopped renewing (inferred)"
		}
		o.finding(st, Finding{Kind: FindingLeaseExpired, At: at, Tokens: tokens(cur.Token), Holders: holders(cur.Holder),
			Summary: fmt.Sprintf("%s %s: its lease expired instead of being released, %s after the last renewal", orUnknown(cur.Holder), how, at.Sub(cur.LastRenewedAt).Round(time.Millisecond))})
	}
}

// endInferred closes a tenure that ended out of the collector's sight: expired
// if its lease had run out by then, released otherwise.
func (t *Tracker) endInferred(o *output, st *TrackState, cur *Tenure, at time.Time, why string) {
	reason := EndReleased
	if !cur.ExpiresAt.IsZero() && !at.Before(cur.ExpiresAt) {
		reason = EndExpired
	}
	t.end(o, st, cur, reason, at, true, map[string]any{"reason": why})
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
func (t *Tracker) lock(o *output, key LockKey, kind SourceKind) *TrackState {
	st, ok := t.locks[key]
	if !ok {
		st = &TrackState{Lock: Lock{Source: key.Source, Name: key.Name, Kind: kind, Class: ClassLock, State: StateFree}}
		t.locks[key] = st
		o.changed(st)
	}
	if st.Lock.Kind == "" && kind != "" {
		st.Lock.Kind = kind
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
func (st *TrackState) current() *Tenure {
	if n := len(st.Recent); n > 0 && st.Recent[n-1].Held() {
		return &st.Recent[n-1]
	}
	return nil
}

// sameTenure reports whether holder and token name the tenure cur. An etcd
// token (the owner key's CreateRevision) names exactly one key, so it alone
// decides: an election's Proclaim changes the value in the holder string but
// not the tenure. Elsewhere a token can repeat across holders (Kubernetes
// leaseTransitions), so the holder must match too.
func (st *TrackState) sameTenure(cur *Tenure, holder string, token *int64) bool {
	switch {
	case token == nil && holder != "" && cur.Token != nil:
		return cur.Holder == holder // an end that names only the holder
	case st.Lock.Kind == KindEtcd && token != nil:
		return tokenEqual(cur.Token, token)
	}
	return cur.Holder == holder && tokenEqual(cur.Token, token)
}

// lastTenureOf returns the newest remembered tenure of holder and token,
// held or not; nil if there is none.
func (st *TrackState) lastTenureOf(holder string, token *int64) *Tenure {
	for i := len(st.Recent) - 1; i >= 0; i-- {
		if st.sameTenure(&st.Recent[i], holder, token) {
			return &st.Recent[i]
		}
	}
	return nil
}

// newestTokenAt returns the token of the newest remembered grant made at or
// before at, or nil if none is remembered.
func (st *TrackState) newestTokenAt(at time.Time) *int64 {
	for i := len(st.Recent) - 1; i >= 0; i-- {
		if t := st.Recent[i]; t.Token != nil && !t.GrantedAt.After(at) {
			return t.Token
		}
	}
	return nil
}

// tenureWithToken returns the newest remembered tenure granted token.
func (st *TrackState) tenureWithToken(token int64) *Tenure {
	for i := len(st.Recent) - 1; i >= 0; i-- {
		if tk := st.Recent[i].Token; tk != nil && *tk == token {
			return &st.Recent[i]
		}
	}
	return nil
}

func (st *TrackState) holderOf(token int64) string {
	if ten := st.tenureWithToken(token); ten != nil {
		return ten.Holder
	}
	return ""
}

func (st *TrackState) clone() TrackState {
	c := *st
	c.Recent = append([]Tenure(nil), st.Recent...)
	if st.LastGrantToken != nil {
		c.LastGrantToken = Int64(*st.LastGrantToken)
	}
	if st.Resources != nil {
		c.Resources = make(map[string]*ResourceState, len(st.Resources))
		for name, r := range st.Resources {
			rc := &ResourceState{Pending: append([]PendingGrant(nil), r.Pending...), Accepted: append([]AcceptedWrite(nil), r.Accepted...)}
			if r.Highest != nil {
				rc.Highest = Int64(*r.Highest)
			}
			c.Resources[name] = rc
		}
	}
	return c
}

// output gathers one step's changes. Each changed lock's state and each
// touched tenure is written once, as it stands at the end of the step.
type output struct {
	b       Batch
	locks   []*TrackState
	changes map[*TrackState]change
	tenures map[tenureKey]int
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
	o := &output{changes: make(map[*TrackState]change, n), tenures: make(map[tenureKey]int)}
	o.b.Events = make([]Event, 0, n)
	return o
}

// mark records that st changed by c.
func (o *output) mark(st *TrackState, c change) {
	old, ok := o.changes[st]
	if !ok {
		o.locks = append(o.locks, st)
	}
	o.changes[st] = old | c
}

// changed records a change to st beyond renewals.
func (o *output) changed(st *TrackState) { o.mark(st, changeFull) }

// event and finding record what happened; the state changes that go with
// them are marked by tenure, renewal and changed.
func (o *output) event(st *TrackState, e Event) {
	e.Lock = st.Lock.Key()
	o.b.Events = append(o.b.Events, e)
}

func (o *output) finding(st *TrackState, f Finding) {
	f.Lock = st.Lock.Key()
	f.Severity = f.Kind.Severity()
	o.b.Findings = append(o.b.Findings, f)
}

// tenure records a grant or an end of ten, a change beyond renewals.
func (o *output) tenure(st *TrackState, ten *Tenure) {
	o.changed(st)
	k := tenureKey{st.Lock.Key(), ten.Seq}
	if i, ok := o.tenures[k]; ok {
		o.b.Tenures[i] = *ten
		return
	}
	o.tenures[k] = len(o.b.Tenures)
	o.b.Tenures = append(o.b.Tenures, *ten)
}

// renewal records that st's held tenure was renewed.
func (o *output) renewal(st *TrackState) { o.mark(st, changeRenewal) }

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
			if _, ok := o.tenures[tenureKey{st.Lock.Key(), cur.Seq}]; !ok {
				o.tenure(st, cur)
			}
		}
		o.b.Locks = append(o.b.Locks, st.clone())
	}
	return o.b
}

func renewedAt(ob Observation) time.Time {
	if !ob.RenewedAt.IsZero() {
		return ob.RenewedAt
	}
	return ob.At
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
