package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The lock loads (etcd, ZooKeeper, and the etcd locks of the failover and
// ingest loads) log every grant and release their clients made, lock by
// lock, and compare that log with what leasewatch stored: the counts per
// lock, then every tenure by its token.

// loggedLock is one lock of the load and the load's own log of it.
type loggedLock struct {
	name    string        // as the collector names it: the mutex's prefix, the lock directory
	release chan struct{} // tells the current holder to unlock
	// Grants and releases as the clients saw them: a Lock that returned, an
	// Unlock that returned. Contenders of one lock take turns, but on
	// different goroutines, hence the mutex.
	mu      sync.Mutex
	tenures []loggedTenure
	key     string // the latest holder's key
}

// loggedTenure is one acquisition: its fencing token (etcd: the owner key's
// CreateRevision; ZooKeeper: the owner node's czxid; what the collector
// records as the token) and when the client's Lock and Unlock returned.
type loggedTenure struct {
	token             int64
	key               string // the holder's key (etcd: its last segment is its lease in hex) or node
	granted, released time.Time
	unlocked          bool // Unlock returned without error
}

// loadTally is what the load did beyond the per-lock log.
type loadTally struct {
	skipped, failed atomic.Int64
	queued          atomic.Int64 // Lock calls under way
	// inFlight counts the locks started and the handovers signalled that
	// have not yet led to a grant.
	inFlight atomic.Int64
}

// signalHandovers tells each lock's holder to unlock once per hold period,
// at a rate kept by the clock, until ctx ends: the holder queues again
// behind the other contenders, so every signal is a handover. The function
// it returns waits for the signalling to stop.
func signalHandovers(ctx context.Context, locks []*loggedLock, hold time.Duration, t *loadTally) (wait func()) {
	var dispatched sync.WaitGroup
	dispatched.Add(1)
	go func() {
		defer dispatched.Done()
		dispatch(ctx, len(locks), hold, func(i int) {
			t.inFlight.Add(1) // until the grant that follows the release
			select {
			case locks[i].release <- struct{}{}:
			default: // the last signal is still unread: the lock is between holders
				t.inFlight.Add(-1)
				t.skipped.Add(1)
			}
		})
	}()
	return dispatched.Wait
}

// madeCounts returns the grants and releases the clients made, per lock
// and in all.
func madeCounts(locks []*loggedLock) (grantsMade, releasesMade map[string]int64, madeGrants, madeReleases int64) {
	grantsMade = make(map[string]int64, len(locks))
	releasesMade = make(map[string]int64, len(locks))
	for _, l := range locks {
		l.mu.Lock()
		for _, tn := range l.tenures {
			grantsMade[l.name]++
			madeGrants++
			if tn.unlocked {
				releasesMade[l.name]++
				madeReleases++
			}
		}
		l.mu.Unlock()
	}
	return grantsMade, releasesMade, madeGrants, madeReleases
}

// lockOutcome compares the logged locks' grants and releases, lock by lock
// and token by token, with what leasewatch stored.
type lockOutcome struct {
	madeGrants, madeReleases       int64
	grantsDiffer, releasesDiffer   int
	grantsPerLock, releasesPerLock string
	expiries                       int64
	tokens                         tokenMatch
}

// readLockOutcome reads, from database, what leasewatch stored of the load
// source's locks.
func readLockOutcome(ctx context.Context, database string, source string, locks []*loggedLock) (o lockOutcome, err error) {
	grantsMade, releasesMade, madeGrants, madeReleases := madeCounts(locks)
	o.madeGrants, o.madeReleases = madeGrants, madeReleases
	grantsGot, err := recordedPerLock(ctx, database, source, "grant")
	if err != nil {
		return o, err
	}
	releasesGot, err := recordedPerLock(ctx, database, source, "release")
	if err != nil {
		return o, err
	}
	expiries, err := recordedPerLock(ctx, database, source, "expire")
	if err != nil {
		return o, err
	}
	for _, n := range expiries {
		o.expiries += n
	}
	o.grantsDiffer, o.grantsPerLock = compareCounts(grantsMade, grantsGot)
	o.releasesDiffer, o.releasesPerLock = compareCounts(releasesMade, releasesGot)
	o.tokens, err = matchTokens(ctx, database, source, locks)
	return o, err
}

// problems lists how o falls short of every transition recorded once.
func (o lockOutcome) problems(kind string) []string {
	var out []string
	if o.grantsDiffer > 0 || o.releasesDiffer > 0 {
		out = append(out, fmt.Sprintf("%s: %d locks' grants differ (%s), %d locks' releases differ (%s)", kind, o.grantsDiffer, o.grantsPerLock, o.releasesDiffer, o.releasesPerLock))
	}
	if o.tokens.missing > 0 || o.tokens.unknown > 0 {
		out = append(out, kind+": "+o.tokens.summary())
	}
	if o.expiries > 0 {
		out = append(out, fmt.Sprintf("%s: %d expiries recorded, and no session ended", kind, o.expiries))
	}
	return out
}

// tokenMatch is the clients' tenures matched by token against leasewatch's
// grant and release events: a check that per-lock counts cannot make (the
// right number of grants with the wrong tokens), and how much later than the
// client the collector saw each change.
type tokenMatch struct {
	tenures, matched int
	missing          int // client tenures whose grant or release leasewatch lacks
	unknown          int // grants or releases leasewatch has under a token no client held
	example          string
	grantSkew        skew
	releaseSkew      skew
}

func (m tokenMatch) summary() string {
	return fmt.Sprintf("%d of %d (%d without their grant or release, %d events under a token no client held%s)", m.matched, m.tenures, m.missing, m.unknown, m.example)
}

// skew is the collector's event time less the client's return time, for the
// changes both saw: negative when the collector saw the change first (the
// client learns of a handover only after its watch fires and a Get returns).
type skew []time.Duration

func (s skew) describe() string {
	if len(s) == 0 {
		return "none matched"
	}
	return fmt.Sprintf("%s / %s (%d samples; collector's clock, before the commit)", s.quantile(0.50), s.quantile(0.99), len(s))
}

// quantile is the p-quantile of s (which it sorts), to 100 µs; zero when s
// is empty.
func (s skew) quantile(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))].Round(100 * time.Microsecond)
}

