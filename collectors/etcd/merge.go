package etcd

import (
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// merger joins the watches of several prefixes into one revision order. etcd
// orders events within one watch only, and a watch that has nothing to say
// says nothing, so the merger releases a revision once every watch has shown
// it is past it: by an event at or after it, or a progress notification.
type merger struct {
	queues   [][]received
	progress []int64 // per watch: every event up to here has arrived
}

// received is a watch event and when the collector received it.
type received struct {
	ev *clientv3.Event
	at time.Time
}

// step is the events of one revision: one atomic change.
type step struct {
	rev    int64
	events []*clientv3.Event
	at     time.Time // when the collector received the first of them
}

// newMerger returns a merger for n watches that all start after revision rev.
func newMerger(n int, rev int64) *merger {
	m := &merger{queues: make([][]received, n), progress: make([]int64, n)}
	for i := range m.progress {
		m.progress[i] = rev
	}
	return m
}

// add takes one response of watch i, received at.
func (m *merger) add(i int, wr clientv3.WatchResponse, at time.Time) {
	if wr.IsProgressNotify() {
		m.progress[i] = max(m.progress[i], wr.Header.Revision)
		return
	}
	if n := len(wr.Events); n > 0 {
		for _, ev := range wr.Events {
			m.queues[i] = append(m.queues[i], received{ev: ev, at: at})
		}
		m.progress[i] = max(m.progress[i], wr.Events[n-1].Kv.ModRevision)
	}
}

// horizon is the revision every watch has reached.
func (m *merger) horizon() int64 {
	h := m.progress[0]
	for _, p := range m.progress[1:] {
		h = min(h, p)
	}
	return h
}

// take removes the events up to the horizon and returns them grouped by
// revision in order, with the horizon. Events at or before after are
// dropped: they are already recorded.
func (m *merger) take(after int64) ([]step, int64) {
	h := m.horizon()
	var evs []received
	for i, q := range m.queues {
		n := 0
		for n < len(q) && q[n].ev.Kv.ModRevision <= h {
			n++
		}
		for _, r := range q[:n] {
			if r.ev.Kv.ModRevision > after {
				evs = append(evs, r)
			}
		}
		m.queues[i] = q[n:]
	}
	// Each queue is in order already; a stable sort keeps a revision's events
	// in the order the watch gave them.
	sort.SliceStable(evs, func(a, b int) bool { return evs[a].ev.Kv.ModRevision < evs[b].ev.Kv.ModRevision })
	var steps []step
	for _, r := range evs {
		if n := len(steps); n > 0 && steps[n-1].rev == r.ev.Kv.ModRevision {
			s := &steps[n-1]
			s.events = append(s.events, r.ev)
			if r.at.Before(s.at) {
				s.at = r.at
			}
			continue
		}
		steps = append(steps, step{rev: r.ev.Kv.ModRevision, events: []*clientv3.Event{r.ev}, at: r.at})
	}
	return steps, h
}

// stalled reports whether events wait for another watch to catch up.
func (m *merger) stalled() bool {
	for _, q := range m.queues {
		if len(q) > 0 {
			return true
		}
	}
	return false
}
