package audit

import (
	"encoding/json"
	"time"
)

// EventKind is the kind of a recorded event (contract).
type EventKind string

// Event kinds.
const (
	EventObserved      EventKind = "observed" // already held when the collector started
	EventGrant         EventKind = "grant"
	EventRenew         EventKind = "renew"
	EventRelease       EventKind = "release"
	EventExpire        EventKind = "expire"
	EventWriteAccepted EventKind = "write_accepted"
	EventWriteRejected EventKind = "write_rejected"
	EventBlind         EventKind = "blind" // detail.from .. detail.to: the collector could not see the backend
	// EventZombieBelief: a holder said it acted under a token whose tenure
	// had ended (belief.go); detail.since is when it stopped holding the
	// lock, detail.after_ms how long before the belief. Beliefs of a held
	// tenure are not recorded.
	EventZombieBelief EventKind = "zombie_belief"
)

// EventKinds lists every event kind in a stable order.
var EventKinds = []EventKind{
	EventObserved, EventGrant, EventRenew, EventRelease, EventExpire,
	EventWriteAccepted, EventWriteRejected, EventBlind, EventZombieBelief,
}

// Valid reports whether k is a known event kind.
func (k EventKind) Valid() bool {
	for _, v := range EventKinds {
		if k == v {
			return true
		}
	}
	return false
}

// Event is one recorded fact about a lock.
type Event struct {
	ID        int64
	LockID    int64 // set by the store on reads
	Lock      LockKey
	Kind      EventKind
	At        time.Time // collector clock for backend events, resource clock for writes
	Holder    string
	Token     *int64
	TTL       time.Duration // lease duration where known
	Position  string        // etcd revision, Kubernetes resourceVersion; empty when unknown
	Inferred  bool          // deduced by the collector or tracker rather than seen
	Resource  string        // for write events
	RequestID string        // for write events: the reporter's idempotency key
	// Seq is the tenure a renew event belongs to (Tenure.Seq), which gives
	// its holder and token; zero for other kinds and for renewals stored
	// before it was recorded.
	Seq    int64
	Detail map[string]any
	// Renewal is a renew event's margin and backend renewal time as the
	// tracker makes them, typed rather than in Detail.
	Renewal RenewalDetail
	// Previous is, on a grant or observed event as the tracker makes it,
	// who held the lock in the tenure before. It travels with the commit
	// only: the stores do not keep it, and an event read back has none
	// (the tenures say who held the lock before).
	Previous PreviousHolder
}

// PreviousHolder is who held a lock in the tenure before a grant, as the
// tracker knew it when it made the grant: from its own steps, or after a
// restart from the tenures it restored. Known is false when the tracker knew
// of no earlier tenure, as for the lock's first grant. Holder may be the
// grant's own (a holder that acquired the lock again) or empty (a tenure of
// unknown holder).
type PreviousHolder struct {
	Holder string
	Known  bool
}

// RenewalDetail is what the tracker adds to a renew event's detail, kept
// typed on its way to the store so that a renewal needs no map or text of
// its own: margin_ratio, the fraction of the lease left when the holder
// renewed, in thousandths, and renewed_at, when the holder renewed by the
// backend (a Kubernetes renewTime), in Unix nanoseconds. Stores keep both in
// columns of their own, and an event read back has them in Detail, as the
// API shows them; one made elsewhere may carry them in Detail instead.
type RenewalDetail struct {
	Margin, RenewedAt       int64
	HasMargin, HasRenewedAt bool
}

// MaxMargin bounds a margin kept in thousandths (RenewalDetail.Margin, a
// store's margin column): beyond it the thousandths no longer give the
// ratio back exactly, and the detail keeps the ratio instead.
const MaxMargin = 1e12

// MarginRatio is e's margin_ratio, typed or in its detail as the tracker
// made it, and whether it has one.
func (e Event) MarginRatio() (float64, bool) {
	if e.Renewal.HasMargin {
		return float64(e.Renewal.Margin) / 1000, true
	}
	r, ok := e.Detail["margin_ratio"].(float64)
	return r, ok
}

// Observation is what a collector saw of one lock, in backend-neutral terms.
// Collectors produce observations; the Tracker turns them into events, tenures
// and findings.
type Observation struct {
	Lock  LockKey
	Kind  EventKind // EventObserved, EventGrant, EventRenew, EventRelease or EventExpire
	At    time.Time // collector clock
	Class Class     // empty means ClassLock

	Holder        string
	Token         *int64        // nil: the grant carries no fencing token
	LeaseDuration time.Duration // zero when unknown
	// RenewedAt is when the holder renewed, where the backend tells it (a
	// Kubernetes renewTime, an etcd TTL read back); zero means At.
	RenewedAt time.Time
	Position  string
	Inferred  bool
	// Overtaken marks a renewal the backend reported after a read had
	// already shown a later renewal's deadline, or the end of the lease: it
	// counts, but moves neither the renewal time nor the deadline.
	Overtaken bool
	// Deleted says the lock object itself was deleted (a Kubernetes Lease
	// removed while held): the tenure ends with a lock_deleted finding.
	Deleted bool
	// Evicted says the backend dropped the lock under memory pressure before
	// its lease ran out (a Redis maxmemory eviction): the tenure ends with a
	// lock_evicted finding.
	Evicted bool
	// StillHeld marks a grant while the backend still shows an earlier
	// holder holding the lock: another row of a lease table that names the
	// same lock (Quartz's fired triggers of one job). The tracker raises an
	// overlap even where the earlier tenure has no lease to run out.
	StillHeld bool
	// Unjudged marks an end the collector found without being able to
	// tell how it came about: an etcd key whose lease was gone before the
	// collector could read it, revoked or run out while nobody watched (a
	// resume, a takeover, a restart). The tracker judges it as an end it
	// infers itself: expired if the tenure's lease had run out by At,
	// released otherwise.
	Unjudged bool
	Detail   map[string]any
}

