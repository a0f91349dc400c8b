package advise

import (
	"sort"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// A holder's writes are its grant and its renewals. The gaps between them
// are counted where both ends are known:
//
//   - within a tenure, from its grant (unless it was first seen already
//     held, whose grant time is unknown, or granted before the renewals are
//     complete) to its first renewal, and between its renewals;
//   - across an expiry, from the last write of a tenure that expired to the
//     grant of the next tenure when the same holder took the lock again: the
//     holder stalled past its lease and came back. A tenure that ended any
//     other way, or that another holder followed, ends no stall: a release
//     is no pause, and a crashed holder never comes back.
//
// The time since a held tenure's last renewal is left out: it has not ended.

// gapsOf returns s's gaps, all of them and by holder.
func gapsOf(s Sample) ([]gap, map[string][]gap) {
	byHolder := map[string][]gap{}
	all := make([]gap, 0, len(s.Renewals)+len(s.Tenures))
	add := func(holder string, from, to time.Time) {
		if to.Before(from) {
			return // clocks that disagree: no gap to measure
		}
		g := gap{d: to.Sub(from), end: to}
		all = append(all, g)
		byHolder[holder] = append(byHolder[holder], g)
	}
	last := make([]time.Time, len(s.Tenures)) // each tenure's last write seen
	for i, t := range s.Tenures {
		if !t.Observed && !t.GrantedAt.Before(s.RenewalsFrom) {
			last[i] = t.GrantedAt
		}
	}
	for _, r := range s.Renewals {
		i := tenureOf(s.Tenures, r)
		if i < 0 {
			continue
		}
		if !last[i].IsZero() {
			add(s.Tenures[i].Holder, last[i], r.At)
		}
		last[i] = r.At
	}
	for i := 1; i < len(s.Tenures); i++ {
		prev, next := s.Tenures[i-1], s.Tenures[i]
		if prev.End != audit.EndExpired || next.Holder != prev.Holder || next.Observed {
			continue
		}
		if w := lastWrite(prev); !w.IsZero() && next.GrantedAt.After(w) {
			add(next.Holder, w, next.GrantedAt)
		}
	}
	return all, byHolder
}

// tenureOf returns the index of r's tenure in tenures (grant order): by its
// Seq, else the last granted at or before it; -1 when none is listed.
func tenureOf(tenures []audit.Tenure, r Renewal) int {
	if r.Seq != 0 {
		i := sort.Search(len(tenures), func(i int) bool { return tenures[i].Seq >= r.Seq })
		if i < len(tenures) && tenures[i].Seq == r.Seq {
			return i
		}
		return -1
	}
	return sort.Search(len(tenures), func(i int) bool { return tenures[i].GrantedAt.After(r.At) }) - 1
}

// lastWrite is when the holder of ended tenure t last wrote: its last
// renewal, else its grant; zero when neither is known.
func lastWrite(t audit.Tenure) time.Time {
	switch {
	case !t.LastRenewedAt.IsZero():
		return t.LastRenewedAt
	case !t.Observed:
		return t.GrantedAt
	}
	return time.Time{}
}
