package postgres

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// Lock modes of advisory rows: the plain functions take ExclusiveLock, the
// _shared ones ShareLock.
const (
	modeExclusive = "ExclusiveLock"
	modeShared    = "ShareLock"
)

// Levels of an advisory hold, in the detail "level".
const (
	levelSession     = "session"     // seen held outside a transaction, or released inside the one it was seen in
	levelTransaction = "transaction" // gone with the transaction it was seen in, never seen outside one
	levelUnknown     = "unknown"
)

// session is one server process as pg_stat_activity shows it. pid and
// started together name it: pids are reused.
type session struct {
	pid     int32 // 0: a prepared transaction holds the lock
	started time.Time
	app     string
	addr    string // client_addr; "" for a Unix socket, or when not visible
	port    int32  // client_port; -1 for a Unix socket
}

// sessionID names one session.
type sessionID struct {
	pid     int32
	started int64 // Unix nanoseconds of backend_start; 0 when not visible
}

func (s session) id() sessionID {
	var at int64
	if !s.started.IsZero() {
		at = s.started.UnixNano()
	}
	return sessionID{pid: s.pid, started: at}
}

// holder names the session as a lock's holder: application name, pid,
// client and backend start, each where the server shows it.
func (s session) holder(vxid string) string {
	if s.pid == 0 {
		return "prepared transaction " + vxid
	}
	var b strings.Builder
	if s.app != "" {
		b.WriteString(s.app)
		b.WriteByte(' ')
	}
	fmt.Fprintf(&b, "pid=%d", s.pid)
	switch {
	case s.addr != "":
		b.WriteString(" client=" + net.JoinHostPort(s.addr, strconv.Itoa(int(s.port))))
	case s.port == -1:
		b.WriteString(" client=local")
	}
	if !s.started.IsZero() {
		b.WriteString(" started=" + s.started.UTC().Format(time.RFC3339Nano))
	}
	return b.String()
}

// row is one advisory row of pg_locks with its process's session.
type row struct {
	db        string
	classid   uint32
	objid     uint32
	objsubid  int16 // 1: one bigint key; 2: two int keys
	mode      string
	granted   bool
	waitStart time.Time // zero while granted, or just after a wait began
	vxid      string    // the holder's or waiter's current transaction: "backend/0" outside one
	s         session
}

// key is the lock's key as the advisory functions took it, signed: the
// bigint reassembled from its halves, or the two ints.
func (r row) key() string {
	if r.objsubid == 2 {
		return strconv.Itoa(int(int32(r.classid))) + "," + strconv.Itoa(int(int32(r.objid)))
	}
	return strconv.FormatInt(int64(r.classid)<<32|int64(r.objid), 10)
}

// lock is the lock's name: database and key.
func (r row) lock() string { return r.db + "/" + r.key() }

// idle reports whether the row's process was in no transaction.
func idle(vxid string) bool { return strings.HasSuffix(vxid, "/0") }

// hold is a lock's exclusive holder as polls saw it.
type hold struct {
	db        string
	lock      string
	s         session
	vxid      string // the transaction it was last seen held in
	outside   bool   // seen held outside a transaction: a session lock
	firstSeen time.Time
}

// waiter is a session waiting for a lock.
type waiter struct {
	s     session
	mode  string
	since time.Time // waitstart; zero when the server has not set it yet
}

// state is what one poll saw of the watched databases' advisory locks.
type state struct {
	at         time.Time // the server's clock at the poll
	postmaster time.Time // pg_postmaster_start_time
	holds      map[string]*hold
	waiters    map[string][]waiter
	shared     map[string]int   // shared holds by lock, left out of the lock model
	abnormal   map[string]int64 // abnormal session ends by database (pg_stat_database)
}

// newState folds a poll's rows into who holds and who waits for each lock.
// What prev saw of a hold still held by the same session carries over.
func newState(at, postmaster time.Time, rows []row, prev *state) *state {
	st := &state{at: at, postmaster: postmaster, holds: map[string]*hold{},
		waiters: map[string][]waiter{}, shared: map[string]int{}, abnormal: map[string]int64{}}
	for _, r := range rows {
		name := r.lock()
		switch {
		case !r.granted:
			st.waiters[name] = append(st.waiters[name], waiter{s: r.s, mode: r.mode, since: r.waitStart})
		case r.mode == modeShared:
			st.shared[name]++
		case r.mode == modeExclusive:
			h := &hold{db: r.db, lock: name, s: r.s, vxid: r.vxid, firstSeen: at}
			if was := prev.holdOf(name); was != nil && stillHeld(was.s, r.s) {
				// The holder as granted, though it may have set another
				// application name since.
				h.s, h.outside, h.firstSeen = was.s, was.outside, was.firstSeen
			}
			h.outside = h.outside || idle(r.vxid)
			st.holds[name] = h
		}
	}
	return st
}

// stillHeld reports whether a lock held by was is held by the same session
// in a row of is. A session whose process is exiting leaves
// pg_stat_activity before its locks leave pg_locks: a row without its
// session (no backend start) of the same pid is the same holder.
func stillHeld(was, is session) bool {
	return was.pid == is.pid && (is.started.IsZero() || was.started.Equal(is.started))
}

