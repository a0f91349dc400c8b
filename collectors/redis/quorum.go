package redis

import (
	"fmt"
	"sort"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// combiner derives a source's locks from its instances' holds. A lock is
// held by the hold (value) that at least quorum instances hold: with one
// instance that is every hold; with Redlock a grant counts once the
// quorum-th instance holds the value, an attempt that reached only a
// minority and was rolled back is no grant, and the lock ends when fewer
// than quorum instances still hold it. It is pure: time comes only from its
// arguments.
type combiner struct {
	source string
	n      int
	quorum int
	// held are each instance's holds, by key: a map per instance rather
	// than a slice per key, which costs a single-instance source of 100,000
	// keys half as much.
	held []map[string]*holding
	told map[string]*holding // the hold the tracker was last told of, by key
	// lastToken is the newest token told per key, to tell whether a
	// vanished hold's counter reading is its own token.
	lastToken map[string]int64
}

func newCombiner(source string, n, quorum int) *combiner {
	c := &combiner{
		source: source, n: n, quorum: quorum,
		held:      make([]map[string]*holding, n),
		told:      make(map[string]*holding),
		lastToken: make(map[string]int64),
	}
	for i := range c.held {
		c.held[i] = make(map[string]*holding)
	}
	return c
}

// hold makes h instance inst's hold of key; nil: it holds none.
func (c *combiner) hold(inst int, key string, h *holding) {
	if h == nil {
		delete(c.held[inst], key)
	} else {
		c.held[inst][key] = h
	}
}

// quorumOf returns the hold at least quorum instances hold of key, with its
// deadline window narrowed to when the quorum-th instance lets go, and how
// many instances hold it. A vanished hold (value unknown) counts only where
// one instance is a quorum. The hold returned may be a view's own, shared:
// callers copy it before changing it.
func (c *combiner) quorumOf(key string, prefer *holding) (*holding, int, bool) {
	counts := make(map[string]int)
	for _, held := range c.held {
		if h := held[key]; h != nil && (!h.Vanished || c.quorum == 1) {
			counts[h.ID]++
		}
	}
	for id, n := range counts {
		if n < c.quorum {
			continue
		}
		var members []*holding
		for _, held := range c.held {
			if h := held[key]; h != nil && h.ID == id && (!h.Vanished || c.quorum == 1) {
				members = append(members, h)
			}
		}
		q := members[0]
		for _, m := range members {
			if m.At.After(q.At) {
				q = m
			}
		}
		if prefer != nil && prefer.ID == id && prefer.Vanished == q.Vanished {
			q = prefer
		}
		if q.expires() && c.quorum > 1 {
			// Until the quorum-th latest deadline, quorum instances hold it.
			los, his := make([]time.Time, 0, len(members)), make([]time.Time, 0, len(members))
			for _, m := range members {
				los, his = append(los, m.Lo), append(his, m.Hi)
			}
			sort.Slice(los, func(i, j int) bool { return los[i].After(los[j]) })
			sort.Slice(his, func(i, j int) bool { return his[i].After(his[j]) })
			w := *q
			w.Lo, w.Hi = los[c.quorum-1], his[c.quorum-1]
			if w.Lo.IsZero() || w.Hi.IsZero() {
				w.Lo, w.Hi = time.Time{}, time.Time{} // some member has no expiry
			}
			q = &w
		}
		return q, n, true
	}
	return nil, 0, false
}

// withToken returns h with token, copied only if it has another.
func withToken(h *holding, token *int64) *holding {
	if h.Token == token {
		return h
	}
	n := *h
	n.Token = token
	return &n
}

// apply folds one instance's changes in and returns what they change about
// the source's locks, in order.
func (c *combiner) apply(inst int, changes []change) []audit.Observation {
	if len(changes) == 0 {
		return nil
	}
	out := make([]audit.Observation, 0, len(changes))
	for _, ch := range changes {
		key := ch.Key
		if ch.Overtaken {
			// Counted per instance, renewals are exact only where one
			// instance is the whole source; a Redlock source's renewals
			// are its quorum's deadline moves (below).
			if prev := c.told[key]; c.n == 1 && prev != nil && prev.ID == ch.H.ID && prev.Vanished == ch.H.Vanished {
				ob := c.observation(key, audit.EventRenew, *prev, ch.At, 1)
				ob.Overtaken = true
				out = append(out, ob)
			}
			continue
		}
		h := ch.H
		if h.Vanished && c.quorum == 1 {
			h = withToken(h, c.vanishedToken(key, h.Token))
		}
		if ch.Kind == changeEnd {
			c.hold(inst, key, nil)
		} else {
			c.hold(inst, key, h)
		}
		prev := c.told[key]
		prefer := h
		if ch.Kind == changeEnd {
			prefer = nil
		}
		q, count, ok := c.quorumOf(key, prefer)
		switch {
		case ok && (prev == nil || prev.ID != q.ID || prev.Vanished != q.Vanished):
			// Over a different previous hold, the tracker decides whether
			// it was superseded early (an overlap) or had lapsed.
			ob := c.observation(key, audit.EventGrant, *q, ch.At, count)
			ob.Inferred = ch.Inferred
			addWhy(&ob, ch.Why)
			out = append(out, ob)
			c.tell(key, q)
		case ok:
			q = withToken(q, prev.Token)
			later, earlier := deadlineMoved(*prev, *q)
			if !later && !earlier {
				n := narrow(*prev, *q)
				n.Count = q.Count
				c.told[key] = &n
				continue
			}
			if ch.Kind != changeRenew {
				// Another instance joining the quorum moves when the
				// quorum-th lets go, but nobody renewed.
				c.told[key] = q
				continue
			}
			ob := c.observation(key, audit.EventRenew, *q, ch.At, count)
			ob.RenewedAt = renewedAt(*q, ch.At)
			if earlier {
				setDetail(&ob, "shortened", true)
			}
			out = append(out, ob)
			c.told[key] = q
		case prev != nil:
			ob := c.observation(key, audit.EventRelease, *prev, ch.At, count)
			switch {
			case ch.Kind == changeEnd && ch.H.ID == prev.ID && ch.H.Vanished == prev.Vanished:
				if ch.Reason != endReleased {
					ob.Kind = audit.EventExpire
				}
				ob.Evicted = ch.Reason == endEvicted
				ob.Inferred = ch.Inferred
				addWhy(&ob, ch.Why)
			default:
				ob.Inferred = true
				addWhy(&ob, fmt.Sprintf("fewer than %d of %d instances hold it", c.quorum, c.n))
			}
			if ob.Evicted {
				addWhy(&ob, "evicted under maxmemory")
			}
			out = append(out, ob)
			delete(c.told, key)
		}
	}
	return out
}

// vanishedToken returns a vanished hold's token: the counter read with the
// key, when it is exactly one past the last token told for the lock (the
// vanished grant took it); nil when other grants may have moved it since.
func (c *combiner) vanishedToken(key string, counter *int64) *int64 {
	if counter == nil {
		return nil
	}
	if last, ok := c.lastToken[key]; ok && *counter != last+1 {
		return nil
	}
	return counter
}

func (c *combiner) tell(key string, q *holding) {
	c.told[key] = q
	if q.Token != nil {
		c.lastToken[key] = *q.Token
	}
}

// replace makes scan (from the instance's state after a full scan) instance
// inst's holds. The combiner keeps scan: the caller hands it over.
func (c *combiner) replace(inst int, scan map[string]*holding) {
	c.held[inst] = scan
}

// replaceKeys makes holds instance inst's holds of keys (a page of a
// periodic pass): a key missing from holds is not held there.
func (c *combiner) replaceKeys(inst int, keys []string, holds map[string]*holding) {
	for _, key := range keys {
		c.hold(inst, key, holds[key])
	}
}

// resync lists every lock the quorum holds, for a Snapshot input: kind
// observed on a first start, an inferred grant otherwise (the tracker keeps
// a tenure whose holder and token did not change), and the inferred end of
// every lock told held that no longer is.
// A hold whose deadline moved since the tracker was told of it carries
// RenewedAt, so the tracker records the renewal it missed. changed reports
// whether the snapshot differs from what the tracker was told.
func (c *combiner) resync(at time.Time, kind audit.EventKind, inferred bool) (obs []audit.Observation, changed bool) {
	return c.sync(c.keys(), at, kind, inferred, true)
}

// reconcile is resync's changes alone, for an input that is not a Snapshot:
// a read while connected (a poll, or keys, a page of a periodic pass),
// whose unchanged holds the tracker already has. Inferred grants, renewals
// and ends, as resync makes them. Nil keys means every key.
func (c *combiner) reconcile(at time.Time, keys []string) []audit.Observation {
	if keys == nil {
		keys = c.keys()
	}
	obs, _ := c.sync(keys, at, audit.EventGrant, true, false)
	return obs
}

// keys returns, in order, every key some instance holds or the tracker was
// told of.
func (c *combiner) keys() []string {
	keys := make(map[string]bool, len(c.held[0])+len(c.told))
	for _, held := range c.held {
		for k := range held {
			keys[k] = true
		}
	}
	for k := range c.told {
		keys[k] = true
	}
	return sortedKeys(keys)
}

// sync is resync over keys; unless all, it leaves out the holds that did
// not change.
func (c *combiner) sync(keys []string, at time.Time, kind audit.EventKind, inferred, all bool) (obs []audit.Observation, changed bool) {
	for _, key := range keys {
		prev := c.told[key]
		q, count, ok := c.quorumOf(key, nil)
		if !ok {
			if prev != nil {
				obs = append(obs, goneEnd(c.observation(key, audit.EventRelease, *prev, at, count), *prev, at))
				delete(c.told, key)
				changed = true
			}
			continue
		}
		if prev != nil && prev.ID == q.ID && prev.Vanished == q.Vanished {
			q = withToken(q, prev.Token)
			ob := c.observation(key, kind, *q, at, count)
			ob.Inferred = inferred
			if later, earlier := deadlineMoved(*prev, *q); later || earlier {
				ob.RenewedAt = renewedAt(*q, at)
				c.told[key] = q
				changed = true
			} else {
				n := narrow(*prev, *q)
				n.Count = q.Count
				c.told[key] = &n
				if !all {
					continue
				}
			}
			obs = append(obs, ob)
			continue
		}
		ob := c.observation(key, kind, *q, at, count)
		ob.Inferred = inferred
		obs = append(obs, ob)
		c.tell(key, q)
		changed = true
	}
	return obs, changed
}

// goneEnd makes ob, about hold h that a full read at at found gone, its
// inferred end: an expiry if its deadline may have passed by then (at its
// deadline, at the latest), a release otherwise. Left to the tracker, a key
// the server expired just before the latest its deadline could be would look
// released.
func goneEnd(ob audit.Observation, h holding, at time.Time) audit.Observation {
	ob.Inferred = true
	if h.expires() && !at.Before(h.Lo) {
		ob.Kind = audit.EventExpire
		if at.After(h.Hi) {
			ob.At = h.Hi
		}
	}
	addWhy(&ob, passGone)
	return ob
}

// observation describes hold h of key, its strings made text by
// collectors.AsText: the combiner keeps the raw key.
func (c *combiner) observation(key string, kind audit.EventKind, h holding, at time.Time, count int) audit.Observation {
	ob := audit.Observation{
		Lock:          audit.LockKey{Source: c.source, Name: key},
		Kind:          kind,
		At:            at,
		Holder:        h.Holder,
		Token:         h.Token,
		LeaseDuration: h.TTL,
	}
	if h.ID != h.Holder {
		setDetail(&ob, "value", h.ID)
	}
	if h.Count > 0 {
		setDetail(&ob, "count", h.Count)
	}
	if c.n > 1 {
		setDetail(&ob, "instances", fmt.Sprintf("%d/%d", count, c.n))
	}
	if h.Unmatched {
		setDetail(&ob, "token_rule", "the value does not match value_pattern")
	}
	if h.Vanished {
		setDetail(&ob, "holder", "unknown")
	}
	collectors.AsText(&ob)
	return ob
}

// setDetail sets one detail of ob, making its map on first use: most
// observations have none.
func setDetail(ob *audit.Observation, k string, v any) {
	if ob.Detail == nil {
		ob.Detail = make(map[string]any, 2)
	}
	ob.Detail[k] = v
}

// renewedAt is when the holder last set the TTL, as far as the read tells:
// the deadline less the TTL read, which puts the tracker's expiry at the
// latest the server's deadline can be.
func renewedAt(h holding, at time.Time) time.Time {
	if !h.expires() {
		return at
	}
	rn := h.Hi.Add(-h.TTL)
	if rn.After(at) {
		return at
	}
	return rn
}

func addWhy(ob *audit.Observation, why string) {
	if why == "" {
		return
	}
	if prev, ok := ob.Detail["reason"].(string); ok && prev != "" {
		why = prev + "; " + why
	}
	setDetail(ob, "reason", why)
}
