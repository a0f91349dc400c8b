package audit

import "fmt"

// DefaultWriteOnlyLocks is how many locks of one source write reports may
// name before any collector has seen them granted (see WithWriteOnlyLocks).
const DefaultWriteOnlyLocks = 10_000

// WithWriteOnlyLocks bounds the locks of each source that only write
// reports have named: locks with no grant recorded. Every report may name
// any lock, and each new one is a lock row, so without a bound one ingest
// token could fill the database with rows under names no collector knows.
// A request that would pass the bound fails with EINVALID naming its lock,
// and nothing of it is recorded. n <= 0 means DefaultWriteOnlyLocks.
func WithWriteOnlyLocks(n int) RecorderOption {
	return func(r *Recorder) {
		if n <= 0 {
			n = DefaultWriteOnlyLocks
		}
		r.writeOnly.max = n
	}
}

// writeOnlyLocks are the locks the tracker has with no grant recorded, per
// source. The recording goroutine keeps it in step with the tracker.
type writeOnlyLocks struct {
	max      int
	keys     map[LockKey]bool
	bySource map[string]int
}

// reset counts the write-only locks among a restored tracker's.
func (u *writeOnlyLocks) reset(states []TrackState) {
	u.keys = make(map[LockKey]bool)
	u.bySource = make(map[string]int)
	for _, st := range states {
		u.note(st)
	}
}

// forget drops the source's locks, as Tracker.Forget does.
func (u *writeOnlyLocks) forget(source string) {
	for k := range u.keys {
		if k.Source == source {
			delete(u.keys, k)
		}
	}
	delete(u.bySource, source)
}

// update follows the locks a tracker step changed.
func (u *writeOnlyLocks) update(b Batch) {
	for _, st := range b.Locks {
		u.note(st)
	}
}

func (u *writeOnlyLocks) note(st TrackState) {
	key := st.Lock.Key()
	switch writeOnly := st.NextSeq == 0; {
	case writeOnly && !u.keys[key]:
		u.keys[key] = true
		u.bySource[key.Source]++
	case !writeOnly && u.keys[key]:
		delete(u.keys, key)
		u.bySource[key.Source]--
	}
}

// admit checks that recording writes keeps every source within the bound.
// exists reports whether the tracker already has a lock: a report for one
// adds no row.
func (u *writeOnlyLocks) admit(writes []WriteReport, exists func(LockKey) bool) error {
	var added map[LockKey]bool
	var bySource map[string]int
	for i, w := range writes {
		key := w.Key()
		if added[key] || exists(key) {
			continue
		}
		if u.bySource[key.Source]+bySource[key.Source] >= u.max {
			return Errorf(EINVALID, "%s: source %q already has %d locks that only write reports name, none of them granted; "+
				"report writes of the locks its collector sees", writeField(i, len(writes), "lock"), key.Source, u.max)
		}
		if added == nil {
			added, bySource = make(map[LockKey]bool), make(map[string]int)
		}
		added[key] = true
		bySource[key.Source]++
	}
	return nil
}

// writeField names a field of the i-th of n write reports as the ingest API
// does: "lock" for a lone report, "writes[3].lock" in an array.
func writeField(i, n int, name string) string {
	if n == 1 {
		return name
	}
	return fmt.Sprintf("writes[%d].%s", i, name)
}
