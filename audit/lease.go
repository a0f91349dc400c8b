package audit

import "time"

// The lease rule. Where the backend never reports expiry itself
// (Input.ExpireByClock: Kubernetes, Redis before its expired notification),
// a lease runs out by the clock, and two parts of leasewatch judge it: the
// collector, which tells a renewal from a holder taking the lock anew, and
// the Tracker, which expires the tenure. Both judge by the functions below,
// so that a write the collector calls a renewal is one the tracker finds in
// time, and a lease the collector leaves out of a snapshot as run out is one
// the tracker expires.

// LeaseExpiry returns when a lease last renewed at renewed for d runs out:
// renewed plus d. It is the zero time, never, when d is not positive or
// renewed is zero: nothing says when such a lease would run out.
func LeaseExpiry(renewed time.Time, d time.Duration) time.Time {
	if d <= 0 || renewed.IsZero() {
		return time.Time{}
	}
	return renewed.Add(d)
}

// LeaseRunOut reports whether a lease that expires at expires (LeaseExpiry)
// had run out by at: at is at or past it. A lease that never expires (the
// zero time) never has. A write of the same holder and token made (Renewed)
// before its lease ran out renews the tenure; one made after takes the lock
// anew.
func LeaseRunOut(expires, at time.Time) bool {
	return !expires.IsZero() && !at.Before(expires)
}

// Renewed returns when the holder renewed, by what ob shows: RenewedAt where
// the backend tells it (on the holder's clock, like the lease it extends, so
// that a renewal made in time but delivered late is in time), else when the
// collector saw it (At).
func (ob Observation) Renewed() time.Time {
	if !ob.RenewedAt.IsZero() {
		return ob.RenewedAt
	}
	return ob.At
}
