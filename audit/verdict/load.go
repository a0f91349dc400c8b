package verdict

import (
	"context"
	"fmt"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// Load gathers the facts of one lock over w from st and judges them. A zero
// w.From means the lock's whole retained history; a zero w.To, now. Where
// the lock has more tenures, findings or blind windows in the window than
// one read returns (audit.MaxListLimit), the verdict is judged from the
// newest and says so in its Notes.
func Load(ctx context.Context, st audit.Store, lock audit.Lock, w Window, purpose Purpose, now time.Time) (Verdict, error) {
	if w.To.IsZero() {
		w.To = now
	}
	if !w.From.IsZero() && w.To.Before(w.From) {
		return Verdict{}, audit.Errorf(audit.EINVALID, "to: before from")
	}
	f := Facts{Lock: lock, Window: w, Purpose: purpose}
	var notes []string
	read := audit.TimeFilter{From: w.From, To: w.To, Limit: audit.MaxListLimit}
	var err error
	if f.Tenures, err = st.Tenures(ctx, lock.ID, read); err != nil {
		return Verdict{}, fmt.Errorf("verdict of lock %d: %w", lock.ID, err)
	}
	notes = capped(notes, len(f.Tenures), "tenures")
	if f.Findings, err = st.Findings(ctx, audit.FindingFilter{TimeFilter: read, LockID: lock.ID, Overlapping: true}); err != nil {
		return Verdict{}, fmt.Errorf("verdict of lock %d: %w", lock.ID, err)
	}
	notes = capped(notes, len(f.Findings), "findings")
	if f.Window.From.IsZero() {
		f.Window.From = firstRecorded(f, w.To)
	}
	if f.Writes, err = st.WriteStats(ctx, lock.ID, audit.TimeFilter{From: w.From, To: w.To}); err != nil {
		return Verdict{}, fmt.Errorf("verdict of lock %d: %w", lock.ID, err)
	}
	if f.Blind, err = st.BlindWindows(ctx, audit.BlindFilter{TimeFilter: audit.TimeFilter{From: f.Window.From, To: f.Window.To, Limit: audit.MaxListLimit}, Source: lock.Source}); err != nil {
		return Verdict{}, fmt.Errorf("verdict of lock %d: %w", lock.ID, err)
	}
	notes = capped(notes, len(f.Blind), "blind windows")
	if f.AcceptedUnder, err = acceptedUnder(ctx, st, f); err != nil {
		return Verdict{}, fmt.Errorf("verdict of lock %d: %w", lock.ID, err)
	}
	v := Judge(f)
	v.Notes = notes
	return v, nil
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
		first = earlier(first, f.Tenures[0].GrantedAt)
	}
	if len(f.Findings) > 0 {
		first = earlier(first, f.Findings[0].At)
	}
	return first
}

// acceptedUnder counts the writes accepted during each overlap, and under
// each regressed or reused token's tenure, in the store.
func acceptedUnder(ctx context.Context, st audit.Store, f Facts) (map[int64]int, error) {
	out := make(map[int64]int)
	for _, fd := range f.Findings {
		from, to, ok := exposedBy(fd, f)
		if !ok {
			continue
		}
		h, err := st.WriteCounts(ctx, f.Lock.ID, audit.WriteAccepted, audit.BinFilter{From: from, To: to, Bins: 1})
		if err != nil {
			return nil, err
		}
		out[fd.ID] = h.Total()
	}
	return out, nil
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
					end = earlier(end, later(t.EndedAt, t.GrantedAt))
				}
				return t.GrantedAt, end, true
			}
		}
	}
	return time.Time{}, time.Time{}, false
}
