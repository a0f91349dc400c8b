// Package recheck exports a lock's stored history over a window as a
// history of operations that Porcupine (github.com/anishathalye/porcupine),
// a linearizability checker, reads, and states as Porcupine models the
// properties a history is checked against: Lease, the one a lock's verdict
// (audit/verdict) judges, and Register, the rule a fenced resource applies.
// So anyone can re-check a verdict with a checker leasewatch did not write,
// on the rows leasewatch stored, and see the operation that breaks it.
//
// Load reads the history (Reader: the few audit.Store methods it calls);
// History.Porcupine gives Porcupine's operations, Check runs Porcupine on
// them, and Explain says which operation first breaks a property and why.
// The JSON of a History is the export's format (docs/recheck.md).
package recheck

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
	"golang.org/x/sync/errgroup"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// MaxOperations is the most operations a History holds, and what Load
// keeps when asked for no fewer: windows can hold millions of writes.
const MaxOperations = audit.MaxListLimit

// OpKind is what an operation did (contract).
type OpKind string

// Operation kinds, in the order the models take the operations of one
// instant: a tenure that ends at a grant's instant ended before it, and a
// write is judged against the grants made at or before it and the tenures
// ended strictly before it, as the tracker judges writes.
const (
	// OpEnd: a tenure ended (released or expired; superseded at the grant
	// that superseded it).
	OpEnd OpKind = "end"
	// OpGrant: the lock was granted to a holder, with or without a token.
	OpGrant OpKind = "grant"
	// OpWrite: a protected resource accepted or rejected a write; its
	// output says which.
	OpWrite OpKind = "write"
)

// rank orders the operations of one instant (see OpKind).
func (k OpKind) rank() int {
	switch k {
	case OpEnd:
		return 0
	case OpGrant:
		return 1
	default:
		return 2
	}
}

// Input is what an operation did: all a model's Step sees of it.
type Input struct {
	Kind OpKind `json:"kind"`
	// At is when it happened, in Unix nanoseconds: the operation's call
	// and return, repeated here because a Step is not given them.
	At int64 `json:"at"`
	// Seq is the tenure a grant made or an end ended (per lock, in grant
	// order); zero for a write.
	Seq int64 `json:"seq,omitempty"`
	// Holder is the tenure's holder, or the holder a write report names.
	Holder string `json:"holder"`
	// Token is the grant's, the ended tenure's or the write's fencing
	// token; null when it carried none.
	Token *int64 `json:"token"`
	// Expires is, for a grant, when its lease ran out by its last renewal
	// (Unix ns; zero when unknown): a grant made before it overlaps it.
	Expires int64 `json:"expires,omitempty"`
	// Reason is how an end ended the tenure.
	Reason audit.EndReason `json:"reason,omitempty"`
	// Resource is the resource a write was made at, and Event the write's
	// event id.
	Resource string `json:"resource,omitempty"`
	Event    int64  `json:"event,omitempty"`
}

// Operation is one operation of a history, as Porcupine's Operation has
// it: who made it, what it did and what came back, and when it was called
// and returned (Unix ns; both At: a recorded event is an instant).
type Operation struct {
	ClientID int   `json:"client_id"`
	Input    Input `json:"input"`
	// Output is a write's outcome; null for a grant or an end.
	Output *audit.WriteOutcome `json:"output"`
	Call   int64               `json:"call"`
	Return int64               `json:"return"`
}

// History is one lock's history over a window as Porcupine's operations.
type History struct {
	LockID int64  `json:"lock_id"`
	Source string `json:"source"`
	Lock   string `json:"lock"`
	// From and To are the window. The grants of the tenures held at From
	// are in the history, before it.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Property names the model the lock's verdict corresponds to (Lease).
	Property Property `json:"property"`
	// Clients names each client id: the holder whose grants, ends and
	// writes it made.
	Clients    []string    `json:"clients"`
	Operations []Operation `json:"operations"`
	// MaxOperations is the most operations the history could hold;
	// Truncated says the window had more, and the history holds the newest,
	// complete from CompleteFrom on.
	MaxOperations int        `json:"max_operations"`
	Truncated     bool       `json:"truncated"`
	CompleteFrom  *time.Time `json:"complete_from"`
	Notes         []string   `json:"notes"`
}