// Blind is an interval over which a collector could not see its backend:
// a disconnect, an etcd compaction, a Kubernetes 410, a Redis reconnect.
type Blind struct {
	From, To time.Time
	Reason   string
}

// Input is one step of a collector: observations in backend order, an optional
// blind window that precedes them, and the resume cursor that covers them. The
// cursor is stored in the same transaction as the events it covers.
type Input struct {
	Source       string
	Kind         SourceKind
	At           time.Time // collector clock when the input was made; zero: the latest observation's
	Blind        *Blind
	Observations []Observation
	Cursor       string // empty: leave the stored cursor as it is
	// Behind is how long the observations waited in the backend or on the
	// way before the collector received them, where it can tell (a Redis
	// pub/sub connection's PING round trip: notifications queue ahead of
	// the PONG). Observation lag counts it.
	Behind time.Duration
	// Snapshot says Observations list every lock currently held in the
	// source (after a start or a blind window): a lock the tracker holds that
	// is missing from them has ended while the collector was not looking.
	Snapshot bool
	// ExpireByClock marks backends that never report expiry themselves
	// (Kubernetes, Redis before its expired event): the tracker ends their
	// tenures at last renewal + lease duration, but only up to the time the
	// collector last vouched for with Live, so a collector that is down or
	// still replaying history never makes leases look expired.
	ExpireByClock bool
	// Live says the collector has delivered every change of its source up to
	// At: the tracker's clock may expire the source's leases up to then.
	Live bool
	// SequentialTokens marks backends whose tokens are counters that rise by one
	// per grant (Kubernetes leaseTransitions, a Redis INCR counter), so a jump
	// means grants the collector never saw.
	SequentialTokens bool
	// TokenPerTenure says a token names exactly one tenure (an etcd owner
	// key's CreateRevision): a token alone decides which tenure an end or a
	// renewal is of, so a holder string that changes within it (an
	// election's Proclaim) is the same tenure. Elsewhere a token can repeat
	// across holders (Kubernetes leaseTransitions), so the holder must match
	// too.
	TokenPerTenure bool
	// CoarseRenewals says the observations' RenewedAt is estimated from a
	// TTL read to the second (etcd): the store keeps it, but its error is no
	// observation lag.
	CoarseRenewals bool
	// HolderClock says the observations' RenewedAt is the holder's own
	// clock (a Kubernetes renewTime), not an estimate on the collector's:
	// a holder whose clock runs ahead shows as clock_skew.
	HolderClock bool
	// Writes are writes a resource accepted or rejected as the collector
	// saw them in its backend (a fenced table's rows), not reported by the
	// resource: judged as write reports are, after the observations, and
	// stored in the same transaction as the cursor, so that a restart
	// neither loses nor repeats one.
	Writes []WriteReport
}

// WriteOutcome is what a protected resource did with a fenced write.
type WriteOutcome string

// Write outcomes (contract).
const (
	WriteAccepted WriteOutcome = "accepted"
	WriteRejected WriteOutcome = "rejected"
)

// WriteReport is one write a protected resource accepted or rejected because of
// its fencing token (POST /api/v1/writes).
type WriteReport struct {
	Source       string
	Lock         string
	Resource     string
	Token        *int64
	Outcome      WriteOutcome
	HighestToken *int64 // the highest token the resource had accepted, if it says
	Holder       string
	At           time.Time
	// AtDefaulted says the reporter gave no time and At is when the report
	// was received, which a retry does not repeat (see SameWrite).
	AtDefaulted bool
	// RequestID makes the report idempotent within its RequestKey.
	RequestID string
}

// WriteEvent is a stored write report (a write_accepted or write_rejected
// event) as Store.WriteEvents reads it.
type WriteEvent struct {
	ID           int64
	At           time.Time
	Outcome      WriteOutcome
	Holder       string
	Token        *int64
	Resource     string
	HighestToken *int64 // the highest token the resource had accepted, if it said
}

// WriteEventOf returns e as a WriteEvent, and false if e is not a write.
func WriteEventOf(e Event) (WriteEvent, bool) {
	w := WriteEvent{ID: e.ID, At: e.At, Outcome: WriteAccepted, Holder: e.Holder, Token: e.Token, Resource: e.Resource}
	switch e.Kind {
	case EventWriteAccepted:
	case EventWriteRejected:
		w.Outcome = WriteRejected
	default:
		return WriteEvent{}, false
	}
	w.HighestToken = detailInt(e.Detail["highest_token"])
	return w, true
}

// detailInt reads an integer from event detail: int64 as the tracker writes
// it, json.Number as the store reads it back, float64 from plain JSON.
func detailInt(v any) *int64 {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return Int64(n)
		}
	case int64:
		return Int64(x)
	case int:
		return Int64(int64(x))
	case float64:
		return Int64(int64(x))
	}
	return nil
}

// Key returns the report's lock key.
func (w WriteReport) Key() LockKey { return LockKey{Source: w.Source, Name: w.Lock} }
