// Package runcodectest makes renewal workloads as leasewatch's collectors
// record them, for the stores' benchmarks of what a renewal costs on disk:
// when the backend renewed a lease, when leasewatch observed it, the lease
// and detail the collector reports, and the margin the tracker gives it.
package runcodectest

import (
	"math"
	"math/rand/v2"
	"time"
)

// Renewal is one renewal as the tracker records it.
type Renewal struct {
	RenewedAt time.Time // the backend's time of it
	At        time.Time // when leasewatch observed it
	TTL       time.Duration
	Margin    float64        // margin_ratio, rounded to 3 places as the tracker does
	Detail    map[string]any // the collector's, beyond margin_ratio and renewed_at; nil: none
}

// EventDetail is the renewal's detail as the tracker records it.
func (r Renewal) EventDetail() map[string]any {
	d := map[string]any{"margin_ratio": r.Margin, "renewed_at": r.RenewedAt.UTC().Format(time.RFC3339Nano)}
	for k, v := range r.Detail {
		d[k] = v
	}
	return d
}

// A Workload is leases of one kind of backend, renewed as their holders
// renew them and recorded as its collector records them.
type Workload struct {
	Name  string
	TTL   time.Duration // the lease granted
	Every time.Duration // about how often a lease is renewed
	// start returns the generator of a lease's renewals, its first at
	// start plus up to Every.
	start func(rng *rand.Rand, start time.Time) func() Renewal
}

// Workloads are a Kubernetes node lease (the kubelet renews its 40 s
// lease every 10 s, jittered by up to 4 %, renewTime to the µs), a client-go
// leader election (a 15 s lease renewed every 2 s retry period plus the
// request's time, up to 20 ms), a Redis lock (redsync's extend of a 30 s
// lock every 10 s) and an etcd lease (a session's 10 s lease kept alive by
// the client, seen by the collector's polls). ZooKeeper's sessions renew by
// pings, which the collector cannot see: it records no renewals.
var Workloads = []Workload{
	{Name: "node", TTL: 40 * time.Second, Every: 10 * time.Second, start: heartbeat(10*time.Second, 400*time.Millisecond, 40*time.Second)},
	{Name: "leader", TTL: 15 * time.Second, Every: 2 * time.Second, start: heartbeat(2*time.Second, 20*time.Millisecond, 15*time.Second)},
	{Name: "redis", TTL: 30 * time.Second, Every: 10 * time.Second, start: redisLock(30 * time.Second)},
	{Name: "etcd", TTL: 10 * time.Second, Every: 3500 * time.Millisecond, start: etcdLease(10)},
}

// Lease is one lease's renewals, in order.
type Lease struct {
	next func() Renewal
	prev Renewal
}

// Lease starts a lease of w granted at start.
func (w Workload) Lease(rng *rand.Rand, start time.Time) *Lease {
	return &Lease{next: w.start(rng, start), prev: Renewal{RenewedAt: start, TTL: w.TTL}}
}

// Next returns the lease's next renewal, with the margin the tracker gives
// it: the share of the lease the renewal before set that was left.
func (l *Lease) Next() Renewal {
	r := l.next()
	ratio := float64(l.prev.RenewedAt.Add(l.prev.TTL).Sub(r.RenewedAt)) / float64(l.prev.TTL)
	r.Margin = math.Round(ratio*1000) / 1000
	l.prev = r
	return r
}

// heartbeat is a Kubernetes client's renewals of a lease: every interval
// plus up to jitter (uniform), the renewTime to the µs, observed 1 to 5 ms
// later, the lease's duration ttl as set.
func heartbeat(interval, jitter, ttl time.Duration) func(*rand.Rand, time.Time) func() Renewal {
	return func(rng *rand.Rand, start time.Time) func() Renewal {
		renewed := start.Add(time.Duration(rng.Int64N(int64(interval))))
		return func() Renewal {
			renewed = renewed.Add(interval + time.Duration(rng.Int64N(int64(jitter)+1))).Truncate(time.Microsecond)
			observed := renewed.Add(time.Millisecond + time.Duration(rng.Int64N(int64(4*time.Millisecond))))
			return Renewal{RenewedAt: renewed, At: observed, TTL: ttl}
		}
	}
}

// redisLock is a lock of ttl extended by its holder every ttl/3 after its
// extend returned (a round trip of 0.2 to 1.5 ms), as the Redis collector
// records it: the keyspace event's read 0.05 to 0.35 ms after the PEXPIRE,
// its time both the observed and the backend time (to the ns), and the
// lease PTTL+1 ms as that read returns it: ttl+1 ms, or ttl when a
// millisecond of the server's clock passed since the PEXPIRE (one in five,
// as a local Redis server's renewals recorded by the collector have it).
func redisLock(ttl time.Duration) func(*rand.Rand, time.Time) func() Renewal {
	return func(rng *rand.Rand, start time.Time) func() Renewal {
		extended := start.Add(time.Duration(rng.Int64N(int64(ttl / 3))))
		return func() Renewal {
			extended = extended.Add(ttl/3 + between(rng, 200*time.Microsecond, 1500*time.Microsecond))
			read := extended.Add(between(rng, 50*time.Microsecond, 350*time.Microsecond))
			passed := read.UnixMilli() - extended.UnixMilli()
			return Renewal{RenewedAt: read, At: read, TTL: ttl + time.Millisecond - time.Duration(passed)*time.Millisecond}
		}
	}
}

// etcdLease is a session's lease of ttlS seconds as etcd's client keeps it
// alive and the etcd collector sees it. The client's loop wakes every
// 500 ms (plus its work, 50 to 200 µs) and sends a keepalive once a third
// of the lease has passed since the last one's response (a round trip of
// 0.2 to 1.5 ms). The collector reads the lease's TTL every 500 ms (a
// ticker; each read 0.3 to 2 ms): the first read after a keepalive shows
// ttlS-1 whole seconds left, which is more than the read before allowed,
// so it records a renewal observed at that read, its backend time the read
// before (just after: the keepalive came after it), and {"ttl_s": ttlS-1}.
func etcdLease(ttlS int64) func(*rand.Rand, time.Time) func() Renewal {
	ttl := time.Duration(ttlS) * time.Second
	return func(rng *rand.Rand, start time.Time) func() Renewal {
		const poll = 500 * time.Millisecond
		client := start.Add(time.Duration(rng.Int64N(int64(poll))))
		next := client
		tick := start // the collector's ticker
		read := func() time.Time { return tick.Add(between(rng, 300*time.Microsecond, 2*time.Millisecond)) }
		last := read()
		return func() Renewal {
			for client = client.Add(poll + between(rng, 50*time.Microsecond, 200*time.Microsecond)); client.Before(next); {
				client = client.Add(poll + between(rng, 50*time.Microsecond, 200*time.Microsecond))
			}
			rtt := between(rng, 200*time.Microsecond, 1500*time.Microsecond)
			renewed := client.Add(rtt / 2)
			next = client.Add(rtt + ttl/3)
			for {
				tick = tick.Add(poll)
				at := read()
				if at.After(renewed) {
					r := Renewal{RenewedAt: last.Add(time.Nanosecond), At: at, TTL: ttl, Detail: map[string]any{"ttl_s": ttlS - 1}}
					last = at
					return r
				}
				last = at
			}
		}
	}
}

// between returns a duration from lo to hi, uniform.
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}