// matchTokens reads every grant and release leasewatch stored in database
// for source and matches them with the clients' tenures by lock and token.
func matchTokens(ctx context.Context, database, source string, locks []*loggedLock) (tokenMatch, error) {
	var m tokenMatch
	db, err := openDatabase(database)
	if err != nil {
		return m, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT l.name, e.kind, e.token, e.at FROM events e JOIN locks l ON l.id = e.lock_id
		WHERE l.source = $1 AND e.kind IN ('grant', 'release') AND e.token IS NOT NULL`, source)
	if err != nil {
		return m, fmt.Errorf("read grants and releases: %w", err)
	}
	defer rows.Close()
	type key struct {
		lock, kind string
		token      int64
	}
	recorded := make(map[key][]time.Time)
	for rows.Next() {
		var k key
		var at int64
		if err := rows.Scan(&k.lock, &k.kind, &k.token, &at); err != nil {
			return m, err
		}
		recorded[k] = append(recorded[k], time.Unix(0, at))
	}
	if err := rows.Err(); err != nil {
		return m, err
	}
	take := func(k key) (time.Time, bool) {
		ats := recorded[k]
		if len(ats) == 0 {
			return time.Time{}, false
		}
		if len(ats) == 1 {
			delete(recorded, k)
		} else {
			recorded[k] = ats[1:]
		}
		return ats[0], true
	}
	for _, l := range locks {
		l.mu.Lock()
		tenures := slices.Clone(l.tenures)
		l.mu.Unlock()
		for _, tn := range tenures {
			m.tenures++
			grant, okGrant := take(key{l.name, "grant", tn.token})
			if okGrant {
				m.grantSkew = append(m.grantSkew, grant.Sub(tn.granted))
			}
			okRelease := !tn.unlocked
			if tn.unlocked {
				var release time.Time
				if release, okRelease = take(key{l.name, "release", tn.token}); okRelease {
					m.releaseSkew = append(m.releaseSkew, release.Sub(tn.released))
				}
			}
			if okGrant && okRelease {
				m.matched++
				continue
			}
			m.missing++
			if m.example == "" {
				held := "still held"
				if tn.unlocked {
					held = "held " + tn.released.Sub(tn.granted).Round(time.Millisecond).String()
				}
				m.example = fmt.Sprintf("; e.g. %s token %d (%s), %s, grant recorded %t, release recorded %t",
					l.name, tn.token, tn.key, held, okGrant, okRelease)
			}
		}
	}
	for _, ats := range recorded {
		m.unknown += len(ats)
	}
	return m, nil
}
