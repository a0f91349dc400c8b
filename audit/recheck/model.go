package recheck

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/leasewatch/leasewatch/audit"
)

// Property names a property a history is checked against (contract).
type Property string

// Properties.
const (
	// Lease: a write is safe only if, when the resource accepted it, its
	// token was the newest granted and its tenure had not ended, and no
	// two holders overlapped and no token that went back was held. It is
	// what a lock's verdict judges: a history breaks it exactly when the
	// verdict of its window is unsafe (docs/recheck.md says where they may
	// part on real data).
	Lease Property = "lease"
	// Register: each resource accepts only tokens at least the highest it
	// has accepted, as audit/fence's Guard does. A resource can keep it
	// and still let a stale holder through: between a grant and its first
	// write under the new token (its exposure window) it accepts the old
	// one. Lease holds those writes unsafe; Register does not.
	Register Property = "register"
)

// Properties lists every property, Lease first.
var Properties = []Property{Lease, Register}

// Model returns the Porcupine model of property p; it panics on an
// unknown one.
func Model(p Property) porcupine.Model {
	switch p {
	case Lease:
		return porcupine.Model{
			Init: func() any { return initialLease },
			Step: func(state, input, output any) (bool, any) {
				next, why := state.(leaseState).step(input.(Input), outcomeOf(output))
				return why == "", next
			},
			DescribeOperation: describeOperation,
			DescribeState:     func(state any) string { return state.(leaseState).String() },
		}
	case Register:
		return porcupine.Model{
			Partition: byResource,
			Init:      func() any { return registerState{} },
			Step: func(state, input, output any) (bool, any) {
				next, why := state.(registerState).step(input.(Input), outcomeOf(output))
				return why == "", next
			},
			DescribeOperation: describeOperation,
			DescribeState:     func(state any) string { return state.(registerState).String() },
		}
	}
	panic(fmt.Sprintf("recheck: unknown property %q", p))
}

// Check runs Porcupine on h against property p, and reports whether h
// keeps it (Porcupine's Ok; Illegal otherwise).
func Check(h History, p Property) bool {
	return porcupine.CheckOperations(Model(p), h.Porcupine())
}

// Explain takes h's operations in time order (at one instant, ends, then
// grants, then writes) and returns the index of the first one property p
// does not allow, and why; -1 and "" when it allows them all. Taking them
// in that order is what Porcupine's check comes to for a history of
// instants: Check and Explain agree.
func Explain(h History, p Property) (int, string) {
	lease := initialLease
	registers := make(map[string]registerState)
	for i, op := range h.Operations {
		out := outcomeOf(nil)
		if op.Output != nil {
			out = *op.Output
		}
		var why string
		switch p {
		case Lease:
			lease, why = lease.step(op.Input, out)
		case Register:
			if op.Input.Kind == OpWrite {
				registers[op.Input.Resource], why = registers[op.Input.Resource].step(op.Input, out)
			}
		default:
			panic(fmt.Sprintf("recheck: unknown property %q", p))
		}
		if why != "" {
			return i, why
		}
	}
	return -1, ""
}

func outcomeOf(output any) audit.WriteOutcome {
	out, _ := output.(audit.WriteOutcome)
	return out
}

// never is a time before every operation's.
const never = math.MinInt64

// leaseState is the lock as Lease sees it after some operations. It is a
// value, compared with ==; grants is shared, never changed, among the
// states Porcupine tries.
type leaseState struct {
	// at and rank are the last operation's place in time order: one of
	// the same instant and a lower rank comes no later.
	at   int64
	rank int
	// The current tenure: cur its seq, held whether it has not ended,
	// expires when its lease runs out, regressed whether its token went
	// back or was reused.
	cur                int64
	held, regressed    bool
	expires            int64
	overlapUntil       int64 // writes up to this are made while two holders overlapped
	regressedUntil     int64 // up to the end of the last regressed tenure
	lastEnd, lastEndAt int64 // the last tenure to end, and when
	// newest is the token of the newest grant with one (when tokened),
	// maxGranted the highest token granted; grants lists the tokened
	// grants, newest first.
	tokened            bool
	newest, maxGranted int64
	grants             *grant
	// untokened says a write without a token was accepted.
	untokened bool
}

// grant is a tokened grant: its tenure and token, and the grant before.
type grant struct {
	seq, token int64
	next       *grant
}

var initialLease = leaseState{at: never, overlapUntil: never, regressedUntil: never, lastEndAt: never}

// step takes one operation: the state after it, and why it breaks Lease
// ("" when it does not).
func (s leaseState) step(in Input, out audit.WriteOutcome) (leaseState, string) {
	if in.At < s.at || in.At == s.at && in.Kind.rank() < s.rank {
		return s, "out of time order"
	}
	s.at, s.rank = in.At, in.Kind.rank()
	switch in.Kind {
	case OpEnd:
		// A superseded tenure ends at the grant that superseded it, which
		// comes next at the same instant and says whether it overlapped.
		if s.held && s.cur == in.Seq && in.Reason != audit.EndSuperseded {
			s.end(in.At)
		}
	case OpGrant:
		return s.grant(in)
	case OpWrite:
		if out == audit.WriteAccepted {
			s.untokened = s.untokened || in.Token == nil
			return s, s.accepted(in)
		}
	}
	return s, ""
}

