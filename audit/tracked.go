package audit

import (
	"slices"
	"time"
)

// lockState is what the tracker keeps of one lock: a TrackState in compact
// form. The lock's current state is not kept but derived from its newest
// tenure (lock), and tenures keep their times as Unix nanoseconds. A busy
// source has a hundred thousand locks, so each byte here counts that often.
type lockState struct {
	key            LockKey
	kind           SourceKind
	class          Class
	recent         []tenure // newest last, consecutive by seq up to nextSeq; the last is current while held
	nextSeq        int64    // the seq of the newest grant, 0 before the first
	lastGrantToken *int64
	resources      map[string]*ResourceState

	// As in TrackState.
	expireByClock, sequentialTokens, unfencedReported bool

	// Leadership health (health.go): when the last flapping finding was
	// raised; when the lock, free now, becomes leaderless (0: it does not);
	// the tenures that tight_renewal and clock_skew were raised for. Times
	// are Unix nanoseconds.
	flappingAt, leaderlessDue int64
	tightSeq, skewSeq         int64
	// zombieTokens are the tokens of the zombie tenures whose finding was
	// raised (belief.go); almost always none.
	zombieTokens []int64
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
	end      EndReason // empty while held
	observed bool
	// gap is the typical interval between the holder's renewals, over
	// samples of them (timeRenewal); not saved, so learnt again after a
	// restart.
	gap     int64
	samples uint8
}

func (tn *tenure) held() bool { return tn.end == "" }

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
		ExpiresAt: tn.expiresAt(), EndedAt: tn.endedAt(), End: tn.end,
	}
}

func tenureOf(t Tenure) tenure {
	return tenure{
		seq: t.Seq, holder: t.Holder, token: t.Token, position: t.Position,
		granted: nanos(t.GrantedAt), renewed: nanos(t.LastRenewedAt), expires: nanos(t.ExpiresAt), ended: nanos(t.EndedAt),
		lease: t.LeaseDuration, renewals: t.Renewals, end: t.End, observed: t.Observed,
	}
}

// lock returns the lock's current state, which follows from its newest
// tenure: held by it; expired, naming it, after it expired; free after it
// was released, or before any grant.
func (st *lockState) lock() Lock {
	l := Lock{Source: st.key.Source, Name: st.key.Name, Kind: st.kind, Class: st.class, State: StateFree}
	n := len(st.recent)
	if n == 0 {
		return l
	}
	ten := &st.recent[n-1]
	l.LeaseDuration = ten.lease
	switch ten.end {
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

// export returns a copy of the state as a TrackState, for a Journal.
func (st *lockState) export() TrackState {
	ts := TrackState{
		Lock: st.lock(), NextSeq: st.nextSeq, LastGrantToken: st.lastGrantToken,
		ExpireByClock: st.expireByClock, SequentialTokens: st.sequentialTokens, UnfencedReported: st.unfencedReported,
		Resources:  cloneResources(st.resources),
		FlappingAt: timeOrZero(st.flappingAt), LeaderlessDue: timeOrZero(st.leaderlessDue), TightSeq: st.tightSeq, SkewSeq: st.skewSeq,
		ZombieTokens: slices.Clone(st.zombieTokens),
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
		key: ts.Lock.Key(), kind: ts.Lock.Kind, class: ts.Lock.Class, nextSeq: ts.NextSeq, lastGrantToken: ts.LastGrantToken,
		expireByClock: ts.ExpireByClock, sequentialTokens: ts.SequentialTokens, unfencedReported: ts.UnfencedReported,
		resources:  cloneResources(ts.Resources),
		flappingAt: nanosOrZero(ts.FlappingAt), leaderlessDue: nanosOrZero(ts.LeaderlessDue), tightSeq: ts.TightSeq, skewSeq: ts.SkewSeq,
		zombieTokens: slices.Clone(ts.ZombieTokens),
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
		rc := &ResourceState{Highest: r.Highest}
		if len(r.Pending) > 0 {
			rc.Pending = append([]PendingGrant(nil), r.Pending...)
		}
		if len(r.Accepted) > 0 {
			rc.Accepted = append([]AcceptedWrite(nil), r.Accepted...)
		}
		c[name] = rc
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
