package query

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/advise"
	"github.com/leasewatch/leasewatch/audit/history"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// How much the lock page reads at most.
const (
	TimelineTenures = 2000
	// timelineRenewals is how many renewal times ReadRenewals reads, the
	// newest in the window.
	timelineRenewals = 3000
	// TimelineWrites is how many writes of its window the lock page reads
	// one by one; past it, it reads their counts (WriteCounts).
	TimelineWrites = 400
	// timelineWriteCount is how many writes of each outcome the lock page
	// counts exactly; beyond it, the counts are lower bounds.
	timelineWriteCount = 100_000
	// unfencedCount is how many unfenced writes the lock page counts.
	unfencedCount    = audit.MaxListLimit
	LockPageFindings = 200
	// HealthMargins caps the renewals whose margins the health panel reads:
	// the newest in the window.
	HealthMargins = 500
)

// VerdictScope is what the lock page's verdict covers: "" its window,
// "24h" the last 24 hours, "all" the whole retained history.
type VerdictScope string

// The lock page's verdict scopes.
const (
	ScopeWindow VerdictScope = ""
	Scope24h    VerdictScope = "24h"
	ScopeAll    VerdictScope = "all"
)

// Valid reports whether s is a scope.
func (s VerdictScope) Valid() bool { return s == ScopeWindow || s == Scope24h || s == ScopeAll }

// LockPageQuery asks for the lock page.
type LockPageQuery struct {
	ID     int64
	Window Window
	// PresetAsked says the request named its window's preset: it is kept
	// even when nothing happened in it.
	PresetAsked bool
	// At is the instant asked about (?at=); zero for none.
	At  time.Time
	Now time.Time
	// Verdict is the scope the verdict panel judges.
	Verdict VerdictScope
	// Events selects the page's event list (its Kind and Before); Limit is
	// how many it shows.
	Events audit.EventFilter
	// LiveOnly asks for the live region alone: the summary, timeline,
	// verdict and instant, not the health, tenure and event lists.
	LiveOnly bool
	// WriteBins is how many equal stretches of the window the writes are
	// counted in when there are more than TimelineWrites (at least one).
	WriteBins int
}

// WriteCounts are a window's writes counted rather than listed: per
// outcome and stretch of the window, with the unfenced writes as findings.
type WriteCounts struct {
	Accepted, Rejected audit.Histogram
	// AtLeast says counting stopped at a cap: the counts are lower bounds.
	AtLeast  bool
	Unfenced []audit.Finding // unfenced_write findings in the window
	// UnfencedMore counts unfenced writes in the window not in Unfenced.
	UnfencedMore int
}

// LockPage is what the lock page shows.
type LockPage struct {
	Lock audit.Lock
	// Window is the window shown, which Note explains when it is not the
	// one asked for.
	Window Window
	Note   WindowNote
	// Moment is the lock at the query's At; nil without one.
	Moment  *history.Moment
	Tenures []audit.Tenure
	// Renewals are the window's renewal times, complete from RenewalsFrom
	// (zero: from the window's start). LockPage leaves them unread,
	// RenewalsFrom the window's end; ReadRenewals reads them.
	Renewals     []time.Time
	RenewalsFrom time.Time
	// Writes are every write in the window, when there are at most
	// TimelineWrites; else WriteCounts counts them.
	Writes      []audit.Event
	WriteCounts *WriteCounts
	// Findings are the newest LockPageFindings that overlap the window,
	// in time order; FindingsTrimmed says there were more.
	Findings        []audit.Finding
	FindingsTrimmed bool
	Verdict         Judged
	// VerdictWindow is what the verdict covers.
	VerdictWindow verdict.Window

	// Outside the live region (zero with LiveOnly):
	// Margins are the renewal margins of the window's newest HealthMargins
	// renewals.
	Margins []float64
	// MarginsCapped says the window has more renewals than HealthMargins.
	MarginsCapped bool
	// Advice is the lease settings that fit the stalls of the same
	// renewals and the tenures.
	Advice advise.Advice
	Events EventList
}

