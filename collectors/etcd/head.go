package etcd

import (
	"sort"
	"time"
)

// maxHeadSamples bounds headTimes; past it the oldest half is dropped, which
// can only make a wait look shorter, never longer.
const maxHeadSamples = 4096

// headTimes remembers when the collector first learned that etcd's head had
// reached a revision. Every etcd response's header carries the head revision
// as of its answer, and the collector reads leases every poll interval, so a
// change that the watch delivers long after a read already showed its
// revision waited in etcd or on the way (a slow watcher, a backlog in the
// stream) for at least the difference: lag the receipt time does not show.
//
// The samples form a staircase: revisions and times both ascending, as a
// sample older than another with a revision at least as high makes that one
// useless.
type headTimes struct {
	revs []int64
	ats  []time.Time
}

// add records that the head was at rev or later by at.
func (h *headTimes) add(rev int64, at time.Time) {
	if rev <= 0 || at.IsZero() {
		return
	}
	n := len(h.revs)
	if n == 0 || rev > h.revs[n-1] && at.After(h.ats[n-1]) {
		h.revs, h.ats = append(h.revs, rev), append(h.ats, at) // the usual case: both move on
		h.trim()
		return
	}
	i := sort.Search(n, func(i int) bool { return h.revs[i] >= rev })
	if i < n && !h.ats[i].After(at) {
		return // an earlier sample already shows rev reached
	}
	// Samples with a lower revision seen no earlier than at, and one at rev
	// itself, tell nothing this one does not.
	j := i
	for j > 0 && !h.ats[j-1].Before(at) {
		j--
	}
	k := i
	if k < len(h.revs) && h.revs[k] == rev {
		k++
	}
	h.revs = append(h.revs[:j], append([]int64{rev}, h.revs[k:]...)...)
	h.ats = append(h.ats[:j], append([]time.Time{at}, h.ats[k:]...)...)
	h.trim()
}

func (h *headTimes) trim() {
	if len(h.revs) > maxHeadSamples {
		n := len(h.revs) / 2
		h.revs, h.ats = append([]int64(nil), h.revs[n:]...), append([]time.Time(nil), h.ats[n:]...)
	}
}

// reached returns the earliest time a sample showed the head at rev or later.
func (h *headTimes) reached(rev int64) (time.Time, bool) {
	i := sort.Search(len(h.revs), func(i int) bool { return h.revs[i] >= rev })
	if i == len(h.revs) {
		return time.Time{}, false
	}
	return h.ats[i], true
}

// forget drops the samples at or below rev: every change up to it is handled.
func (h *headTimes) forget(rev int64) {
	i := sort.Search(len(h.revs), func(i int) bool { return h.revs[i] > rev })
	h.revs, h.ats = h.revs[i:], h.ats[i:]
}

// since returns when the change at rev, received at, is known to have
// happened: at, or earlier if a sample showed the head past rev before.
func (h *headTimes) since(rev int64, at time.Time) time.Time {
	if t, ok := h.reached(rev); ok && t.Before(at) {
		return t
	}
	return at
}
