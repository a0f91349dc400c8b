package etcd

import (
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// entry is one key under a watched prefix, as the collector last saw it.
type entry struct {
	key       string
	createRev int64
	lease     int64
	value     string
	version   int64
	lock      string // the lock the key contends for; "" for a key that only blocks
}

// holding is a lock's current tenure as the collector reported it. The holder
// string is fixed at grant: an election's Proclaim changes the key's value
// but not the tenure.
type holding struct {
	lock      string
	key       string
	createRev int64 // the fencing token
	lease     int64
	holder    string
}

type changeKind int

const (
	changeEnd changeKind = iota
	changeGrant
)

// change is a lock changing hands at one revision: an end of the previous
// holding or a grant of a new one.
type change struct {
	kind changeKind
	h    holding
}

// locks is the collector's picture of every key under its prefixes and of
// who holds each lock. It is pure bookkeeping: events in, changes out.
//
// A lock is the prefix contenders write under: key P/<name>/<lease-hex>
// contends for lock P/<name>. The owner of lock L is the key with the lowest
// CreateRevision among all keys under L/, exactly as concurrency.Mutex and
// Election compute it, so a nested lock's key (L/sub/<hex>) or any other key
// in that range counts too. L is held when its owner is one of its own
// contenders; when the owner belongs to a nested lock, L is blocked: none of
// L's contenders believes it holds L.
type locks struct {
	prefixes []string // watched prefixes; none is a prefix of another
	keys     []string // every tracked key, sorted, for prefix-range scans
	entries  map[string]*entry
	direct   map[string]int // lock name -> number of its own contenders
	held     map[string]holding
	byLease  map[int64]int // lease -> number of tracked keys attached to it
}

func newLocks(prefixes []string) *locks {
	return &locks{
		prefixes: prefixes,
		entries:  make(map[string]*entry),
		direct:   make(map[string]int),
		held:     make(map[string]holding),
		byLease:  make(map[int64]int),
	}
}

// lockName returns the lock key contends for under prefix: everything before
// the last "/", provided the last segment is a lease ID in lowercase hex (as
// concurrency.Mutex and Election write it) and the lock's whole key range
// lies inside prefix, so the collector sees every key that competes for it.
func lockName(key, prefix string) (string, bool) {
	i := strings.LastIndexByte(key, '/')
	if i <= 0 || !strings.HasPrefix(key, prefix) {
		return "", false
	}
	name, id := key[:i], key[i+1:]
	if !isLeaseHex(id) || !strings.HasPrefix(name+"/", prefix) {
		return "", false
	}
	return name, true
}

func isLeaseHex(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// holderOf renders a holder: the lease ID in lowercase hex, plus the key's
// value when it has one (an election candidate's value).
func holderOf(lease int64, value string) string {
	h := strconv.FormatInt(lease, 16)
	if value != "" {
		h += " " + value
	}
	return h
}

func (s *locks) prefixOf(key string) (string, bool) {
	for _, p := range s.prefixes {
		if strings.HasPrefix(key, p) {
			return p, true
		}
	}
	return "", false
}

// reload replaces the picture with kvs, a consistent read of every prefix at
// one revision, and returns every held lock sorted by name. A lock still held
// by the same key as before keeps its holder string.
func (s *locks) reload(kvs []*mvccpb.KeyValue) []holding {
	old := s.held
	s.keys, s.entries = s.keys[:0], make(map[string]*entry, len(kvs))
	s.direct, s.held = make(map[string]int), make(map[string]holding)
	s.byLease = make(map[int64]int)
	for _, kv := range kvs {
		s.put(kv)
	}
	names := make([]string, 0, len(s.direct))
	for name := range s.direct {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []holding
	for _, name := range names {
		owner := s.owner(name)
		if owner == nil || owner.lock != name {
			continue
		}
		h := holding{lock: name, key: owner.key, createRev: owner.createRev, lease: owner.lease, holder: holderOf(owner.lease, owner.value)}
		if prev, ok := old[name]; ok && prev.key == h.key && prev.createRev == h.createRev {
			h.holder = prev.holder
		}
		s.held[name] = h
		out = append(out, h)
	}
	return out
}

// apply applies the events of one revision (one atomic step) and returns the
// resulting changes: the ends of previous holdings, then the grants to new
// owners, each in lock name order (a nested lock's end can be what lets its
// parent's waiter in). A PUT of an existing key (an
// election's Proclaim) only updates the value; a key created and deleted
// without ever being the lowest (TryLock under contention) changes nothing.
func (s *locks) apply(evs []*mvccpb.Event) []change {
	candidates := make(map[string]bool)
	for _, ev := range evs {
		if ev.Kv == nil {
			continue
		}
		key := string(ev.Kv.Key)
		switch ev.Type {
		case mvccpb.PUT:
			if e, ok := s.entries[key]; ok && ev.Kv.Version > 1 && e.createRev == ev.Kv.CreateRevision {
				s.unlease(e.lease)
				e.value, e.lease, e.version = string(ev.Kv.Value), ev.Kv.Lease, ev.Kv.Version
				s.byLease[e.lease]++
				continue
			}
			if _, ok := s.entries[key]; ok {
				s.remove(key) // recreated without the collector seeing the delete
			}
			s.put(ev.Kv)
		case mvccpb.DELETE:
			if _, ok := s.entries[key]; !ok {
				continue
			}
			s.remove(key)
		}
		// Every lock whose range holds key may have a new owner.
		for i := 1; i < len(key); i++ {
			if key[i] == '/' {
				candidates[key[:i]] = true
			}
		}
	}
	names := make([]string, 0, len(candidates))
	for name := range candidates {
		if s.direct[name] > 0 || s.isHeld(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var ends, grants []change
	for _, name := range names {
		for _, c := range s.settle(name) {
			if c.kind == changeEnd {
				ends = append(ends, c)
			} else {
				grants = append(grants, c)
			}
		}
	}
	return append(ends, grants...)
}

// settle recomputes one lock's owner and reports how its holding changed.
func (s *locks) settle(name string) []change {
	prev, wasHeld := s.held[name]
	var now *entry
	if owner := s.owner(name); owner != nil && owner.lock == name {
		now = owner
	}
	if wasHeld && now != nil && now.key == prev.key && now.createRev == prev.createRev {
		return nil
	}
	var out []change
	if wasHeld {
		delete(s.held, name)
		out = append(out, change{kind: changeEnd, h: prev})
	}
	if now != nil {
		h := holding{lock: name, key: now.key, createRev: now.createRev, lease: now.lease, holder: holderOf(now.lease, now.value)}
		s.held[name] = h
		out = append(out, change{kind: changeGrant, h: h})
	}
	return out
}

// owner returns the key with the lowest CreateRevision under name + "/".
func (s *locks) owner(name string) *entry {
	rng := name + "/"
	i, _ := slices.BinarySearch(s.keys, rng)
	var min *entry
	for ; i < len(s.keys) && strings.HasPrefix(s.keys[i], rng); i++ {
		if e := s.entries[s.keys[i]]; min == nil || e.createRev < min.createRev {
			min = e
		}
	}
	return min
}

func (s *locks) isHeld(name string) bool {
	_, ok := s.held[name]
	return ok
}

func (s *locks) put(kv *mvccpb.KeyValue) {
	key := string(kv.Key)
	p, ok := s.prefixOf(key)
	if !ok {
		return
	}
	e := &entry{key: key, createRev: kv.CreateRevision, lease: kv.Lease, value: string(kv.Value), version: kv.Version}
	if name, ok := lockName(key, p); ok {
		e.lock = name
		s.direct[name]++
	}
	s.entries[key] = e
	s.byLease[e.lease]++
	i, _ := slices.BinarySearch(s.keys, key)
	s.keys = slices.Insert(s.keys, i, key)
}

func (s *locks) remove(key string) {
	e, ok := s.entries[key]
	if !ok {
		return
	}
	delete(s.entries, key)
	s.unlease(e.lease)
	if e.lock != "" {
		if s.direct[e.lock]--; s.direct[e.lock] <= 0 {
			delete(s.direct, e.lock)
		}
	}
	if i, found := slices.BinarySearch(s.keys, key); found {
		s.keys = slices.Delete(s.keys, i, i+1)
	}
}

func (s *locks) unlease(lease int64) {
	if s.byLease[lease]--; s.byLease[lease] <= 0 {
		delete(s.byLease, lease)
	}
}

// leaseKeys returns how many tracked keys are attached to lease.
func (s *locks) leaseKeys(lease int64) int { return s.byLease[lease] }

// holdings returns every held lock, sorted by name.
func (s *locks) holdings() []holding {
	out := make([]holding, 0, len(s.held))
	for _, h := range s.held {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].lock < out[j].lock })
	return out
}

// ownerLeases returns the distinct non-zero leases of every held lock, sorted.
func (s *locks) ownerLeases() []int64 {
	seen := make(map[int64]bool)
	var out []int64
	for _, h := range s.held {
		if h.lease != 0 && !seen[h.lease] {
			seen[h.lease] = true
			out = append(out, h.lease)
		}
	}
	slices.Sort(out)
	return out
}

// setHolder replaces the holder string of a held lock (used after a resume,
// when the value at grant differs from the value now).
func (s *locks) setHolder(name, holder string) {
	if h, ok := s.held[name]; ok {
		h.holder = holder
		s.held[name] = h
	}
}

// entry returns the tracked key, if any.
func (s *locks) entry(key string) (*entry, bool) {
	e, ok := s.entries[key]
	return e, ok
}