// LockPage reads the lock page, but for its renewal times: on a lock that
// changes hands every few seconds they are most of its events, and whether
// they are worth reading depends on the tenures read here (ReadRenewals).
func (r *Reader) LockPage(ctx context.Context, q LockPageQuery) (LockPage, error) {
	l, err := r.store.Lock(ctx, q.ID)
	if err != nil {
		return LockPage{}, err
	}
	p := LockPage{Lock: l}
	p.Window, p.Note = idleWindow(l, q.Window, q.PresetAsked)
	if p.Tenures, err = r.store.Tenures(ctx, l.ID, audit.TimeFilter{From: p.Window.From, To: p.Window.To, Limit: TimelineTenures}); err != nil {
		return LockPage{}, err
	}
	p.Window, p.Note = fitHistory(p.Window, p.Note, p.Tenures, q.At, q.Now)
	if err := r.timeline(ctx, &p, q); err != nil {
		return LockPage{}, err
	}
	if !q.At.IsZero() {
		m, err := history.At(ctx, r.store, l, q.At)
		if err != nil {
			return LockPage{}, err
		}
		p.Moment = &m
	}
	if err := r.lockVerdict(ctx, &p, q); err != nil {
		return LockPage{}, err
	}
	if q.LiveOnly {
		return p, nil
	}
	if err := r.healthRenewals(ctx, &p); err != nil {
		return LockPage{}, err
	}
	ef := q.Events
	ef.TimeFilter = audit.TimeFilter{From: p.Window.From, To: p.Window.To}
	if p.Events, err = r.Events(ctx, l.ID, ef, q.Events.Limit); err != nil {
		return LockPage{}, err
	}
	return p, nil
}

// ReadRenewals reads the renewal times of p's window, the newest
// timelineRenewals of them, into p.
func (r *Reader) ReadRenewals(ctx context.Context, p *LockPage) error {
	w := p.Window
	times, err := r.store.EventTimes(ctx, p.Lock.ID, audit.EventRenew, audit.TimeFilter{From: w.From, To: w.To, Limit: timelineRenewals})
	if err != nil {
		return err
	}
	p.Renewals, p.RenewalsFrom = times, time.Time{}
	if len(times) == timelineRenewals {
		p.RenewalsFrom = times[0]
	}
	return nil
}

// timeline reads the rest of p's window besides its tenures and renewals:
// writes and findings.
func (r *Reader) timeline(ctx context.Context, p *LockPage, q LockPageQuery) error {
	var err error
	w, id := p.Window, p.Lock.ID
	p.RenewalsFrom = w.To // none read yet
	if p.Writes, p.WriteCounts, err = r.timelineWrites(ctx, id, w, q.WriteBins); err != nil {
		return err
	}
	findings, err := r.store.Findings(ctx, audit.FindingFilter{LockID: id, Overlapping: true,
		TimeFilter: audit.TimeFilter{From: w.From, To: w.To, Limit: LockPageFindings + 1}})
	if err != nil {
		return err
	}
	p.Findings, p.FindingsTrimmed = newest(findings, LockPageFindings)
	return nil
}

// timelineWrites returns the writes of lock id in window w: every write,
// when there are at most TimelineWrites of them; else their counts in bins
// stretches of the window (whole ticks of the counts the store keeps, when
// the window is long enough; else exact up to timelineWriteCount per
// outcome), and the unfenced writes. The store counts them, so a window of
// millions of writes costs the page no more memory than one of hundreds.
func (r *Reader) timelineWrites(ctx context.Context, id int64, w Window, bins int) ([]audit.Event, *WriteCounts, error) {
	counts := &WriteCounts{}
	f := audit.BinFilter{From: w.From, To: w.To, Bins: max(bins, 1), Limit: timelineWriteCount, Ticks: true}
	for _, k := range []struct {
		outcome audit.WriteOutcome
		counts  *audit.Histogram
	}{{audit.WriteAccepted, &counts.Accepted}, {audit.WriteRejected, &counts.Rejected}} {
		h, err := r.store.WriteCounts(ctx, id, k.outcome, f)
		if err != nil {
			return nil, nil, err
		}
		*k.counts, counts.AtLeast = h, counts.AtLeast || h.AtLeast
	}
	if counts.Accepted.Total()+counts.Rejected.Total() <= TimelineWrites {
		var writes []audit.Event
		for _, k := range []audit.EventKind{audit.EventWriteAccepted, audit.EventWriteRejected} {
			ws, err := r.store.Events(ctx, id, audit.EventFilter{Kind: k, TimeFilter: audit.TimeFilter{From: w.From, To: w.To, Limit: TimelineWrites}})
			if err != nil {
				return nil, nil, err
			}
			writes = append(writes, ws...)
		}
		slices.SortStableFunc(writes, func(a, b audit.Event) int { return a.At.Compare(b.At) })
		return writes, nil, nil
	}
	unfenced := audit.FindingFilter{LockID: id, Kind: audit.FindingUnfencedWrite,
		TimeFilter: audit.TimeFilter{From: w.From, To: w.To, Limit: TimelineWrites + 1}}
	some, err := r.store.Findings(ctx, unfenced)
	if err != nil {
		return nil, nil, err
	}
	counts.Unfenced = some
	if len(some) > TimelineWrites {
		// Rare: count the rest, which the findings page lists.
		counts.Unfenced = some[1:]
		unfenced.Limit = unfencedCount
		all, err := r.store.Findings(ctx, unfenced)
		if err != nil {
			return nil, nil, err
		}
		counts.UnfencedMore = len(all) - len(counts.Unfenced)
		counts.AtLeast = counts.AtLeast || len(all) == unfencedCount
	}
	return nil, counts, nil
}

