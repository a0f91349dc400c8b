package collectors

import (
	"log/slog"

	"github.com/leasewatch/leasewatch/audit"
)

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
	// Credentials is what a source of the backend takes of the keys every
	// source may have: username, password (or password_file,
	// password_env) and tls.
	Credentials Credentials
	// Section returns a new, empty section: a pointer to the struct, with
	// yaml tags, of the backend's own keys of a source in the
	// configuration file (etcd's endpoints and prefixes, say).
	Section func() Section
}

// Credentials is what a backend's sources take of username, password and
// tls.
type Credentials struct {
	// None says why a source of the backend takes none of them (a
	// Kubernetes source: "a kubernetes source takes its credentials and
	// TLS from its kubeconfig"); "" when it takes them.
	None string
	// UserRequired says a password needs a user name (etcd's auth,
	// ZooKeeper's digest). Without it, a password alone is allowed (Redis's
	// AUTH password, the default user's).
	UserRequired bool
}

// Section is a backend's own keys of a source in the configuration file,
// decoded from the source's entry.
// ClockExpirer is a Section whose source's leases can run out by the clock
// where its backend's do not as a rule (Backend.ExpiresByClock false): a
// PostgreSQL source with lease tables, whose rows' expiries pass unseen.
type ClockExpirer interface {
	ExpiresByClock() bool
}

// ExpiresByClockFor says whether a source of b with section s has leases
// that run out by the clock: its collector vouches with Input.Live, and its
// leases are judged only up to then.
func (b Backend) ExpiresByClockFor(s Section) bool {
	if b.ExpiresByClock {
		return true
	}
	c, ok := s.(ClockExpirer)
	return ok && c.ExpiresByClock()
}

type Section interface {
	// Check validates the keys as the collector would, for a source with
	// tls set or not, and returns the first problem. The error starts with
	// the key it is about ("prefixes: at least one key prefix is
	// required"), which the configuration prefixes with the source's place.
	Check(tls bool) error
	// Collector returns the collector of src, a source with this section.
	Collector(src Source, logger *slog.Logger) (Collector, error)
}

// Source is what a source's entry in the configuration file says besides
// its backend's section.
type Source struct {
	Name     string
	Username string
	Password Secret
	TLS      TLS // nil: plain text
}
