package collectors

import "github.com/leasewatch/leasewatch/audit"

// Backend is what a backend's package declares about it to the rest of
// leasewatch. Outside that package, the declaration is the only knowledge
// of the backend there is: the service, the alerts and the configuration
// ask it, never the kind's name. Inputs carry what varies per observation
// (audit.Input's ExpireByClock, SequentialTokens, TokenPerTenure, ...).
type Backend struct {
	// Kind is the name the configuration and the API give the backend.
	Kind audit.SourceKind
	// ExpiresByClock says the backend never reports a lease's expiry
	// itself, or reports it late (Kubernetes; Redis, whose expired event
	// can lag): its collector sends Input.ExpireByClock and vouches with
	// Input.Live for the time up to which it has delivered every change, and
	// its leases are judged only up to then.
	ExpiresByClock bool
}