// lockVerdict judges p's lock over the scope q asks for, at most once per
// round of the verdict keeper for a lock and scope.
func (r *Reader) lockVerdict(ctx context.Context, p *LockPage, q LockPageQuery) error {
	w := verdict.Window{From: p.Window.From, To: p.Window.To}
	switch q.Verdict {
	case ScopeWindow:
	case Scope24h:
		w = verdict.Window{From: q.Now.Add(-24 * time.Hour), To: q.Now}
	case ScopeAll:
		w = verdict.Window{To: q.Now}
	default:
		return audit.Errorf(audit.EINVALID, "verdict: want 24h or all, not %q", q.Verdict)
	}
	l := p.Lock
	j, err := r.verdicts.get(ctx, pageVerdictKey(l, string(q.Verdict), p.Window, w), q.Now, func(ctx context.Context) (verdict.Verdict, error) {
		return verdict.Load(ctx, r.store, l, w, r.purposes.For(l.Source, l.Name), q.Now)
	})
	p.Verdict, p.VerdictWindow = j, w
	return err
}

// Verdict judges lock id over w at now, afresh, each reason listing its
// findings: the API's verdict.
func (r *Reader) Verdict(ctx context.Context, id int64, w verdict.Window, now time.Time) (verdict.Verdict, error) {
	l, err := r.store.Lock(ctx, id)
	if err != nil {
		return verdict.Verdict{}, err
	}
	return verdict.LoadListed(ctx, r.store, l, w, r.purposes.For(l.Source, l.Name), now)
}

// healthRenewals reads the newest HealthMargins renewals of p's window,
// for its leadership health (their margins) and its lease advice (their
// gaps, with p's tenures): one read for both.
func (r *Reader) healthRenewals(ctx context.Context, p *LockPage) error {
	w := p.Window
	renewals, err := r.store.Events(ctx, p.Lock.ID, audit.EventFilter{Kind: audit.EventRenew,
		TimeFilter: audit.TimeFilter{From: w.From, To: w.To, Limit: HealthMargins}})
	if err != nil {
		return err
	}
	p.Margins = make([]float64, 0, len(renewals))
	for _, e := range renewals {
		if m, ok := detailNumber(e.Detail, "margin_ratio"); ok {
			p.Margins = append(p.Margins, m)
		}
	}
	p.MarginsCapped = len(renewals) == HealthMargins
	sample := advise.NewSample(p.Lock, advise.Window{From: w.From, To: w.To}, p.Tenures, renewals, p.MarginsCapped)
	p.Advice = advise.Of(sample, advise.DefaultOptions())
	return nil
}

// detailNumber returns a number of an event's detail: a float64 as the
// tracker made it, a json.Number as a store reads it back.
func detailNumber(d map[string]any, key string) (float64, bool) {
	switch v := d[key].(type) {
	case float64:
		return v, true
	case json.Number:
		f, err := v.Float64()
		return f, err == nil
	}
	return 0, false
}
