package zookeeper

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// snapshot records every held lock of t in one Snapshot input: as observed
// on a first start, or, after a blind window, as an inferred grant (the
// tracker keeps a tenure whose holder and token did not change, and ends
// the ones that are gone).
func (r *run) snapshot(ctx context.Context, t *tree, blind *audit.Blind) error {
	r.keepHolders(t)
	if r.c.cfg.ProbeSessions {
		r.probed = r.probe(t)
	}
	now := r.c.now()
	kind := audit.EventObserved
	if blind != nil {
		kind, blind.To = audit.EventGrant, now
	}
	var obs []audit.Observation
	for _, p := range r.held(t) {
		d := t.dirs[p]
		ob := r.grant(d, *d.owner(), now)
		ob.Kind, ob.Inferred = kind, blind != nil
		obs = append(obs, ob)
	}
	in := r.input(now, obs, max(r.cursor, t.zxid))
	in.Blind, in.Snapshot = blind, true
	if err := r.sink.Record(ctx, in); err != nil {
		return fmt.Errorf("record snapshot at zxid 0x%x: %w", t.zxid, err)
	}
	r.tree, r.cursor, r.seenAt = t, max(r.cursor, t.zxid), now
	r.log.Info("snapshot recorded", "zxid", t.zxid, "held", len(obs), "blind", blind != nil)
	return nil
}

// keepHolders gives a lock still held through the same node as in the
// previous read the holder string it had: its data may have changed since
// the grant (Curator's revocation writes into it), the tenure's holder did
// not.
func (r *run) keepHolders(t *tree) {
	for p, d := range t.dirs {
		was, is := r.tree.dirs[p].owner(), d.owner()
		if was != nil && is != nil && was.czxid == is.czxid {
			is.data = was.data
		}
	}
}

// reread reads the paths whose watches fired and records how their locks
// changed hands.
func (r *run) reread(ctx context.Context, paths []string) error {
	t := r.tree.clone()
	var dirs []string
	// Paths come sorted, a configured path before its directories: one
	// its read found gone is not read again.
	for _, p := range paths {
		if slices.Contains(r.roots, p) {
			if err := r.readRoot(ctx, t, p); err != nil {
				return fmt.Errorf("read %s: %w", p, err)
			}
		} else if _, ok := t.dirs[p]; ok {
			dirs = append(dirs, p)
		}
	}
	if err := r.readDirs(ctx, t, dirs); err != nil {
		return err
	}
	t.settle()
	return r.record(ctx, t)
}

// record compares t with the previous read and records the handovers, or
// only the new cursor when no lock changed hands, without waiting for the
// sink (submit.go).
func (r *run) record(ctx context.Context, t *tree) error {
	r.keepHolders(t)
	var hs []handover
	for _, p := range changedKeys(r.tree.dirs, t.dirs) {
		before, after := r.tree.dirs[p], t.dirs[p]
		if after != nil && after.owner() == nil {
			after.unseen = unseenSince(before, after)
		}
		if h, ok := diff(before, after); ok {
			hs = append(hs, h)
		}
	}
	cursor := max(r.cursor, t.zxid)
	if len(hs) == 0 && cursor == r.cursor {
		r.tree, r.seenAt = t, r.c.now()
		return nil
	}
	if r.c.cfg.ProbeSessions && r.probeNeeded(hs, t) {
		r.probed = r.probe(t)
	}
	now := r.c.now()
	var obs []audit.Observation
	for _, h := range hs {
		if h.ended != nil {
			obs = append(obs, r.end(h, t, now))
		}
		if h.granted != nil {
			ob := r.grant(t.dirs[r.fullPath(h.lock)], *h.granted, now)
			if h.unseen > 0 {
				// Contenders created and deleted between two reads: a
				// grant too short to see may be among them.
				ob.Detail["unseen_contenders"] = h.unseen
			}
			obs = append(obs, ob)
		}
	}
	r.queue(ctx, now, obs, cursor)
	r.tree, r.cursor, r.seenAt = t, cursor, now
	return nil
}

// changedKeys returns, sorted, the paths whose reads differ between a and
// b. A read replaces a directory's and never modifies it, so an unchanged
// directory is the same read in both.
func changedKeys(a, b map[string]*dir) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func (r *run) input(now time.Time, obs []audit.Observation, cursor int64) audit.Input {
	return audit.Input{
		Source: r.c.cfg.Name, Kind: Backend.Kind, At: now,
		Observations: obs, Cursor: strconv.FormatInt(cursor, 10),
	}
}

// queueShown is how many waiters a grant names, in queue order; "waiters"
// counts them all.
const queueShown = 16

// grant describes n's hold of the lock of directory d, and the queue
// behind it as the read that saw the grant found it. Its strings are made
// text by collectors.AsText.
func (r *run) grant(d *dir, n node, at time.Time) audit.Observation {
	ob := audit.Observation{
		Lock:     audit.LockKey{Source: r.c.cfg.Name, Name: d.path},
		Kind:     audit.EventGrant,
		At:       at,
		Holder:   n.holder(),
		Token:    audit.Int64(n.czxid),
		Position: zxidHex(d.pzxid),
		Detail: map[string]any{
			"node": n.name, "session": zxidHex(n.owner), "sequence": n.seq, "waiters": len(d.nodes) - 1,
		},
	}
	if waiting := d.nodes[1:]; len(waiting) > 0 {
		queue := make([]string, 0, min(len(waiting), queueShown))
		for _, w := range waiting[:min(len(waiting), queueShown)] {
			queue = append(queue, w.holder())
		}
		ob.Detail["queue"] = queue
	}
	if n.reader {
		ob.Detail["readers"] = d.sharing() // kazoo ReadLock: readers holding together, this one included
	}
	if n.owner == 0 {
		ob.Detail["persistent"] = true // no session: no one's release or expiry ends it
	}
	if cs, ok := r.probed.listed[n.owner]; ok {
		ob.LeaseDuration = cs.timeout
	}
	if d.foreign > 0 {
		ob.Detail["foreign_children"] = d.foreign
	}
	collectors.AsText(&ob)
	return ob
}

func zxidHex(z int64) string { return "0x" + strconv.FormatInt(z, 16) }
