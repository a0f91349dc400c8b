package review

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// Query selects what a report covers.
type Query struct {
	Window Window
	// Sources restricts the report to these sources' locks. Empty: every source.
	Sources []string
	// Locks names the locks to report on, each as an id or SOURCE/NAME. Named
	// locks are reported whatever Sources says, heartbeats included. Empty:
	// every lock (not heartbeat) of Sources that changed in the window.
	Locks []string
	// MaxLocks caps the locks in one report. Default DefaultMaxLocks.
	MaxLocks int
	// Purposes say which locks only avoid duplicate work, for each lock's
	// safety verdict over the window.
	Purposes verdict.Purposes
	// Cache, when set, keeps the write reports the report reads for the
	// next reports on the same locks (see WriteCache).
	Cache *WriteCache
	Options
}

// DefaultMaxLocks is how many locks one report covers at most, unless the
// query says otherwise: enough for an incident, few enough for one page.
const DefaultMaxLocks = 50

// storeLimit is the most items one Store list call returns.
const storeLimit = 10000

// lockPage is how many locks Load lists per call when it scans a source.
const lockPage = 1000

// TooManyLocksError says a query matched more locks than one report covers.
// Its code is audit.EINVALID.
type TooManyLocksError struct {
	Max int
}

func (e *TooManyLocksError) Error() string {
	return fmt.Sprintf("more than %d locks changed in this window: a report covers at most %d; pick a source or name the locks", e.Max, e.Max)
}

// Unwrap lets audit.ErrorCode see the error as invalid input.
func (e *TooManyLocksError) Unwrap() error { return audit.Errorf(audit.EINVALID, "%s", e.Error()) }

// Validate checks the query's window and caps.
func (q Query) Validate() error {
	switch {
	case q.Window.From.IsZero():
		return audit.Errorf(audit.EINVALID, "from: a start time is required")
	case q.Window.To.IsZero():
		return audit.Errorf(audit.EINVALID, "to: an end time is required")
	case q.Window.To.Before(q.Window.From):
		return audit.Errorf(audit.EINVALID, "to: must not be before from")
	}
	if max := q.maxLocks(); len(q.Locks) > max {
		return audit.Errorf(audit.EINVALID, "lock: %d locks named; a report covers at most %d", len(q.Locks), max)
	}
	return nil
}

func (q Query) maxLocks() int {
	if q.MaxLocks > 0 {
		return q.MaxLocks
	}
	return DefaultMaxLocks
}

// ResolveLock finds a lock named by id or SOURCE/NAME. A missing lock is
// ENOTFOUND; a malformed reference is EINVALID.
func ResolveLock(ctx context.Context, st LockResolver, ref string) (audit.Lock, error) {
	ref = strings.TrimSpace(ref)
	if id, err := strconv.ParseInt(ref, 10, 64); err == nil {
		if id <= 0 {
			return audit.Lock{}, audit.Errorf(audit.EINVALID, "lock %q: an id is a positive integer", ref)
		}
		return st.Lock(ctx, id)
	}
	key, err := audit.ParseLockKey(ref)
	if err != nil {
		return audit.Lock{}, audit.Errorf(audit.EINVALID, "lock %q: want an id or SOURCE/NAME", ref)
	}
	return st.LockByKey(ctx, key)
}

