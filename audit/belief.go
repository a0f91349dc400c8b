package audit

import (
	"fmt"
	"slices"
	"time"
)

// Zombie holders seen from what holders believe. A paused or partitioned
// process shows itself in writes only when it writes; what it believes
// shows sooner: it still acts as the holder of token N after its tenure
// ended. Holders say so with a belief heartbeat (POST /api/v1/beliefs,
// fence.Reporter.Believe), every few seconds while they act under a token.
//
// Most beliefs are of the current tenure, so the tracker judges each one
// from memory and records nothing for it: no event, no change of state.
// Only zombie beliefs are recorded. The first of each zombie tenure raises
// a zombie_holder finding dated at the tenure's end with Until at that
// belief, and is a zombie_belief event; a later one is an event only once
// the zombie has gone on a quarter longer than at the last event (at least
// a second longer), so the events say how long the zombie went on, to
// within a fifth, in a few dozen rows a day however often it beats.

// Belief is a holder's word that it is acting under a lock's token at At
// (POST /api/v1/beliefs).
type Belief struct {
	Source string
	Lock   string
	Holder string // as the backend names it, if the holder knows; "" is unknown
	Token  int64
	At     time.Time // the holder's clock; the receipt time when it gave none
}

// Key returns the belief's lock key.
func (b Belief) Key() LockKey { return LockKey{Source: b.Source, Name: b.Lock} }

// zombieStepMS is the least a zombie must have gone on since its last
// zombie_belief event for another, in milliseconds: beside a quarter of
// its time, it keeps a zombie's first seconds from an event per heartbeat.
const zombieStepMS = 1000

// ReportBelief judges a holder's belief against the tenure its token
// names. A belief of a held tenure, of a token newer than every grant known
// (the collector has yet to report it) or of a lock the tracker does not
// know gives an empty batch. A belief made after the tenure of its token
// ended, or under a token older than a grant made before it whose tenure
// is no longer remembered, is a zombie: a zombie_belief event, and the
// zombie_holder finding of the tenure if it has none yet.
func (t *Tracker) ReportBelief(b Belief) Batch {
	st := t.locks[b.Key()]
	if st == nil {
		return Batch{}
	}
	t.advance(b.At)
	o := newOutput(1)
	// Judged against the lock as a tick would have left it.
	t.expireRunOut(o, st, t.vouched(b.Source))
	if z, ok := st.zombie(b); ok {
		t.zombieBelief(o, st, b, z)
	}
	return t.done(o)
}

// zombieOf is what makes a belief a zombie's: the tenure of its token when
// remembered, and since when it has not held the lock.
type zombieOf struct {
	ten   *tenure // nil: not remembered
	since time.Time
	by    *tenure // the newer grant that shows it, when ten is nil
}

// mark returns the ZombieMark that names z's zombie tenure: by its seq when
// remembered; else every forgotten tenure older than the grant that shows
// it is one, so that beliefs under ever new old tokens raise one finding.
func (z zombieOf) mark() ZombieMark {
	if z.ten != nil {
		return ZombieMark{Seq: z.ten.seq}
	}
	return ZombieMark{By: z.by.seq}
}

// zombie reports whether b was made after its token's tenure ended.
func (st *lockState) zombie(b Belief) (zombieOf, bool) {
	token := b.Token
	for i := len(st.recent) - 1; i >= 0; i-- {
		ten := &st.recent[i]
		if ten.token == nil || *ten.token != token || (b.Holder != "" && !st.sameTenure(ten, b.Holder, ten.token)) {
			continue
		}
		if ten.held() || !b.At.After(ten.endedAt()) {
			return zombieOf{}, false
		}
		return zombieOf{ten: ten, since: ten.endedAt()}, true
	}
	// Not remembered: a zombie only if a newer token was granted before the
	// belief, and its tenure ended by that grant at the latest.
	for i := range st.recent {
		if by := &st.recent[i]; by.token != nil && *by.token > token && !by.grantedAt().After(b.At) {
			return zombieOf{since: by.grantedAt(), by: by}, true
		}
	}
	return zombieOf{}, false
}

// zombieBelief records a zombie belief: the zombie_holder finding of its
// tenure the first time, and its zombie_belief event when it shows the
// zombie going on longer than the last one said.
func (t *Tracker) zombieBelief(o *output, st *lockState, b Belief, z zombieOf) {
	holder := b.Holder
	if holder == "" && z.ten != nil {
		holder = z.ten.holder
	}
	after := b.At.Sub(z.since)
	m := st.zombieMark(z.mark())
	if m != nil && after.Milliseconds() < m.AfterMS+max(m.AfterMS/4, zombieStepMS) {
		return
	}
	detail := map[string]any{"since": z.since.UTC().Format(time.RFC3339Nano), "after_ms": after.Milliseconds()}
	if z.ten != nil {
		detail["end"] = z.ten.end.String()
	}
	o.event(st, Event{Kind: EventZombieBelief, At: b.At, Holder: holder, Token: Int64(b.Token), Detail: detail})
	o.changed(st)
	if m != nil {
		m.AfterMS = after.Milliseconds()
		return
	}
	st.addZombie(z.mark(), after)
	f := Finding{Kind: FindingZombieHolder, At: z.since, Until: b.At, Tokens: []int64{b.Token}}
	if z.ten != nil {
		f.Holders = holders(z.ten.holder, b.Holder)
		f.Summary = fmt.Sprintf("%s still acted as the holder of token %d %s after its tenure ended (%s): a zombie holder; zombie_belief events say how long it went on",
			orUnknown(holder), b.Token, after.Round(time.Millisecond), z.ten.end)
	} else {
		f.Tokens = append(f.Tokens, *z.by.token)
		f.Holders = holders(b.Holder, z.by.holder)
		f.Summary = fmt.Sprintf("%s still acted as the holder of token %d %s after token %d was granted to %s: a zombie holder; zombie_belief events say how long it went on",
			orUnknown(holder), b.Token, after.Round(time.Millisecond), *z.by.token, orUnknown(z.by.holder))
	}
	o.finding(st, f)
}

// zombieMark returns the remembered mark of the zombie tenure that id names
// (ZombieMark.Seq or By), nil if its finding has not been raised.
func (st *lockState) zombieMark(id ZombieMark) *ZombieMark {
	if st.reported == nil {
		return nil
	}
	for i, m := range st.reported.zombies {
		if m.Seq == id.Seq && m.By == id.By {
			return &st.reported.zombies[i]
		}
	}
	return nil
}

// addZombie remembers the zombie tenure that id names, its finding raised
// and its first event after after its end. It forgets the marks of tenures,
// and of grants, older than every tenure the lock remembers, which no
// belief can name again: so a lock keeps at most two per remembered tenure.
func (st *lockState) addZombie(id ZombieMark, after time.Duration) {
	r := st.health()
	if len(st.recent) > 0 {
		oldest := st.recent[0].seq
		r.zombies = slices.DeleteFunc(r.zombies, func(m ZombieMark) bool { return max(m.Seq, m.By) < oldest })
	}
	id.AfterMS = after.Milliseconds()
	r.zombies = append(r.zombies, id)
}
