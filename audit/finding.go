package audit

import "time"

// FindingKind names a fencing gap or lease anomaly (contract).
type FindingKind string

// Finding kinds.
const (
	FindingTokenRegression FindingKind = "token_regression"
	FindingTokenReuse      FindingKind = "token_reuse"
	FindingTokenSkip       FindingKind = "token_skip"
	FindingOverlap         FindingKind = "overlap"
	FindingExposure        FindingKind = "exposure"
	FindingUnfencedWrite   FindingKind = "unfenced_write"
	FindingStaleWrite      FindingKind = "stale_write"
	FindingLateRenewal     FindingKind = "late_renewal"
	FindingLeaseExpired    FindingKind = "lease_expired"
	FindingUnfencedLock    FindingKind = "unfenced_lock"
	FindingBlindWindow     FindingKind = "blind_window"
	// FindingLockDeleted: the lock object was deleted while held (a
	// Kubernetes Lease removed by hand or by garbage collection), so its
	// holder may still act on a lease nobody else can see.
	FindingLockDeleted FindingKind = "lock_deleted"
	// FindingLockEvicted: the backend evicted the lock under memory pressure
	// while its holder still believed it held it.
	FindingLockEvicted FindingKind = "lock_evicted"

	// Leadership health (health.go).

	// FindingFlapping: the lock was granted more times within an hour than
	// health.flapping_per_hour.
	FindingFlapping FindingKind = "flapping"
	// FindingLeaderless: a lock that is normally held has been free or
	// expired for longer than health.leaderless_after.
	FindingLeaderless FindingKind = "leaderless"
	// FindingTightRenewal: a holder's typical renewal interval leaves less
	// than health.tight_renewal_margin_ratio of its lease.
	FindingTightRenewal FindingKind = "tight_renewal"
	// FindingClockSkew: a holder's clock, as the backend records it, runs
	// ahead of the collector's by more than health.clock_skew_ratio of its
	// lease.
	FindingClockSkew FindingKind = "clock_skew"
	// FindingZombieHolder: a holder said it still acted under a token after
	// that token's tenure had ended (belief.go), from the end to its first
	// such belief; once per zombie tenure.
	FindingZombieHolder FindingKind = "zombie_holder"
	// FindingUngrantedToken: a resource accepted a write under a token no
	// grant of the lock had (tracker.go): forged, or from another lock.
	FindingUngrantedToken FindingKind = "ungranted_token"
)

// FindingKinds lists every finding kind in a stable order.
var FindingKinds = []FindingKind{
	FindingTokenRegression, FindingTokenReuse, FindingTokenSkip, FindingOverlap,
	FindingExposure, FindingUnfencedWrite, FindingStaleWrite, FindingLateRenewal,
	FindingLeaseExpired, FindingUnfencedLock, FindingBlindWindow, FindingLockDeleted,
	FindingLockEvicted, FindingFlapping, FindingLeaderless, FindingTightRenewal, FindingClockSkew,
	FindingZombieHolder, FindingUngrantedToken,
}

// WriteFindingKinds are the kinds of findings about one write report: they
// name the write (WriteMarkOf) and say what became of it.
var WriteFindingKinds = []FindingKind{FindingStaleWrite, FindingUnfencedWrite}

// Severity ranks findings (contract).
type Severity string

// Severities.
const (
	SeverityCritical Severity = "critical"
	SeverityWarning  Severity = "warning"
	SeverityInfo     Severity = "info"
)

// Valid reports whether s is a known severity.
func (s Severity) Valid() bool {
	return s == SeverityCritical || s == SeverityWarning || s == SeverityInfo
}

// Severity returns the severity every finding of kind k carries.
func (k FindingKind) Severity() Severity {
	switch k {
	case FindingTokenRegression, FindingTokenReuse, FindingOverlap, FindingUnfencedWrite, FindingUngrantedToken:
		return SeverityCritical
	case FindingStaleWrite, FindingExposure:
		return SeverityInfo
	default:
		return SeverityWarning
	}
}

// Valid reports whether k is a known finding kind.
func (k FindingKind) Valid() bool {
	for _, v := range FindingKinds {
		if k == v {
			return true
		}
	}
	return false
}

// Finding is one fencing gap or lease anomaly on a lock.
type Finding struct {
	ID       int64
	LockID   int64 // set by the store on reads
	Lock     LockKey
	Kind     FindingKind
	Severity Severity
	At       time.Time
	Until    time.Time // zero for an instant
	Summary  string
	Tokens   []int64
	Holders  []string
	Resource string
}
