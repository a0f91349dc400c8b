package redis

import (
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// reading is one atomic read (MULTI: TYPE, GET, HGETALL, PTTL and the
// counter key) of a lock key on one instance.
type reading struct {
	Key    string
	Type   string            // "string", "hash", "none" or another Redis type
	Value  string            // the string value
	Fields map[string]string // the hash fields
	PTTL   int64             // milliseconds; -1: no expiry, -2: no key
	// Deadline is the key's expiry on the server's clock, Unix
	// milliseconds (PEXPIRETIME, Redis 7 and later); 0 when unknown or none.
	Deadline int64
	Counter  *int64 // the token rule's counter key, when there is one and it holds an integer
	// Sent and At bracket the read: the server ran it in between, so the
	// key's deadline lies between Sent+PTTL and At+PTTL.
	Sent, At time.Time
}

// holding is a lock as one instance holds it.
type holding struct {
	// ID identifies the hold across instances and reads: the string value,
	// or the hash's holder fields. A Redlock quorum is the same ID on enough
	// instances.
	ID     string
	Holder string
	Token  *int64
	// Count is a Redisson hash lock's re-entry count (the field's value);
	// zero for string locks.
	Count int64
	// TTL is how long the key lives from the read (PTTL plus the deadline's
	// millisecond): what the holder set, less the time since. Zero when the
	// key has no expiry.
	TTL time.Duration
	// Lo and Hi bracket the server's deadline for the key (see reading).
	// Zero when the key has no expiry.
	Lo, Hi time.Time
	// Deadline is the server's own deadline, where it tells (see reading):
	// exact, so two reads compare without the brackets' uncertainty.
	Deadline int64
	At       time.Time // when it was read
	// Unmatched says a value_pattern rule did not match the value, so the
	// holder is the whole value and there is no token.
	Unmatched bool
	// Vanished marks the hold of a key that was written and gone again
	// before the collector could read it: holder unknown.
	Vanished bool
}

func (h holding) expires() bool { return !h.Hi.IsZero() }

// deadlineTolerance absorbs PTTL's millisecond rounding when two reads'
// deadline windows are compared.
const deadlineTolerance = 2 * time.Millisecond

// deadlineMoved reports whether b's deadline lies after (later) or before
// (earlier) a's: the key's TTL was set again in between. With the server's
// deadlines the comparison is exact; otherwise the windows must not
// overlap, as overlapping windows may be the same deadline read twice, and a
// slow read (a wide window) can hide a renewal.
func deadlineMoved(a, b holding) (later, earlier bool) {
	switch {
	case !a.expires() && !b.expires():
		return false, false
	case !a.expires() || !b.expires():
		// An expiry added (or removed, by PERSIST) is a new lease either way.
		return b.expires(), false
	case a.Deadline != 0 && b.Deadline != 0:
		return b.Deadline > a.Deadline, b.Deadline < a.Deadline
	}
	return b.Lo.After(a.Hi.Add(deadlineTolerance)), b.Hi.Before(a.Lo.Add(-deadlineTolerance))
}

// narrow returns a's deadline window narrowed by b's, for two reads of the
// same deadline.
func narrow(a, b holding) holding {
	if !a.expires() || !b.expires() {
		return a
	}
	if b.Lo.After(a.Lo) {
		a.Lo = b.Lo
	}
	if b.Hi.Before(a.Hi) {
		a.Hi = b.Hi
	}
	if a.Lo.After(a.Hi) { // only by the rounding tolerance
		a.Lo = a.Hi
	}
	return a
}

// rule is a source's compiled token rule.
type rule struct {
	// counter key = counterPrefix + lock key + counterSuffix
	counterPrefix, counterSuffix string
	counter                      bool
	re                           *regexp.Regexp
	tokenGroup, holderGroup      int
}

const keyPlaceholder = "{key}"

func newRule(tr TokenRule) (rule, error) {
	var r rule
	if tr.CounterKey != "" {
		before, after, ok := strings.Cut(tr.CounterKey, keyPlaceholder)
		if !ok {
			return rule{}, errorf("token.counter_key: must contain %s, which stands for the lock's key", keyPlaceholder)
		}
		r.counter, r.counterPrefix, r.counterSuffix = true, before, after
		if before == "" && after == "" {
			return rule{}, errorf("token.counter_key: must add something to %s, or the lock would be its own counter", keyPlaceholder)
		}
	}
	if tr.ValuePattern != "" {
		re, err := regexp.Compile(tr.ValuePattern)
		if err != nil {
			return rule{}, errorf("token.value_pattern: %v", err)
		}
		r.re, r.tokenGroup, r.holderGroup = re, re.SubexpIndex("token"), re.SubexpIndex("holder")
		if r.tokenGroup < 0 || r.holderGroup < 0 {
			return rule{}, errorf("token.value_pattern: needs the named groups (?P<token>...) and (?P<holder>...)")
		}
	}
	return r, nil
}

// counterKey returns the counter key of lock key, or "" without a counter rule.
func (r rule) counterKey(key string) string {
	if !r.counter {
		return ""
	}
	return r.counterPrefix + key + r.counterSuffix
}

// isCounterKey reports whether key is some lock's counter key rather than a
// lock: "{key}:fence" makes lock:a:fence the counter of lock:a, and a
// pattern lock:* matches both.
func (r rule) isCounterKey(key string) bool {
	return r.counter && len(key) > len(r.counterPrefix)+len(r.counterSuffix) &&
		strings.HasPrefix(key, r.counterPrefix) && strings.HasSuffix(key, r.counterSuffix)
}

// sequential reports whether the rule's tokens rise by one per grant.
func (r rule) sequential() bool { return r.counter }

// decode turns a reading into a holding. It returns false when the key holds
// no lock: gone, of another type, or a hash without integer fields; the
// holding then carries only the read's time.
//
// A string lock's value names the holder (SET k v NX PX: redsync,
// bsm/redislock, the Redis docs pattern). A hash lock is Redisson's: each
// field is a holder, its integer value the re-entry count.
func (r rule) decode(rd reading) (holding, bool) {
	h := holding{At: rd.At}
	switch rd.Type {
	case "string":
		h.ID = rd.Value
	case "hash":
		var names []string
		for f, v := range rd.Fields {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue // not a holder: e.g. a read-write lock's "mode"
			}
			names = append(names, f)
			h.Count += n
		}
		if len(names) == 0 {
			return holding{At: rd.At}, false
		}
		sort.Strings(names)
		h.ID = strings.Join(names, ",")
	default:
		return holding{At: rd.At}, false
	}
	h.Holder = h.ID
	switch {
	case r.re != nil:
		m := r.re.FindStringSubmatch(h.ID)
		if m == nil {
			h.Unmatched = true
			break
		}
		h.Holder = m[r.holderGroup]
		if tok, err := strconv.ParseInt(m[r.tokenGroup], 10, 64); err == nil {
			h.Token = &tok
		} else {
			h.Unmatched = true
		}
	case r.counter && rd.Counter != nil:
		tok := *rd.Counter
		h.Token = &tok
	}
	if rd.PTTL >= 0 {
		// PTTL counts whole milliseconds down to the deadline, and the
		// server keeps the key through the deadline's millisecond: the key
		// lives PTTL to PTTL+1ms from when the read ran. Redis takes
		// expiries far beyond what a time.Duration holds (SET k v EX
		// 10000000000 is 317 years), so cap them at about 292 years.
		pttl := min(rd.PTTL, maxPTTL)
		h.TTL = time.Duration(pttl+1) * time.Millisecond
		h.Lo, h.Hi = rd.Sent.Add(time.Duration(pttl)*time.Millisecond), rd.At.Add(h.TTL)
		h.Deadline = rd.Deadline
	}
	return h, true
}

// maxPTTL is the longest PTTL, in milliseconds, that decode keeps: one
// millisecond less than the longest time.Duration.
const maxPTTL = int64(math.MaxInt64/int64(time.Millisecond)) - 1

// vanished is the hold of a key seen written and then gone before it could
// be read: the holder is unknown; with a counter rule the counter (read with
// the key) still names its token, unless another grant moved it since.
func (r rule) vanished(rd reading) holding {
	h := holding{Vanished: true, At: rd.At}
	if r.counter && rd.Counter != nil {
		tok := *rd.Counter
		h.Token = &tok
	}
	return h
}
