package audit

import (
	"context"
	"log/slog"
	"slices"
	"time"
)

// Retention says how long the audit log keeps what it records, by age. A
// zero duration keeps forever. Tenures and lock rows are always kept: they
// are the holder timeline, one row per grant.
type Retention struct {
	Events   time.Duration               // events of every kind not in Kinds
	Kinds    map[EventKind]time.Duration // events of these kinds
	Findings time.Duration
}

// Keeps reports whether r never prunes anything.
func (r Retention) Keeps() bool {
	if r.Events > 0 || r.Findings > 0 {
		return false
	}
	for _, d := range r.Kinds {
		if d > 0 {
			return false
		}
	}
	return true
}

// EventRule selects the events one retention duration governs: those of
// Kinds, or, when Others is set, of every kind not in Kinds.
type EventRule struct {
	Kinds  []EventKind
	Others bool
	Age    time.Duration
}

// Governs reports whether the rule covers events of kind k.
func (r EventRule) Governs(k EventKind) bool { return slices.Contains(r.Kinds, k) != r.Others }

// EventRules groups r's event durations into one rule per distinct duration,
// shortest first, leaving out the kinds kept forever.
func (r Retention) EventRules() []EventRule {
	byAge := make(map[time.Duration][]EventKind)
	var named []EventKind
	for k, d := range r.Kinds {
		named = append(named, k)
		if d > 0 {
			byAge[d] = append(byAge[d], k)
		}
	}
	var rules []EventRule
	if r.Events > 0 {
		// The other kinds are those Kinds does not name.
		slices.Sort(named)
		rules = append(rules, EventRule{Kinds: named, Others: true, Age: r.Events})
	}
	for d, kinds := range byAge {
		slices.Sort(kinds)
		rules = append(rules, EventRule{Kinds: kinds, Age: d})
	}
	slices.SortFunc(rules, func(a, b EventRule) int { return int(a.Age - b.Age) })
	return rules
}

// PruneStep is one bounded deletion of old events, walking them in the
// order they were stored.
type PruneStep struct {
	Rule   EventRule
	Before time.Time // events of the rule older than this go
	After  int64     // the walk's position: events stored after this one
	Limit  int       // events looked at, at most
}

// PruneResult is what a PruneStep did.
type PruneResult struct {
	Next    int64 // the walk's new position, for the next step's After
	Deleted int
	// Done says the walk reached an event of the rule that is not yet old
	// enough, or the end: later events are newer, so the pass is over.
	Done bool
}

// Pruner is the store side of retention. Each call is one short
// transaction, so ingest never waits long behind it.
type Pruner interface {
	// PruneEvents deletes the events of step.Rule older than step.Before
	// among the next step.Limit stored after step.After, and keeps a
	// summary of each tenure's pruned renewals (RenewalSummary).
	PruneEvents(ctx context.Context, step PruneStep) (PruneResult, error)
	// PruneFindings deletes up to limit findings that ended before before.
	PruneFindings(ctx context.Context, before time.Time, limit int) (int, error)
}

// Sealer folds renewals stored as rows into runs, a few bytes a renewal
// (docs/design/renewal-runs.md): store upkeep, which the Retainer runs
// with its pruning. Readers see a renewal the same before and after.
type Sealer interface {
	// SealRenewals seals, for the next step.Limit locks after
	// step.AfterLock in id order, in one transaction, their renewals
	// observed before step.Before that every sync mark covers.
	SealRenewals(ctx context.Context, step SealStep) (SealResult, error)
}

// SealStep is one bounded sealing of renewals, walking the locks by id.
type SealStep struct {
	Before    time.Time // renewals observed before this are sealed: the end of a run window
	AfterLock int64     // the walk's position: locks after this one
	Limit     int       // locks, at most
}

// SealResult is what a SealStep did.
type SealResult struct {
	NextLock int64 // the walk's new position, for the next step's AfterLock
	Sealed   int   // renewals folded into runs
	Done     bool  // no lock is left after NextLock
}

// RunWindow is the span of observed time one run of renewals covers at
// most; windows start on its multiples (Unix time), and a SealStep's
// Before is one of them.
const RunWindow = time.Hour

// SealGrace is how long after a run window ends its renewals are sealed:
// time for a lagging collector's renewals of the window to be stored, and
// for the journal's sync to cover them.
const SealGrace = 10 * time.Minute

// RenewalSummary is what retention pruned of one tenure's renewals.
type RenewalSummary struct {
	Renewals       int64
	First, Last    time.Time
	MinMarginRatio *float64 // nil when no pruned renewal knew its margin
}