// Reader is what Load reads of a store: the lock, its tenures and its
// write reports. Each method is audit.Store's of the same name.
type Reader interface {
	Lock(ctx context.Context, id int64) (audit.Lock, error)
	Tenures(ctx context.Context, lockID int64, f audit.TimeFilter) ([]audit.Tenure, error)
	WriteEvents(ctx context.Context, lockID int64, outcome audit.WriteOutcome, f audit.EventFilter) ([]audit.WriteEvent, error)
}

// An audit.Store serves wherever a history is read.
var _ Reader = audit.Store(nil)

// Load reads lock id's history over w from st, at most limit operations
// (MaxOperations when limit is not positive or larger). A zero w.From means
// the lock's whole retained history, a zero w.To now, as for a verdict
// (verdict.Load): the same window gives the history that verdict judged.
func Load(ctx context.Context, st Reader, id int64, w verdict.Window, limit int, now time.Time) (History, error) {
	if limit <= 0 || limit > MaxOperations {
		limit = MaxOperations
	}
	if w.To.IsZero() {
		w.To = now
	}
	if !w.From.IsZero() && w.To.Before(w.From) {
		return History{}, audit.Errorf(audit.EINVALID, "to: must not be before from")
	}
	lock, err := st.Lock(ctx, id)
	if err != nil {
		return History{}, err
	}
	var tenures []audit.Tenure
	var writes [2][]audit.WriteEvent
	read := audit.TimeFilter{From: w.From, To: w.To, Limit: limit}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		tenures, err = st.Tenures(gctx, id, read)
		return err
	})
	for i, outcome := range []audit.WriteOutcome{audit.WriteAccepted, audit.WriteRejected} {
		g.Go(func() (err error) {
			writes[i], err = st.WriteEvents(gctx, id, outcome, audit.EventFilter{TimeFilter: read})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return History{}, fmt.Errorf("history of lock %d: %w", id, err)
	}
	h := History{LockID: lock.ID, Source: lock.Source, Lock: lock.Name, From: w.From, To: w.To,
		Property: Lease, MaxOperations: limit, Notes: []string{}}
	ops := operations(tenures, slices.Concat(writes[0], writes[1]), w.To)
	// A list read in full may have left older rows out: the history is
	// complete only from the oldest row of each such list on.
	var cut time.Time
	if len(tenures) == limit {
		cut = tenures[0].GrantedAt
	}
	for _, ws := range writes {
		if len(ws) == limit {
			cut = audit.MaxTime(cut, ws[0].At)
		}
	}
	ops, cut = trim(ops, cut, limit)
	if !cut.IsZero() {
		h.Truncated, h.CompleteFrom = true, &cut
		h.Notes = append(h.Notes, fmt.Sprintf("the window holds more than %d operations: these are the newest, complete from %s, with the grants of the tenures held then; what came before (an older grant's token, a lease still running) is not in them",
			limit, cut.UTC().Format(time.RFC3339Nano)))
	}
	if h.From.IsZero() {
		h.From = w.To
		if len(ops) > 0 {
			h.From = audit.MinTime(h.From, time.Unix(0, ops[0].Input.At).UTC())
		}
	}
	h.Clients, h.Operations = clients(ops)
	return h, nil
}

// operations are the tenures' grants and ends (those up to to) and the
// writes, in the order the models take them.
func operations(tenures []audit.Tenure, writes []audit.WriteEvent, to time.Time) []Operation {
	ops := make([]Operation, 0, 2*len(tenures)+len(writes))
	for _, t := range tenures {
		in := Input{Kind: OpGrant, At: t.GrantedAt.UnixNano(), Seq: t.Seq, Holder: t.Holder, Token: t.Token}
		if !t.ExpiresAt.IsZero() {
			in.Expires = t.ExpiresAt.UnixNano()
		}
		ops = append(ops, Operation{Input: in})
		if !t.Held() && !t.EndedAt.After(to) {
			ops = append(ops, Operation{Input: Input{Kind: OpEnd, At: t.EndedAt.UnixNano(), Seq: t.Seq, Holder: t.Holder, Token: t.Token, Reason: t.End}})
		}
	}
	for _, w := range writes {
		out := w.Outcome
		ops = append(ops, Operation{Output: &out, Input: Input{Kind: OpWrite, At: w.At.UnixNano(), Holder: w.Holder, Token: w.Token, Resource: w.Resource, Event: w.ID}})
	}
	for i := range ops {
		ops[i].Call, ops[i].Return = ops[i].Input.At, ops[i].Input.At
	}
	slices.SortStableFunc(ops, func(a, b Operation) int {
		return cmp.Or(cmp.Compare(a.Input.At, b.Input.At), cmp.Compare(a.Input.Kind.rank(), b.Input.Kind.rank()),
			cmp.Compare(a.Input.Seq, b.Input.Seq), cmp.Compare(a.Input.Event, b.Input.Event))
	})
	return ops
}

// trim keeps the operations from cut on (all when cut is zero), at most
// limit of them, the newest, with the grants of the tenures held at the
// start of what it keeps: a write is judged against them. It returns where
// what it kept starts, zero when it kept everything.
func trim(ops []Operation, cut time.Time, limit int) ([]Operation, time.Time) {
	start := 0
	if !cut.IsZero() {
		start, _ = slices.BinarySearchFunc(ops, cut.UnixNano(), func(op Operation, at int64) int { return cmp.Compare(op.Input.At, at) })
	}
	for {
		carried := heldAt(ops, start)
		if len(carried)+len(ops)-start <= limit || start == len(ops) {
			if start == 0 {
				return ops, cut
			}
			return append(carried, ops[start:]...), time.Unix(0, ops[min(start, len(ops)-1)].Input.At).UTC()
		}
		start += len(carried) + len(ops) - start - limit
	}
}

// heldAt returns the grants among ops[:start] of the tenures not ended
// there.
func heldAt(ops []Operation, start int) []Operation {
	ended := make(map[int64]bool)
	for _, op := range ops[:start] {
		if op.Input.Kind == OpEnd {
			ended[op.Input.Seq] = true
		}
	}
	var held []Operation
	for _, op := range ops[:start] {
		if op.Input.Kind == OpGrant && !ended[op.Input.Seq] {
			held = append(held, op)
		}
	}
	return held
}

// clients gives each holder a client id, in the order of its first
// operation, and sets them on ops.
func clients(ops []Operation) ([]string, []Operation) {
	names := []string{}
	ids := make(map[string]int)
	for i := range ops {
		id, ok := ids[ops[i].Input.Holder]
		if !ok {
			id = len(names)
			ids[ops[i].Input.Holder] = id
			names = append(names, ops[i].Input.Holder)
		}
		ops[i].ClientID = id
	}
	if ops == nil {
		ops = []Operation{}
	}
	return names, ops
}

// Porcupine returns h's operations as Porcupine's: Input an Input, Output
// a write's audit.WriteOutcome (nil otherwise), Metadata the operation's
// index in h.
func (h History) Porcupine() []porcupine.Operation {
	out := make([]porcupine.Operation, len(h.Operations))
	for i, op := range h.Operations {
		out[i] = porcupine.Operation{ClientId: op.ClientID, Input: op.Input, Call: op.Call, Return: op.Return, Metadata: i}
		if op.Output != nil {
			out[i].Output = *op.Output
		}
	}
	return out
}

// Decode reads a History from its JSON, as GET
// /api/v1/locks/{id}/recheck serves it, refusing an operation of an unknown
// kind or outcome, or whose call and return differ from its time.
func Decode(r io.Reader) (History, error) {
	var h History
	if err := json.NewDecoder(r).Decode(&h); err != nil {
		return History{}, fmt.Errorf("decode history: %w", err)
	}
	for i, op := range h.Operations {
		switch {
		case op.Input.Kind != OpGrant && op.Input.Kind != OpEnd && op.Input.Kind != OpWrite:
			return History{}, fmt.Errorf("decode history: operation %d: unknown kind %q", i, op.Input.Kind)
		case op.Input.Kind == OpWrite && (op.Output == nil || *op.Output != audit.WriteAccepted && *op.Output != audit.WriteRejected):
			return History{}, fmt.Errorf("decode history: operation %d: a write's output must be accepted or rejected", i)
		case op.Call != op.Input.At || op.Return != op.Input.At:
			return History{}, fmt.Errorf("decode history: operation %d: call and return must be its input's at", i)
		}
	}
	return h, nil
}
