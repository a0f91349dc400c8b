package etcd

import (
	"strconv"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// ttlSlack absorbs LeaseTimeToLive's whole-second resolution: the server
// truncates, so a lease reported with TTL n expires within [n, n+1) seconds.
const ttlSlack = time.Second

// ttlReading is one LeaseTimeToLive answer and when the collector got it.
type ttlReading struct {
	ttl     int64 // remaining seconds; -1 when the lease does not exist
	granted int64 // GrantedTTL seconds
	term    uint64
	rev     int64 // etcd's head revision as of the answer
	at      time.Time
}

// leaseInfo is what the collector knows of an owner's lease from its polls.
type leaseInfo struct {
	granted int64     // GrantedTTL seconds; 0 when never seen alive
	ttl     int64     // remaining seconds at the last poll that found it alive
	polled  time.Time // when that poll answered; zero when never seen alive
	term    uint64    // raft term of that poll
	gone    bool      // a later poll found the lease gone
}

func (li leaseInfo) known() bool { return !li.polled.IsZero() }

func (li leaseInfo) duration() time.Duration {
	return time.Duration(li.granted) * time.Second
}

// predictedExpiry is the earliest the lease could expire given the last poll,
// unless it was renewed since.
func (li leaseInfo) predictedExpiry() time.Time {
	return li.polled.Add(time.Duration(li.ttl) * time.Second)
}

// lastRenewal estimates when the lease was last renewed, as of the last poll.
func (li leaseInfo) lastRenewal() time.Time {
	return li.polled.Add(-time.Duration(li.granted-li.ttl) * time.Second)
}

// renewedAt estimates when the lease was last renewed from a reading: a
// keepalive resets it to GrantedTTL, so it happened granted-ttl seconds ago.
func (r ttlReading) renewedAt() time.Time {
	return r.at.Add(-time.Duration(r.granted-r.ttl) * time.Second)
}

// fold adds a poll to li. It reports a renewal, and its estimated time, when
// the lease has more time left than the last poll allows without a
// keepalive. Keepalives never reach the watch stream, so this is the only way
// to see them. A raft term change between polls means a new leader's lessor
// refreshed every lease (Promote), which is not the holder renewing.
func (li leaseInfo) fold(r ttlReading) (next leaseInfo, renewed time.Time, ok bool) {
	if r.ttl < 0 {
		li.gone = true
		return li, time.Time{}, false
	}
	if li.known() && !r.at.After(li.polled) {
		return li, time.Time{}, false // an older answer than the one already folded in
	}
	next = leaseInfo{granted: r.granted, ttl: r.ttl, polled: r.at, term: r.term}
	if !li.known() || li.gone || r.term != li.term {
		return next, time.Time{}, false
	}
	expected := float64(li.ttl) - r.at.Sub(li.polled).Seconds()
	if float64(r.ttl) <= expected+ttlSlack.Seconds() {
		return next, time.Time{}, false
	}
	// The renewal came after the previous poll (else that poll would have
	// shown it) and no later than this one.
	at := r.renewedAt()
	if !at.After(li.polled) {
		at = li.polled.Add(time.Nanosecond)
	}
	if at.After(r.at) {
		at = r.at
	}
	return next, at, true
}

// endVerdict is how a holding ended, as far as the collector can tell.
type endVerdict struct {
	kind     audit.EventKind // EventRelease or EventExpire
	inferred bool
	// unjudged: the collector cannot tell, and leaves it to the tracker
	// (audit.Observation.Unjudged).
	unjudged bool
	detail   map[string]any
}

// classifyEnd judges why an owner key was deleted at now, given the lease's
// state right after the deletion (ttl from LeaseTimeToLive; -1: gone) and
// what the polls knew of it before. Unlock and Resign delete only the key, so
// the lease lives on: a release. Session.Close revokes the lease, and expiry
// revokes it too: both delete every key of the lease at one revision and look
// alike in the watch stream, so the collector compares the deletion time with
// the expiry its polls predicted. A lease it never read alive (gone before a
// resume, a takeover or a restart read it) it cannot judge: the tracker,
// which knows the tenure's last expiry from before, does.
func classifyEnd(lease int64, li leaseInfo, ttl int64, now time.Time) endVerdict {
	switch {
	case lease == 0:
		return endVerdict{kind: audit.EventRelease, detail: map[string]any{"reason": "key deleted; it had no lease"}}
	case ttl >= 0:
		return endVerdict{kind: audit.EventRelease, detail: map[string]any{"reason": "key deleted; lease still alive"}}
	case !li.known():
		return endVerdict{kind: audit.EventRelease, inferred: true, unjudged: true, detail: map[string]any{
			"reason": "lease gone before the collector could read its TTL: revoked or expired",
		}}
	}
	predicted := li.predictedExpiry()
	detail := map[string]any{"predicted_expiry": predicted.UTC().Format(time.RFC3339Nano)}
	if !now.Before(predicted.Add(-ttlSlack)) {
		detail["reason"] = "lease expired: not renewed in time"
		return endVerdict{kind: audit.EventExpire, detail: detail}
	}
	detail["reason"] = "lease revoked before it could expire"
	detail["revoked"] = true
	return endVerdict{kind: audit.EventRelease, detail: detail}
}

// releasedKeyOnly is the verdict on an owner key deleted while its lease
// still held other keys once the revision was applied: a revoke or expiry
// deletes every key of the lease at one revision, so this was Unlock or
// Resign, whenever the collector gets to it and whatever became of the lease
// since.
func releasedKeyOnly() endVerdict {
	return endVerdict{kind: audit.EventRelease, detail: map[string]any{"reason": "key deleted; its lease kept other keys"}}
}

func leaseHex(lease int64) string { return strconv.FormatInt(lease, 16) }
