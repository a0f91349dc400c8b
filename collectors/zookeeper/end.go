package zookeeper

import (
	"context"
	"slices"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// verdict is how a holding ended, as far as the collector can tell.
type verdict struct {
	kind     audit.EventKind // EventRelease or EventExpire
	inferred bool
	reason   string
}

// evidence is what the collector knows of an ended holding's session right
// after its node was deleted.
type evidence struct {
	ownsOther bool // the session still owns another node the collector reads
	probing   bool // ProbeSessions is on
	// From the probe after the delete: the session is connected to a server,
	// and every server answered.
	connected, complete bool
	// From the probe before it, while the node existed: the session was an
	// owner then, every server answered, and it was connected to one.
	probedBefore, connectedBefore bool
	// silent: by the delete, the server had answered the connected session
	// nothing for more than two thirds of its timeout (lresp at that probe,
	// plus the time since), longer than a live client goes between pings
	// (a third of it): its connection stayed open while its client was
	// paused.
	silent bool
}

// classify judges why an owner node was deleted. A release deletes one
// node and the session lives on; the end of a session (closed by its
// client, or expired by the server) deletes all its ephemeral nodes in one
// transaction, and the two look alike in the tree. An expiry needs the
// session to have been silent for its whole timeout, so a session that had
// no connection to any server before the delete and is gone after it
// expired; one that was connected shortly before was most likely closed.
func classify(e evidence) verdict {
	switch {
	case e.ownsOther:
		return verdict{kind: audit.EventRelease, reason: "node deleted; its session still owns other watched nodes: released"}
	case !e.probing:
		return verdict{kind: audit.EventRelease, inferred: true, reason: "node deleted: released, or its session closed or expired " +
			"(telling them apart needs probe_sessions)"}
	case e.connected:
		return verdict{kind: audit.EventRelease, reason: "node deleted; its session is still connected (cons): released"}
	case !e.complete:
		return verdict{kind: audit.EventRelease, inferred: true, reason: "node deleted; a server did not answer cons, so its session's fate is unknown"}
	case e.probedBefore && !e.connectedBefore:
		return verdict{kind: audit.EventExpire, inferred: true, reason: "node deleted with its session, which was connected to no server " +
			"before the delete: expired"}
	case e.probedBefore && e.silent:
		return verdict{kind: audit.EventExpire, inferred: true, reason: "node deleted with its session, whose connection stayed open " +
			"but which the server had answered nothing for over two thirds of its timeout, longer than a live client goes between pings (cons lresp): expired"}
	case e.probedBefore:
		return verdict{kind: audit.EventRelease, inferred: true, reason: "node deleted with its session, which was connected and answered " +
			"within its timeout shortly before: closed by its client"}
	}
	return verdict{kind: audit.EventRelease, inferred: true, reason: "node deleted with its session, not probed before: closed or expired"}
}

// end describes the end of h's holding, judged on the read t after it.
func (r *run) end(h handover, t *tree, now time.Time) audit.Observation {
	n := *h.ended
	e := evidence{ownsOther: ownsOther(t, n), probing: r.c.cfg.ProbeSessions}
	if e.probing {
		_, e.connected = r.probed.listed[n.owner]
		e.complete = r.probed.complete
		if b := r.vouched; b.complete && b.owners[n.owner] {
			cs, ok := b.listed[n.owner]
			e.probedBefore, e.connectedBefore = true, ok
			e.silent = ok && cs.timeout > 0 && cs.idle+now.Sub(b.at) > cs.timeout*2/3
		}
	}
	v := classify(e)
	if n.owner == 0 {
		v = verdict{kind: audit.EventRelease, reason: "persistent node deleted"}
	}
	ob := audit.Observation{
		Lock:     audit.LockKey{Source: r.c.cfg.Name, Name: h.lock},
		Kind:     v.kind,
		At:       now,
		Holder:   n.holder(),
		Token:    audit.Int64(n.czxid),
		Position: zxidHex(h.pzxid),
		Inferred: v.inferred,
		Detail:   map[string]any{"node": n.name, "session": zxidHex(n.owner), "reason": v.reason},
	}
	if h.pzxid == 0 {
		ob.Detail["directory_gone"] = true
	}
	collectors.AsText(&ob)
	return ob
}

// ownsOther reports whether n's session owns another node in t.
func ownsOther(t *tree, n node) bool {
	return n.owner != 0 && slices.ContainsFunc(t.ownedBy(n.owner), func(czxid int64) bool { return czxid != n.czxid })
}

// probeNeeded reports whether recording hs takes a probe of the servers'
// sessions: an end whose session owns no other node needs one to tell a
// release from an expiry, and a grant to a session no probe has listed
// needs one for its lease's duration (a session's timeout never changes).
func (r *run) probeNeeded(hs []handover, t *tree) bool {
	for _, h := range hs {
		if h.ended != nil && h.ended.owner != 0 && !ownsOther(t, *h.ended) {
			return true
		}
		if h.granted != nil && h.granted.owner != 0 {
			if _, ok := r.probed.listed[h.granted.owner]; !ok {
				return true
			}
		}
	}
	return false
}

// probe asks the servers for the sessions connected now and notes which
// owners t has.
func (r *run) probe(t *tree) sessions {
	s := r.c.probe(r.clocks)
	s.owners = make(map[int64]bool)
	for _, d := range t.dirs {
		if o := d.owner(); o != nil {
			s.owners[o.owner] = true
		}
	}
	return s
}

// poll checks every watched directory's Stat: a child list whose pzxid moved
// without its watch firing (a watch lost on the way) is read again. With
// ProbeSessions it first probes the owner sessions while any lock is held:
// a probe followed by a check that finds every directory unchanged was
// taken while every owner node still existed, so it is evidence of what an
// owner's session was doing before its node went (vouched).
func (r *run) poll(ctx context.Context) error {
	if !r.conn.seeing() {
		return nil
	}
	probing := r.c.cfg.ProbeSessions && len(r.held(r.tree)) > 0
	var s sessions
	if probing {
		s = r.probe(r.tree)
	}
	watched := r.tree.watched()
	changed := make([]bool, len(watched))
	err := r.each(ctx, len(watched), func(i int) error {
		ok, st, err := r.conn.zk.Exists(watched[i])
		d := r.tree.dirs[watched[i]]
		changed[i] = err == nil && (ok != (d != nil) || d != nil && st.Pzxid != d.pzxid)
		return err
	})
	if err != nil {
		return err
	}
	var stale []string
	for i, p := range watched {
		if changed[i] {
			stale = append(stale, p)
		}
	}
	if len(stale) > 0 {
		// Usually a watch whose event is on its way; else one that was lost.
		r.log.Debug("directories changed since their last read; reading again", "paths", len(stale))
		return r.reread(ctx, stale)
	}
	if probing {
		r.probed, r.vouched = s, s
	}
	r.seenAt = r.c.now()
	return nil
}