// Retainer prunes the audit log by its Retention, a pass every Every, in
// steps that leave the writer to ingest in between.
type Retainer struct {
	Store Pruner
	// Sealer, if set, seals renewals into runs before each pass prunes:
	// every closed window of Window (an hour), SealGrace after it ends.
	Sealer    Sealer
	Window    time.Duration // default one hour
	Retention Retention
	Now       func() time.Time
	Log       *slog.Logger // nil: discard
	// Every is the time between passes; a pass runs until nothing due is
	// left. Default one minute.
	Every time.Duration
	// Step bounds the rows one transaction looks at. Default 2000.
	Step int
	// Pruned, if set, is called with the rows each step deleted.
	Pruned func(what string, n int)
	// Sealed, if set, is called with the renewals each seal step folded
	// into runs.
	Sealed func(n int)
	// Active, if set, says whether this process prunes now: of replicas
	// that share a store, one does (serve: the owner of leasewatch's own
	// source), since their walks would race on the same rows.
	Active func() bool

	cursors map[time.Duration]int64 // per rule (by age): the walk's position
	sealed  time.Time               // the end of the last window sealed through
}

// Run prunes until ctx ends.
func (r *Retainer) Run(ctx context.Context) {
	if r.Retention.Keeps() && r.Sealer == nil {
		return
	}
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	every := r.Every
	if every <= 0 {
		every = time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if r.Active != nil && !r.Active() {
			r.cursors, r.sealed = nil, time.Time{} // another replica walks meanwhile: start again when active
		} else if err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			log.Warn("retention pass failed; retrying at the next", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass prunes everything due now. Between steps it waits as long as the
// step took, so pruning takes at most half the writer's time.
func (r *Retainer) Pass(ctx context.Context) error {
	if r.cursors == nil {
		r.cursors = make(map[time.Duration]int64)
	}
	limit := r.Step
	if limit <= 0 {
		limit = 2000
	}
	now := r.Now()
	if err := r.seal(ctx, now); err != nil {
		return err
	}
	for _, rule := range r.Retention.EventRules() {
		for {
			start := time.Now()
			res, err := r.Store.PruneEvents(ctx, PruneStep{Rule: rule, Before: now.Add(-rule.Age), After: r.cursors[rule.Age], Limit: limit})
			if err != nil {
				return err
			}
			r.cursors[rule.Age] = res.Next
			r.count("events", res.Deleted)
			if res.Done {
				break
			}
			if err := Pause(ctx, time.Since(start)); err != nil {
				return err
			}
		}
	}
	if r.Retention.Findings <= 0 {
		return nil
	}
	for {
		start := time.Now()
		n, err := r.Store.PruneFindings(ctx, now.Add(-r.Retention.Findings), limit)
		if err != nil {
			return err
		}
		r.count("findings", n)
		if n < limit {
			return nil
		}
		if err := Pause(ctx, time.Since(start)); err != nil {
			return err
		}
	}
}

// sealLocks is how many locks one seal step takes: an hour of a lock's
// renewals is one run, so a step writes at most this many runs (more for
// locks renewed more often than MaxRenewals an hour).
const sealLocks = 200

// seal seals the renewals of every window closed SealGrace before now,
// pausing between steps as pruning does.
func (r *Retainer) seal(ctx context.Context, now time.Time) error {
	before := now.Add(-SealGrace).Truncate(RunWindow)
	if r.Sealer == nil || !before.After(r.sealed) {
		return nil
	}
	err := SealThrough(ctx, r.Sealer, before, func(res SealResult, took time.Duration) error {
		if r.Sealed != nil && res.Sealed > 0 {
			r.Sealed(res.Sealed)
		}
		if res.Done {
			return nil
		}
		return Pause(ctx, took)
	})
	if err == nil {
		r.sealed = before
	}
	return err
}

// SealThrough walks every lock once, sealing its renewals observed before
// before, sealLocks locks a step; after each step it calls step, whose
// error stops the walk.
func SealThrough(ctx context.Context, s Sealer, before time.Time, step func(res SealResult, took time.Duration) error) error {
	for after := int64(0); ; {
		start := time.Now()
		res, err := s.SealRenewals(ctx, SealStep{Before: before, AfterLock: after, Limit: sealLocks})
		if err != nil {
			return err
		}
		if err := step(res, time.Since(start)); err != nil || res.Done {
			return err
		}
		after = res.NextLock
	}
}

func (r *Retainer) count(what string, n int) {
	if r.Pruned != nil && n > 0 {
		r.Pruned(what, n)
	}
}

// Pause waits d, or until ctx ends and returns its error: how background
// work (retention, the verdict keeper) rests between its steps.
func Pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
