package audit

import (
	"path"
	"strings"
)

// Selector picks the locks of one source, the locks whose names match a
// pattern, or both: the left side of a configured rule (alert thresholds, a
// lock's purpose).
type Selector struct {
	Source string // a source name; empty: every source
	// Lock is a path.Match pattern over lock names; empty: every lock. As in
	// path.Match, '*' does not cross '/': "kube-system/*" matches the Leases
	// of one namespace, "/locks/*" the etcd locks under one prefix. A
	// selector with a pattern never applies to a source as a whole (a name
	// of "").
	Lock string
}

// ValidPattern reports whether p is a well-formed Selector.Lock pattern.
func ValidPattern(p string) bool {
	_, err := path.Match(p, "")
	return err == nil
}

// Matches reports whether s selects the lock name of source; name "" is
// the source as a whole. A malformed pattern never matches.
func (s Selector) Matches(source, name string) bool {
	if s.Source != "" && s.Source != source {
		return false
	}
	if s.Lock == "" {
		return true
	}
	if name == "" {
		return false
	}
	ok, err := path.Match(s.Lock, name)
	return ok && err == nil
}

// Compare orders selectors from the least specific to the most: one naming
// a source and a lock beats one naming only a lock, which beats one naming
// only a source; between selectors of the same kind, an exact lock name
// beats a pattern and a pattern with more literal characters beats one with
// fewer. It returns a negative number when s is less specific than o, zero
// when they are as specific.
func (s Selector) Compare(o Selector) int {
	a, b := s.specificity(), o.specificity()
	switch {
	case a.kind != b.kind:
		return a.kind - b.kind
	case a.exact != b.exact:
		if a.exact {
			return 1
		}
		return -1
	}
	return a.literal - b.literal
}

type specificity struct {
	kind    int // 0 source only, 1 lock only, 2 source and lock
	exact   bool
	literal int
}

func (s Selector) specificity() specificity {
	var sp specificity
	if s.Lock != "" {
		sp.kind = 1
		if s.Source != "" {
			sp.kind = 2
		}
	}
	sp.exact = s.Lock != "" && !strings.ContainsAny(s.Lock, `*?[\`)
	sp.literal = literals(s.Lock)
	return sp
}

// literals counts the characters of pattern p that match only themselves.
func literals(p string) int {
	n := 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '*', '?':
		case '[':
			if j := strings.IndexByte(p[i+1:], ']'); j >= 0 {
				i += j + 1
			}
		case '\\':
			i++
			n++
		default:
			n++
		}
	}
	return n
}
