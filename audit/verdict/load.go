package verdict

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasewatch/leasewatch/audit"
)

// Load gathers the facts of one lock over w from st and judges them. A zero
// w.From means the lock's whole retained history; a zero w.To, now. Where
// the lock has more tenures, findings or blind windows in the window than
// one read returns (audit.MaxListLimit), the verdict is judged from the
// newest and says so in its Notes.
//
// The stale writes that fencing stopped are counted per resource, not
// read: a busy lock's resources stop hundreds of thousands a day, and all a
// verdict says of them is how many each resource stopped. Their reasons
// (ReasonStaleStopped) carry a Count and no finding IDs. LoadListed lists
// them too.
func Load(ctx context.Context, st FactReader, lock audit.Lock, w Window, purpose Purpose, now time.Time) (Verdict, error) {
	return load(ctx, st, lock, w, purpose, now, false)
}

// LoadListed is Load with every stale write's finding read, so that the
// reasons about them name each one (the API's verdict), up to
// audit.MaxListLimit.
func LoadListed(ctx context.Context, st FactReader, lock audit.Lock, w Window, purpose Purpose, now time.Time) (Verdict, error) {
	return load(ctx, st, lock, w, purpose, now, true)
}

func load(ctx context.Context, st FactReader, lock audit.Lock, w Window, purpose Purpose, now time.Time, listStale bool) (Verdict, error) {
	if w.To.IsZero() {
		w.To = now
	}
	if !w.From.IsZero() && w.To.Before(w.From) {
		return Verdict{}, audit.Errorf(audit.EINVALID, "to: before from")
	}
	f := Facts{Lock: lock, Window: w, Purpose: purpose}
	// The reads are independent: on a database server each is a round
	// trip, and on SQLite each its own connection, so they overlap.
	read := audit.TimeFilter{From: w.From, To: w.To, Limit: audit.MaxListLimit}
	kinds := judged
	if !listStale {
		kinds = slices.DeleteFunc(slices.Clone(judged), func(k audit.FindingKind) bool { return k == audit.FindingStaleWrite })
	}
	found := make([][]audit.Finding, len(kinds))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(loadParallel)
	g.Go(func() (err error) {
		f.Tenures, err = st.Tenures(gctx, lock.ID, read)
		return err
	})
	if !listStale {
		g.Go(func() (err error) {
			f.Stale, err = st.FindingsByResource(gctx, lock.ID, audit.FindingStaleWrite, audit.TimeFilter{From: w.From, To: w.To})
			return err
		})
	}
	// Only the kinds a verdict counts: a busy lock's late renewals and
	// expiries are most of its findings.
	for i, kind := range kinds {
		g.Go(func() (err error) {
			found[i], err = st.Findings(gctx, audit.FindingFilter{TimeFilter: read, LockID: lock.ID, Kind: kind, Overlapping: true})
			return err
		})
	}
	g.Go(func() (err error) {
		f.Writes, err = st.WriteStats(gctx, lock.ID, audit.TimeFilter{From: w.From, To: w.To})
		return err
	})
	g.Go(func() (err error) {
		f.Blind, err = st.BlindWindows(gctx, audit.BlindFilter{TimeFilter: read, Source: lock.Source})
		return err
	})
	if err := g.Wait(); err != nil {
		return Verdict{}, fmt.Errorf("verdict of lock %d: %w", lock.ID, err)
	}
	notes := capped(nil, len(f.Tenures), "tenures")
	for i, kind := range kinds {
		notes = capped(notes, len(found[i]), string(kind)+" findings")
	}
	notes = capped(notes, len(f.Blind), "blind windows")
	f.Findings = slices.Concat(found...)
	slices.SortFunc(f.Findings, func(a, b audit.Finding) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.ID, b.ID))
	})
	if f.Window.From.IsZero() {
		f.Window.From = firstRecorded(f, w.To)
	}
	under, skipped, err := acceptedUnder(ctx, st, f)
	if err != nil {
		return Verdict{}, fmt.Errorf("verdict of lock %d: %w", lock.ID, err)
	}
	f.AcceptedUnder = under
	if skipped > 0 {
		notes = append(notes, fmt.Sprintf("the writes under only the newest %d overlaps and token regressions were counted, not under %d earlier ones", maxUnderChecks, skipped))
	}
	v := Judge(f)
	v.Notes = notes
	return v, nil
}

// loadParallel is how many of a verdict's reads run at once.
const loadParallel = 4

// judged are the finding kinds a verdict is judged from.
var judged = []audit.FindingKind{
	audit.FindingUnfencedWrite, audit.FindingStaleWrite, audit.FindingExposure,
	audit.FindingOverlap, audit.FindingTokenRegression, audit.FindingTokenReuse, audit.FindingZombieHolder,
	audit.FindingUngrantedToken,
}

// capped notes a read that returned as many items as one read can.
func capped(notes []string, n int, what string) []string {
	if n < audit.MaxListLimit {
		return notes
	}
	return append(notes, fmt.Sprintf("judged from the newest %d %s of the window only", n, what))
}

// firstRecorded is where the whole history starts: the first tenure's
// grant or the first finding, whichever is earlier; to when there is
// neither.
func firstRecorded(f Facts, to time.Time) time.Time {
	first := to
	if len(f.Tenures) > 0 {
		first = audit.MinTime(first, f.Tenures[0].GrantedAt)
	}
	if len(f.Findings) > 0 {
		first = audit.MinTime(first, f.Findings[0].At)
	}
	for _, c := range f.Stale {
		first = audit.MinTime(first, c.First)
	}
	return first
}

// maxUnderChecks caps the overlaps and regressions whose writes a verdict
// counts, one read each, the newest first.
const maxUnderChecks = 500

// acceptedUnder counts the writes accepted during each overlap, and under
// each regressed or reused token's tenure, in the store; skipped says how
// many earlier ones past maxUnderChecks it left uncounted.
func acceptedUnder(ctx context.Context, st FactReader, f Facts) (under map[int64]int, skipped int, err error) {
	under = make(map[int64]int)
	for _, fd := range slices.Backward(f.Findings) {
		from, to, ok := exposedBy(fd, f)
		if !ok {
			continue
		}
		if len(under) == maxUnderChecks {
			skipped++
			continue
		}
		h, err := st.WriteCounts(ctx, f.Lock.ID, audit.WriteAccepted, audit.BinFilter{From: from, To: audit.MaxTime(to, from), Bins: 1})
		if err != nil {
			return nil, 0, err
		}
		under[fd.ID] = h.Total()
	}
	return under, skipped, nil
}

// exposedBy is the interval over which writes accepted make the finding
// fd unsafe: an overlap's own interval, or the tenure a regressed or
// reused token was granted to, up to its end or the window's.
func exposedBy(fd audit.Finding, f Facts) (from, to time.Time, ok bool) {
	switch fd.Kind {
	case audit.FindingOverlap:
		if fd.Until.IsZero() {
			return fd.At, fd.At, true
		}
		return fd.At, fd.Until, true
	case audit.FindingTokenRegression, audit.FindingTokenReuse:
		if len(fd.Tokens) == 0 {
			return time.Time{}, time.Time{}, false
		}
		token := fd.Tokens[len(fd.Tokens)-1]
		for _, t := range f.Tenures {
			if t.Token != nil && *t.Token == token && t.GrantedAt.Equal(fd.At) {
				end := f.Window.To
				if !t.Held() {
					end = audit.MinTime(end, audit.MaxTime(t.EndedAt, t.GrantedAt))
				}
				return t.GrantedAt, end, true
			}
		}
	}
	return time.Time{}, time.Time{}, false
}
