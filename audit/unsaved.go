package audit

import "time"

// unsavedRenewals are the renewals newer than the lock and tenure rows, one
// per lock (see Recorder). Every lock of a large source can have one between
// two syncs, so each is kept packed: 40 bytes besides its key, against 104
// for a Renewal.
type unsavedRenewals map[LockKey]packedRenewal

type packedRenewal struct {
	seq, renewals        int64
	renewedAt, expiresAt int64 // Unix nanoseconds; 0 for the zero time
	duration             time.Duration
}

func (m unsavedRenewals) put(rn Renewal) {
	m[rn.Lock] = packedRenewal{seq: rn.Seq, renewals: rn.Renewals, renewedAt: packTime(rn.RenewedAt),
		expiresAt: packTime(rn.ExpiresAt), duration: rn.LeaseDuration}
}

func (m unsavedRenewals) get(key LockKey) (Renewal, bool) {
	p, ok := m[key]
	if !ok {
		return Renewal{}, false
	}
	return Renewal{Lock: key, Seq: p.seq, Renewals: p.renewals, RenewedAt: unpackTime(p.renewedAt),
		ExpiresAt: unpackTime(p.expiresAt), LeaseDuration: p.duration}, true
}

func packTime(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func unpackTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
