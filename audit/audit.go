// Package audit holds leasewatch's domain: sources, locks, events, tenures and
// findings, and the tracker that derives events, tenures and findings from what
// collectors observe and what protected resources report.
//
// It imports only the standard library. Collectors, the SQLite store and the web
// server all depend on it; it depends on none of them.
package audit

import (
	"strings"
	"time"
)

// SourceKind names the backend a source watches.
type SourceKind string

// Source kinds (contract) of the first backends. A backend's kind is
// declared by its package (collectors.Backend), and the list of those
// leasewatch speaks is collectors/backends.
const (
	KindEtcd       SourceKind = "etcd"
	KindKubernetes SourceKind = "kubernetes"
	KindRedis      SourceKind = "redis"
)

// Class separates mutual-exclusion locks from liveness heartbeats.
type Class string

// Lock classes (contract).
const (
	ClassLock      Class = "lock"
	ClassHeartbeat Class = "heartbeat"
)

// LockKey identifies a lock across the whole service: the source's name and the
// lock's name within that source.
type LockKey struct {
	Source string
	Name   string
}

// String renders the key as SOURCE/NAME, the form the CLI and reports use.
func (k LockKey) String() string { return k.Source + "/" + k.Name }

// ParseLockKey splits SOURCE/NAME at the first slash. Lock names may contain
// slashes themselves (etcd prefixes, Kubernetes namespace/name).
func ParseLockKey(s string) (LockKey, error) {
	src, name, ok := strings.Cut(s, "/")
	if !ok || src == "" || name == "" {
		return LockKey{}, Errorf(EINVALID, "lock %q: want SOURCE/NAME", s)
	}
	return LockKey{Source: src, Name: name}, nil
}

// LockState is a lock's current state (contract: held, free, expired).
type LockState string

// Lock states.
const (
	StateHeld    LockState = "held"
	StateFree    LockState = "free"
	StateExpired LockState = "expired"
)

// EndReason says how a tenure ended (contract).
type EndReason string

// Tenure end reasons. The zero value means the tenure is still held.
const (
	EndReleased   EndReason = "released"
	EndExpired    EndReason = "expired"
	EndSuperseded EndReason = "superseded"
)

// Lock is one named lock within a source and its current state.
type Lock struct {
	ID            int64
	Source        string
	Kind          SourceKind
	Name          string
	Class         Class
	State         LockState
	Holder        string
	Token         *int64
	AcquiredAt    time.Time // zero when free or when the grant predates the collector
	RenewedAt     time.Time
	ExpiresAt     time.Time // zero when unknown
	LeaseDuration time.Duration
	ChangedAt     time.Time // time of the last grant, release or expiry: renewals do not change hands
}

// Key returns the lock's service-wide key.
func (l Lock) Key() LockKey { return LockKey{Source: l.Source, Name: l.Name} }

// Tenure is one holder's continuous hold of a lock under one token.
type Tenure struct {
	LockID        int64 // set by the store on reads
	Lock          LockKey
	Seq           int64 // 1-based, per lock, in grant order
	Holder        string
	Token         *int64
	GrantedAt     time.Time
	Observed      bool // already held when the collector started: GrantedAt is when it was first seen
	Position      string
	Renewals      int64
	LastRenewedAt time.Time
	LeaseDuration time.Duration
	ExpiresAt     time.Time // last renewal + lease duration; zero when unknown
	EndedAt       time.Time // zero while held
	End           EndReason // empty while held
	// Pruned summarises the renewals retention has deleted; nil when none
	// were (set by the store on reads). Renewals still counts them.
	Pruned *RenewalSummary
}

// Held reports whether the tenure has not ended.
func (t Tenure) Held() bool { return t.End == "" }

// Source describes a configured backend endpoint and its collector's health.
type Source struct {
	Name        string
	Kind        SourceKind
	State       string // "up" or "down"
	LastEventAt time.Time
	BlindSince  time.Time // zero unless the collector cannot see its backend now
	Error       string    // last collector error, if any
	// Degraded says why the collector sees its backend less well than it
	// could (polling instead of notifications, a Redlock member unreachable);
	// empty when it is not degraded.
	Degraded string
	// Lag is the observation lag of the source's latest commit: the longest
	// any of its observations took from the change in the backend
	// (Observation.RenewedAt where the backend tells it, else Observation.At;
	// always At for etcd, whose RenewedAt is an estimate) to being stored,
	// plus Input.Behind. LagAt is when that commit was; zero before the first.
	Lag   time.Duration
	LagAt time.Time
}

// Source collector states (contract).
const (
	SourceUp   = "up"
	SourceDown = "down"
	// SourceStandby is a source that another replica owns and watches
	// (replication): this one neither watches it nor counts it as blind.
	SourceStandby = "standby"
)

// Int64 returns a pointer to v, for optional tokens.
func Int64(v int64) *int64 { return &v }

// Float64 returns a pointer to v.
func Float64(v float64) *float64 { return &v }