func (st *state) holdOf(lock string) *hold {
	if st == nil {
		return nil
	}
	return st.holds[lock]
}

// handovers returns, sorted by lock, the holds of prev that cur no longer
// shows (ended) and those of cur that prev did not show (granted).
func handovers(prev, cur *state) (ended, granted []*hold) {
	for name, h := range prev.holdsOrNil() {
		if c := cur.holds[name]; c == nil || c.s.id() != h.s.id() {
			ended = append(ended, h)
		}
	}
	for name, h := range cur.holds {
		if p := prev.holdOf(name); p == nil || p.s.id() != h.s.id() {
			granted = append(granted, h)
		}
	}
	byLock := func(a, b *hold) int { return strings.Compare(a.lock, b.lock) }
	slices.SortFunc(ended, byLock)
	slices.SortFunc(granted, byLock)
	return ended, granted
}

func (st *state) holdsOrNil() map[string]*hold {
	if st == nil {
		return nil
	}
	return st.holds
}

// fate is what the server shows, right after a poll that found a hold
// gone, of the session that held it.
type fate struct {
	alive bool   // the same session (pid and backend start) is still there
	vxid  string // its transaction now; "" in none
	// For a session gone: whether its database's abnormal session ends
	// were counted at the poll before (counted), and how many more there
	// are now (abnormal). None more: it was closed by its client.
	counted  bool
	abnormal int64
}

// ending judges how h ended from its session's fate: released if the
// session lives on, expired if it is gone, and at which level it was held.
func ending(h *hold, f fate) (audit.EventKind, string, string) {
	level := levelUnknown
	switch {
	case h.outside:
		level = levelSession
	case f.alive && f.vxid != "" && f.vxid == h.vxid:
		level = levelSession // a transaction lock cannot be released before its transaction ends
	case f.alive && h.vxid != "":
		level = levelTransaction
	}
	switch {
	case h.s.pid == 0:
		return audit.EventRelease, level, "a prepared transaction's lock is gone: committed or rolled back"
	case f.alive:
		return audit.EventRelease, level, "the row left pg_locks while its session lives on: released"
	case f.counted && f.abnormal == 0:
		return audit.EventRelease, level, "the row left pg_locks with its session, which its client closed " +
			"(no session of the database ended abnormally since the poll before, pg_stat_database): released"
	case f.counted:
		return audit.EventExpire, level, fmt.Sprintf("the row left pg_locks with its session, which ended abnormally "+
			"(%d of the database's sessions were terminated, lost their client or failed since the poll before, pg_stat_database)", f.abnormal)
	}
	return audit.EventExpire, level, "the row left pg_locks with its session, which exited or was terminated"
}

// observer turns what polls saw into observations of one source.
type observer struct {
	source string
}

func (o observer) key(lock string) audit.LockKey { return audit.LockKey{Source: o.source, Name: lock} }

// grant describes h's grant as cur saw it, with the queue behind it and,
// when prev saw its session waiting for the lock, how long it waited.
func (o observer) grant(h *hold, prev, cur *state, at time.Time, inferred bool) audit.Observation {
	kind := audit.EventGrant
	if prev == nil && !inferred {
		kind = audit.EventObserved
	}
	ob := audit.Observation{
		Lock: o.key(h.lock), Kind: kind, At: at, Holder: h.s.holder(h.vxid), Inferred: inferred,
		Detail: map[string]any{"pid": h.s.pid, "level": levelUnknown, "waiters": len(cur.waiters[h.lock])},
	}
	if h.outside {
		ob.Detail["level"] = levelSession
	}
	if n := cur.shared[h.lock]; n > 0 {
		ob.Detail["shared_holders"] = n
	}
	if prev != nil {
		for _, w := range prev.waiters[h.lock] {
			if w.s.id() == h.s.id() && !w.since.IsZero() {
				// Granted between the two polls: it waited at least until
				// the first and at most until the second.
				ob.Detail["waited_ms_min"] = max(prev.at.Sub(w.since), 0).Milliseconds()
				ob.Detail["waited_ms_max"] = max(cur.at.Sub(w.since), 0).Milliseconds()
			}
		}
	}
	collectors.AsText(&ob)
	return ob
}

// end describes the end of h, last seen in prev, given its session's fate.
func (o observer) end(h *hold, prev *state, f fate, at time.Time, inferred bool) audit.Observation {
	kind, level, reason := ending(h, f)
	ob := audit.Observation{
		Lock: o.key(h.lock), Kind: kind, At: at, Holder: h.s.holder(h.vxid), Inferred: inferred,
		Detail: map[string]any{"pid": h.s.pid, "level": level, "reason": reason, "waiters": len(prev.waiters[h.lock])},
	}
	collectors.AsText(&ob)
	return ob
}

// restarted describes the end of h by a server restart, which ends every
// session.
func (o observer) restarted(h *hold, at time.Time) audit.Observation {
	level := levelUnknown
	if h.outside {
		level = levelSession
	}
	ob := audit.Observation{
		Lock: o.key(h.lock), Kind: audit.EventExpire, At: at, Holder: h.s.holder(h.vxid), Inferred: true,
		Detail: map[string]any{"pid": h.s.pid, "level": level, "reason": "the server restarted, which ends every session"},
	}
	collectors.AsText(&ob)
	return ob
}