func (s *leaseState) end(at int64) {
	if s.regressed {
		s.regressedUntil = max(s.regressedUntil, at)
	}
	s.held, s.lastEnd, s.lastEndAt = false, s.cur, at
}

// grant ends the current tenure (with an overlap if its lease still ran)
// and starts in's.
func (s leaseState) grant(in Input) (leaseState, string) {
	if s.held {
		if s.expires != 0 && in.At < s.expires {
			s.overlapUntil = max(s.overlapUntil, s.expires)
		}
		s.end(in.At)
	}
	s.cur, s.held, s.expires, s.regressed = in.Seq, true, in.Expires, false
	if in.Token == nil {
		return s, ""
	}
	token := *in.Token
	s.regressed = s.tokened && token <= s.newest
	if !s.tokened {
		s.maxGranted = token
	}
	s.newest, s.maxGranted = token, max(s.maxGranted, token)
	s.grants = &grant{seq: in.Seq, token: token, next: s.grants}
	s.tokened = true
	if s.untokened {
		return s, "a grant of the lock carries a token, and a resource accepted a write without one: it does not check them"
	}
	return s, ""
}

// accepted says why a write the resource accepted breaks Lease, "" when
// it does not.
func (s leaseState) accepted(in Input) string {
	switch {
	case in.At <= s.overlapUntil:
		return "accepted while two holders overlapped: a grant was made while the previous holder's lease still ran"
	case s.held && s.regressed || in.At <= s.regressedUntil:
		return "accepted while a token that went back or was reused was held"
	case in.Token == nil && s.tokened:
		return "accepted without a token, on a lock whose grants carry tokens"
	case in.Token == nil:
		return ""
	case s.tokened && *in.Token < s.newest:
		return fmt.Sprintf("token %d is older than the newest grant's, %d", *in.Token, s.newest)
	}
	seq, granted := s.tenureOf(*in.Token)
	if granted && !(s.held && seq == s.cur) && !(seq == s.lastEnd && s.lastEndAt == in.At) {
		return fmt.Sprintf("the tenure granted token %d (#%d) had ended", *in.Token, seq)
	}
	// A token newer than every grant is a grant still to be reported.
	return ""
}

// tenureOf returns the newest tenure granted token, and false if none was.
func (s leaseState) tenureOf(token int64) (int64, bool) {
	if !s.tokened || token > s.maxGranted {
		return 0, false
	}
	for g := s.grants; g != nil; g = g.next {
		if g.token == token {
			return g.seq, true
		}
	}
	return 0, false
}

func (s leaseState) String() string {
	var b strings.Builder
	switch {
	case s.cur == 0:
		b.WriteString("never granted")
	case s.held:
		fmt.Fprintf(&b, "#%d held", s.cur)
	default:
		fmt.Fprintf(&b, "#%d ended", s.cur)
	}
	if s.tokened {
		fmt.Fprintf(&b, ", newest token %d", s.newest)
	}
	if s.regressed && s.held {
		b.WriteString(", token went back")
	}
	return b.String()
}

// registerState is one resource as Register sees it: the highest token it
// accepted, if any.
type registerState struct {
	highest  int64
	accepted bool
}

// step takes one write: the state after it, and why it breaks Register
// ("" when it does not). A rejection never does: a resource may know a
// higher token than the window shows.
func (s registerState) step(in Input, out audit.WriteOutcome) (registerState, string) {
	if in.Kind != OpWrite || out != audit.WriteAccepted {
		return s, ""
	}
	switch {
	case in.Token == nil:
		return s, fmt.Sprintf("%s accepted a write without a token", in.Resource)
	case s.accepted && *in.Token < s.highest:
		return s, fmt.Sprintf("%s accepted token %d after accepting %d", in.Resource, *in.Token, s.highest)
	}
	s.highest, s.accepted = max(s.highest, *in.Token), true
	return s, ""
}

func (s registerState) String() string {
	if !s.accepted {
		return "nothing accepted"
	}
	return fmt.Sprintf("highest accepted %d", s.highest)
}

// byResource partitions a history's writes by resource: each resource is
// a register of its own, and grants and ends do not change one.
func byResource(ops []porcupine.Operation) [][]porcupine.Operation {
	parts := make(map[string][]porcupine.Operation)
	var names []string
	for _, op := range ops {
		in := op.Input.(Input)
		if in.Kind != OpWrite {
			continue
		}
		if _, ok := parts[in.Resource]; !ok {
			names = append(names, in.Resource)
		}
		parts[in.Resource] = append(parts[in.Resource], op)
	}
	slices.Sort(names)
	out := make([][]porcupine.Operation, 0, len(names))
	for _, n := range names {
		out = append(out, parts[n])
	}
	return out
}

func describeOperation(input, output any) string {
	in := input.(Input)
	token := "no token"
	if in.Token != nil {
		token = fmt.Sprintf("token %d", *in.Token)
	}
	switch in.Kind {
	case OpGrant:
		return fmt.Sprintf("grant #%d to %q, %s", in.Seq, in.Holder, token)
	case OpEnd:
		return fmt.Sprintf("#%d %s", in.Seq, in.Reason)
	}
	return fmt.Sprintf("write at %s by %q, %s -> %s", in.Resource, in.Holder, token, outcomeOf(output))
}
