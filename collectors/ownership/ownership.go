// Package ownership lets several leasewatch replicas share the sources of
// one configuration: each source is owned by exactly one replica at a time,
// through a lease of its own with a fencing token, and the sources are
// spread fairly over the live replicas.
//
// It lives with the collectors because it talks to the same backends they
// watch, with their clients: an etcd concurrency.Election
// (EtcdElector) or a coordination.k8s.io/v1 Lease per source driven by
// client-go's leader election (KubernetesElector). Both implement Elector;
// ownershiptest is the contract suite both pass. Manager runs over a list of
// source names and reports each grant and each loss. docs/design/replication.md
// describes the protocol, and docs/design/timing-bound.md its timing bound.
package ownership

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Defaults of Timing, client-go's for leader election.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// jitter is client-go's leaderelection.JitterFactor: it retries every
// RetryPeriod to 1.2 RetryPeriod, and requires RenewDeadline beyond that.
const jitter = 1.2

// Timing is the lease timing of an elector. The zero value is the defaults.
type Timing struct {
	// LeaseDuration is how long a grant lasts without a renewal: after a
	// replica dies, its sources wait this long before another takes them.
	// Whole seconds, since both backends keep leases in seconds.
	LeaseDuration time.Duration
	// RenewDeadline is how long a holder goes on failing to renew before it
	// gives the term up (Term.Lost), shorter than LeaseDuration so that it
	// stops before anyone else can be granted the source.
	RenewDeadline time.Duration
	// RetryPeriod is how often a holder renews and a candidate tries.
	RetryPeriod time.Duration
}

// WithDefaults returns t with its zero fields set to the defaults.
func (t Timing) WithDefaults() Timing {
	if t.LeaseDuration == 0 {
		t.LeaseDuration = DefaultLeaseDuration
	}
	if t.RenewDeadline == 0 {
		t.RenewDeadline = DefaultRenewDeadline
	}
	if t.RetryPeriod == 0 {
		t.RetryPeriod = DefaultRetryPeriod
	}
	return t
}

// Validate checks t, defaults applied, and names the offending field by its
// configuration key.
func (t Timing) Validate() error {
	t = t.WithDefaults()
	switch {
	case t.LeaseDuration < time.Second || t.LeaseDuration%time.Second != 0:
		return fmt.Errorf("lease_duration: %v must be a whole number of seconds, at least 1s (both backends keep leases in seconds)", t.LeaseDuration)
	case t.RenewDeadline <= 0:
		return fmt.Errorf("renew_deadline: %v must be positive", t.RenewDeadline)
	case t.RenewDeadline >= t.LeaseDuration:
		return fmt.Errorf("renew_deadline: %v must be shorter than lease_duration %v, so a holder stops before its lease can pass to another", t.RenewDeadline, t.LeaseDuration)
	case t.RetryPeriod <= 0:
		return fmt.Errorf("retry_period: %v must be positive", t.RetryPeriod)
	case time.Duration(jitter*float64(t.RetryPeriod)) >= t.RenewDeadline:
		return fmt.Errorf("retry_period: %v must be shorter than renew_deadline %v divided by %v (the retries' jitter), so a holder gets more than one try", t.RetryPeriod, t.RenewDeadline, jitter)
	}
	return nil
}

// Elector elects an owner per source among the replicas that share a lock
// backend, and keeps this replica's membership announced while it is open.
type Elector interface {
	// Identity names this replica in the backend (a hostname, say).
	Identity() string
	// Members returns how many replicas are live, this one included, and
	// this replica's rank among them: how many live others have an
	// identity that sorts before its own. It counts identities: a replica
	// restarted under its identity counts once, even while its dead
	// process's membership has yet to lapse.
	Members(ctx context.Context) (n, rank int, err error)
	// Campaign returns once this replica is granted source, with the
	// grant's Term, or when ctx ends, with its error. Just before it would
	// take the source it asks allow, with takeover true when the previous
	// holder's lease ran out rather than being released; false defers the
	// grant to a later try, so a replica never takes more than it may.
	Campaign(ctx context.Context, source string, allow func(takeover bool) bool) (*Term, error)
	// Close ends the membership. It resigns no term: Manager resigns its
	// terms before it closes the elector.
	Close() error
}

// Term is one grant of a source to this replica.
type Term struct {
	// Source is the source's name.
	Source string
	// Token is the grant's fencing token: larger than that of every earlier
	// grant of the source, to any replica.
	Token int64

	lost   <-chan struct{}
	resign func(context.Context) error
}

// Lost is closed once the term is over: resigned, or lost because the
// backend could not be reached within the renew deadline or the lease was
// taken over. The holder must then stop the source's work at once: another
// replica may be granted it a lease duration after the last renewal.
func (t *Term) Lost() <-chan struct{} { return t.lost }

// Resign gives the source up at once, so that another replica is granted it
// without waiting for the lease to run out. Stop the source's work first.
func (t *Term) Resign(ctx context.Context) error { return t.resign(ctx) }

// errClosed is Campaign's error once the elector is closed.
var errClosed = errors.New("ownership: elector closed")

// wait waits d, or until ctx ends, and returns ctx's error then.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