// Load reads what the query covers from st and builds its report.
func Load(ctx context.Context, st Store, q Query) (Report, error) {
	if err := q.Validate(); err != nil {
		return Report{}, err
	}
	opts := q.Options.withDefaults()
	locks, err := selectLocks(ctx, st, q)
	if err != nil {
		return Report{}, err
	}
	if opts.MaxHandoversTotal > 0 && len(locks) > 0 {
		// Each lock gets an equal share of the report's handovers.
		opts.MaxHandovers = min(opts.MaxHandovers, max(MinHandoversPerLock, opts.MaxHandoversTotal/len(locks)))
	}
	// A few locks at a time: a lock's reads wait for one another, and on a
	// database server each is a round trip, which other locks' reads can
	// overlap. Each lock's memory is bounded by the caps, so the report's by
	// loadParallel of them.
	lrs := make([]LockReport, len(locks))
	notes := make([][]string, len(locks))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(loadParallel)
	for i, l := range locks {
		g.Go(func() error {
			var err error
			lrs[i], notes[i], err = loadLock(gctx, st, q.Cache, l, q.Window, opts)
			if err != nil || len(lrs[i].Handovers) == 0 {
				return err
			}
			lrs[i].Verdict, err = verdict.Load(gctx, st, l, verdict.Window(q.Window), q.Purposes.For(l.Source, l.Name), q.Window.To)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return Report{}, err
	}
	r := assemble(q.Window, lrs)
	r.Sources = slices.Clone(q.Sources)
	r.Notes = append(r.Notes, slices.Concat(notes...)...)
	return r, nil
}

// selectLocks returns the named locks, or else every lock of the sources that
// changed in the window: a lock whose last change came before the window has
// no grant in it.
func selectLocks(ctx context.Context, st Store, q Query) ([]audit.Lock, error) {
	max := q.maxLocks()
	var out []audit.Lock
	if len(q.Locks) > 0 {
		seen := make(map[int64]bool)
		for _, ref := range q.Locks {
			l, err := ResolveLock(ctx, st, ref)
			if err != nil {
				return nil, err
			}
			if !seen[l.ID] {
				seen[l.ID] = true
				out = append(out, l)
			}
		}
		return out, nil
	}
	sources := q.Sources
	if len(sources) == 0 {
		sources = []string{""}
	}
	for _, src := range slices.Compact(slices.Sorted(slices.Values(sources))) {
		// Most recently changed first, so the scan stops at the first lock
		// that last changed before the window.
		f := audit.LockFilter{Source: src, Class: audit.ClassLock, Sort: audit.SortChanged, Limit: lockPage}
	scan:
		for {
			page, err := st.Locks(ctx, f)
			if err != nil {
				return nil, err
			}
			for _, l := range page {
				if l.ChangedAt.Before(q.Window.From) {
					break scan
				}
				if len(out) == max {
					return nil, &TooManyLocksError{Max: max}
				}
				out = append(out, l)
			}
			if len(page) < lockPage {
				break
			}
			f.After = page[len(page)-1].ID
		}
	}
	return out, nil
}

// loadParallel is how many locks a report reads at once: the stores' read
// pools hold four connections.
const loadParallel = 4

// loadLock reads one lock's tenures and the events and findings around the
// handovers in the window, and builds its part of the report. The writes
// and the findings about them, which can be many, are read a page (or
// with a cache, a tick) at a time and gathered as they come, so that a
// report's memory is bounded by its caps rather than by how busy the lock's
// resources were.
func loadLock(ctx context.Context, st Store, cache *WriteCache, l audit.Lock, w Window, opts Options) (LockReport, []string, error) {
	ld := LockData{Lock: l}
	var err error
	if ld.Tenures, ld.Omitted, err = loadTenures(ctx, st, l, w, opts); err != nil {
		return LockReport{}, nil, err
	}
	span, ok := handoverSpan(w, ld.Tenures, opts)
	if !ok {
		lr, _ := buildLock(w, ld, nil, opts) // no handover in the window
		return lr, nil, nil
	}
	name := l.Key().String()
	var notes []string
	if ld.Events, notes, err = loadHandoverEvents(ctx, st, l, span, name); err != nil {
		return LockReport{}, nil, err
	}
	verdicts, findingNotes, err := loadFindings(ctx, st, l, span, name, &ld)
	if err != nil {
		return LockReport{}, nil, err
	}
	notes = append(notes, findingNotes...)

	lr, writes := buildLock(w, ld, verdicts, opts)
	for _, outcome := range []audit.WriteOutcome{audit.WriteAccepted, audit.WriteRejected} {
		more, err := eachWrite(ctx, st, cache, l.ID, outcome, span, maxWriteItems, writes.add)
		if err != nil {
			return LockReport{}, nil, err
		}
		if more {
			notes = append(notes, fmt.Sprintf("%s: only the newest %d write_%s events were read; narrow the window", name, maxWriteItems, outcome))
		}
	}
	writes.finish()
	return lr, notes, nil
}

// loadTenures reads the tenures that overlap the window, newest first if
// there are too many (then omitted says how many earlier grants in the
// window are left out), and the one before the first: it is the previous
// side of the first handover.
func loadTenures(ctx context.Context, st Store, l audit.Lock, w Window, opts Options) (tenures []audit.Tenure, omittedGrants int, err error) {
	limit := opts.MaxHandovers + 1
	tenures, err = st.Tenures(ctx, l.ID, audit.TimeFilter{From: w.From, To: w.To, Limit: limit})
	if err != nil {
		return nil, 0, err
	}
	if len(tenures) == limit && w.Contains(tenures[0].GrantedAt) {
		// The store kept the newest: earlier grants in the window are
		// missing. Tenure numbers are consecutive, so the first one granted
		// in the window says how many.
		if omittedGrants, err = omitted(ctx, st, l, w, tenures[0]); err != nil {
			return nil, 0, err
		}
	}
	if len(tenures) > 0 && tenures[0].Seq > 1 && omittedGrants == 0 {
		before, err := st.Tenures(ctx, l.ID, audit.TimeFilter{To: tenures[0].GrantedAt, Limit: 2})
		if err != nil {
			return nil, 0, err
		}
		for _, t := range before {
			if t.Seq == tenures[0].Seq-1 {
				tenures = append([]audit.Tenure{t}, tenures...)
			}
		}
	}
	return tenures, omittedGrants, nil
}

// handoverSpan returns the span the handovers in the window have their
// writes, ends and blind windows in; false if no handover is in it. Late
// writes with an old token belong to their handover however late they
// come, so the span reaches Trail past the window.
func handoverSpan(w Window, tenures []audit.Tenure, opts Options) (Interval, bool) {
	var span Interval
	for i := 1; i < len(tenures); i++ {
		prev, next := tenures[i-1], tenures[i]
		if !w.Contains(next.GrantedAt) {
			continue
		}
		from := prev.EndedAt
		if from.IsZero() || from.After(next.GrantedAt) {
			from = next.GrantedAt
		}
		if !prev.LastRenewedAt.IsZero() && prev.LastRenewedAt.Before(from) {
			from = prev.LastRenewedAt
		}
		from = from.Add(-opts.Lead)
		if span.From.IsZero() || from.Before(span.From) {
			span.From = from
		}
	}
	span.To = w.To.Add(opts.Trail)
	return span, !span.From.IsZero()
}

// loadHandoverEvents reads the grants, releases and expiries in span, in
// one read, or past storeLimit of them one read of each kind, up to
// storeLimit each; and the blind windows that end after its start.
func loadHandoverEvents(ctx context.Context, st Store, l audit.Lock, span Interval, name string) ([]audit.Event, []string, error) {
	inSpan := audit.TimeFilter{From: span.From, To: span.To, Limit: storeLimit}
	kinds := []audit.EventKind{audit.EventGrant, audit.EventRelease, audit.EventExpire}
	evs, err := st.Events(ctx, l.ID, audit.EventFilter{TimeFilter: inSpan, Kinds: kinds})
	if err != nil {
		return nil, nil, err
	}
	var notes []string
	if len(evs) == storeLimit {
		evs = evs[:0]
		for _, kind := range kinds {
			some, err := st.Events(ctx, l.ID, audit.EventFilter{TimeFilter: inSpan, Kind: kind})
			if err != nil {
				return nil, nil, err
			}
			if len(some) == storeLimit {
				notes = append(notes, fmt.Sprintf("%s: only the newest %d %s events were read; narrow the window", name, storeLimit, kind))
			}
			evs = append(evs, some...)
		}
	}
	// A blind event is recorded at the end of its window, which may reach
	// past the span.
	blind, err := st.Events(ctx, l.ID, audit.EventFilter{TimeFilter: audit.TimeFilter{From: span.From, Limit: storeLimit}, Kind: audit.EventBlind})
	if err != nil {
		return nil, nil, err
	}
	return append(evs, blind...), notes, nil
}

// loadFindings reads the lock's findings in span: those about writes only
// say which writes were stale or unfenced (the verdicts it returns), and
// are read from the index alone (Store.WriteMarks); the others are kept in
// ld.Findings.
func loadFindings(ctx context.Context, st Store, l audit.Lock, span Interval, name string, ld *LockData) (writeVerdicts, []string, error) {
	var notes []string
	marks, err := st.WriteMarks(ctx, l.ID, audit.TimeFilter{From: span.From, To: span.To, Limit: maxWriteItems})
	if err != nil {
		return nil, nil, err
	}
	if len(marks) == maxWriteItems {
		notes = append(notes, fmt.Sprintf("%s: only the newest %d stale and unfenced writes were told apart; narrow the window", name, maxWriteItems))
	}
	verdicts := make(writeVerdicts, len(marks))
	for _, m := range marks {
		verdicts.note(m)
	}
	// One read: the store sorts the kinds' findings together, which a
	// read a page at a time would do for each page.
	ld.Findings, err = st.Findings(ctx, audit.FindingFilter{LockID: l.ID, Kinds: notAboutAWrite,
		TimeFilter: audit.TimeFilter{From: span.From, To: span.To, Limit: storeLimit}})
	if err != nil {
		return nil, nil, err
	}
	if len(ld.Findings) == storeLimit {
		notes = append(notes, fmt.Sprintf("%s: only the newest %d findings were read; narrow the window", name, storeLimit))
	}
	return verdicts, notes, nil
}

// notAboutAWrite are the finding kinds a report keeps: all but those about
// one write, which only mark that write.
var notAboutAWrite = slices.DeleteFunc(slices.Clone(audit.FindingKinds), func(k audit.FindingKind) bool {
	return slices.Contains(audit.WriteFindingKinds, k)
})

// pageSize is how many write events or findings a report reads at a time.
const pageSize = 1000

// maxWriteItems caps the write events of one kind, and the findings, that a
// report reads of one lock, the newest kept. They are gathered a page at a
// time, so their memory is bounded anyway: the cap bounds the time a report
// takes, which grows with the rows it reads (about 13 µs a write on 2 cores
// idle, several times that under load).
const maxWriteItems = 10_000

// eachPage reads items newest first, pageSize a page, with read (given
// the position before which to read; zero at first), and passes each to fn.
// It stops after max items, and then reports whether there were more.
func eachPage[T any](ctx context.Context, max int, read func(before audit.EventCursor) ([]T, error), at func(T) audit.EventCursor, fn func(T)) (more bool, err error) {
	var before audit.EventCursor
	for n := 0; ; {
		page, err := read(before)
		if err != nil {
			return false, err
		}
		if n+len(page) > max {
			page = page[len(page)-(max-n):] // the newest, within the cap
			more = true
		}
		for _, item := range page {
			fn(item)
		}
		n += len(page)
		if more || len(page) < pageSize {
			return more, nil
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		before = at(page[0])
	}
}

// omitted counts the handovers in w up to and including the grant of first,
// the oldest tenure read: those a report leaves out when it reads the
// newest tenures only.
func omitted(ctx context.Context, st Store, l audit.Lock, w Window, first audit.Tenure) (int, error) {
	before, err := st.Tenures(ctx, l.ID, audit.TimeFilter{To: w.From, Limit: 1})
	if err != nil {
		return 0, err
	}
	firstSeq := int64(1) // of the tenures granted in w
	if n := len(before); n > 0 {
		firstSeq = before[n-1].Seq
		if before[n-1].GrantedAt.Before(w.From) {
			firstSeq++
		}
	}
	// The lock's first tenure is no handover: nobody held it before.
	return int(max(0, first.Seq-max(firstSeq, 2)+1)), nil
}

// DefaultWindow is the window a report covers when none is given: the hour
// before now.
func DefaultWindow(now time.Time) Window {
	now = now.UTC()
	return Window{From: now.Add(-time.Hour), To: now}
}

// IsTooManyLocks reports whether err says a query matched too many locks.
func IsTooManyLocks(err error) bool {
	var e *TooManyLocksError
	return errors.As(err, &e)
}
