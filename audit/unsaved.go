package audit

import "time"

// unsavedRenewals are the renewals newer than the lock and tenure rows, one
// per lock (see Recorder). Every lock of a large source can have one between
// two syncs, so each is kept packed: 40 bytes besides its key, against 104
// for a Renewal (48 while the heartbeat flag took a field of its own).
type unsavedRenewals map[LockKey]packedRenewal

type packedRenewal struct {
	// seqFlag is the tenure's seq times two, plus one for a renewal of a
	// heartbeat-class lock, which is synced less often.
	seqFlag, renewals    int64
	renewedAt, expiresAt int64 // as Nanos encodes them
	duration             time.Duration
}

func (p packedRenewal) seq() int64      { return p.seqFlag >> 1 }
func (p packedRenewal) heartbeat() bool { return p.seqFlag&1 == 1 }

// put keeps rn, of a heartbeat-class lock if heartbeat (false when not
// known: such a renewal is synced with the other locks').
func (m unsavedRenewals) put(rn Renewal, heartbeat bool) {
	flag := int64(0)
	if heartbeat {
		flag = 1
	}
	m[rn.Lock] = packedRenewal{seqFlag: rn.Seq<<1 | flag, renewals: rn.Renewals, renewedAt: Nanos(rn.RenewedAt),
		expiresAt: Nanos(rn.ExpiresAt), duration: rn.LeaseDuration}
}

func (m unsavedRenewals) get(key LockKey) (Renewal, bool) {
	p, ok := m[key]
	if !ok {
		return Renewal{}, false
	}
	return Renewal{Lock: key, Seq: p.seq(), Renewals: p.renewals, RenewedAt: TimeOf(p.renewedAt),
		ExpiresAt: TimeOf(p.expiresAt), LeaseDuration: p.duration}, true
}

// forget drops the source's renewals and returns how many there were.
func (m unsavedRenewals) forget(source string) int {
	n := 0
	for k := range m {
		if k.Source == source {
			delete(m, k)
			n++
		}
	}
	return n
}
