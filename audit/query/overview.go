package query

import (
	"cmp"
	"context"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasewatch/leasewatch/audit"
)

// What the overview reads at most.
const (
	OverviewList     = 10 // held locks, and locks near their expiry
	OverviewFindings = 10
	// HeldSpan is how far back the history of each held lock is read.
	HeldSpan     = time.Hour
	heldTenures  = 200 // the newest in the span
	HeldFindings = 50  // of each severity read, critical and warning
	heldParallel = 4   // held locks whose recent histories are read at once
)

// Overview is the dashboard's front page at Now.
type Overview struct {
	Now    time.Time
	Counts Counts
	// Verdicts counts the locks of class lock by kept verdict.
	Verdicts map[string]int
	// Held are the most recently acquired held locks, each with its
	// recent history.
	Held []HeldLock
	// NearExpiry are the held locks with the least lease left, under the
	// renew margin; none when no margin is set.
	NearExpiry []audit.Lock
	// Day is the last 24 hours, which Severities and Findings cover.
	Day audit.TimeFilter
	// Severities counts the findings of the Day by severity, heartbeats'
	// left out as heartbeats are.
	Severities map[audit.Severity]int
	// Findings are the newest of the Day, in time order.
	Findings []audit.Finding
	Sources  Sources
	// TopWriters are the locks with the most writes over the last hour;
	// nil for a store that cannot count them.
	TopWriters *Costs
}

// Counts are the overview's tiles.
type Counts struct {
	Locks, Held, Free, Expired int // class lock
	Heartbeats                 int
	NearExpiry                 int
}

// HeldLock is a held lock and its history over the last HeldSpan: its
// tenures (the newest heldTenures), and its critical and warning findings
// (the newest HeldFindings of each).
type HeldLock struct {
	audit.Lock
	Tenures  []audit.Tenure
	Findings []audit.Finding
}

// Overview reads the overview at now. The requests that ask while one
// reading is under way share it rather than each start their own: during an
// incident many people have the overview open, each refreshing it, and each
// reading counts the day's findings again, so under that load readings
// would otherwise pile up behind one another. A request that joins gets the
// reading that began most recently before it came, at most one reading's
// time older than its own, and its Now is that reading's. The Overview may
// be another request's too: read it, do not change it.
func (r *Reader) Overview(ctx context.Context, now time.Time) (Overview, error) {
	// The reading outlives the request that started it, so that the others
	// waiting for it are not failed by one leaving.
	read := r.overviews.DoChan("", func() (any, error) {
		return r.readOverview(context.WithoutCancel(ctx), now)
	})
	r.overviewWaiting.Add(1)
	defer r.overviewWaiting.Add(-1)
	select {
	case res := <-read:
		if res.Err != nil {
			return Overview{}, res.Err
		}
		return res.Val.(Overview), nil
	case <-ctx.Done():
		return Overview{}, ctx.Err()
	}
}

// readOverview reads the overview at now, for Overview.
func (r *Reader) readOverview(ctx context.Context, now time.Time) (Overview, error) {
	counts, err := r.store.LockCounts(ctx)
	if err != nil {
		return Overview{}, err
	}
	o := Overview{Now: now, Counts: lockCounts(counts),
		Day: audit.TimeFilter{From: now.Add(-24 * time.Hour), To: now}}
	if o.Verdicts, err = r.store.VerdictCounts(ctx, audit.ClassLock); err != nil {
		return Overview{}, err
	}
	if o.Held, err = r.heldLocks(ctx, now); err != nil {
		return Overview{}, err
	}
	if o.NearExpiry, o.Counts.NearExpiry, err = r.nearExpiry(ctx, now); err != nil {
		return Overview{}, err
	}
	// Heartbeats' findings (a node's lease running out) stay out of the
	// overview, as heartbeats do; the findings page shows them on request.
	if o.Severities, err = r.store.FindingCounts(ctx, audit.FindingCountFilter{TimeFilter: o.Day, Class: audit.ClassLock}); err != nil {
		return Overview{}, err
	}
	if o.Findings, err = r.store.Findings(ctx, audit.FindingFilter{Class: audit.ClassLock,
		TimeFilter: audit.TimeFilter{From: o.Day.From, Limit: OverviewFindings}}); err != nil {
		return Overview{}, err
	}
	if o.Sources, err = r.sourcesSince(ctx, o.Day.From, counts); err != nil {
		return Overview{}, err
	}
	if o.TopWriters, err = r.topWriters(ctx, now); err != nil {
		return Overview{}, err
	}
	return o, nil
}

// lockCounts adds up the lock counts of the overview's tiles.
func lockCounts(counts []audit.LockCount) Counts {
	var out Counts
	for _, n := range counts {
		if n.Class == audit.ClassHeartbeat {
			out.Heartbeats += n.N
			continue
		}
		out.Locks += n.N
		switch n.State {
		case audit.StateHeld:
			out.Held += n.N
		case audit.StateExpired:
			out.Expired += n.N
		default:
			out.Free += n.N
		}
	}
	return out
}

// nearExpiry reads the OverviewList held locks with the least lease left
// under the renew margin, and counts them all.
func (r *Reader) nearExpiry(ctx context.Context, now time.Time) ([]audit.Lock, int, error) {
	near, err := r.Expiring(ctx, now, OverviewList)
	if err != nil || len(near) < OverviewList {
		return near, len(near), err
	}
	n, err := r.store.CountLocks(ctx, r.expiringFilter(now, 0))
	return near, n, err
}

// Expiring reads the limit held locks (class lock) with the least lease
// left at now under the renew margin, least left first; none when no
// margin is set.
func (r *Reader) Expiring(ctx context.Context, now time.Time, limit int) ([]audit.Lock, error) {
	if r.margin <= 0 {
		return nil, nil
	}
	return r.store.Locks(ctx, r.expiringFilter(now, limit))
}

// heldLocks reads the overview's most recently acquired held locks, each
// with its recent tenures and findings.
func (r *Reader) heldLocks(ctx context.Context, now time.Time) ([]HeldLock, error) {
	held, err := r.store.Locks(ctx, audit.LockFilter{Class: audit.ClassLock, State: audit.StateHeld, Sort: audit.SortChanged, Limit: OverviewList})
	if err != nil {
		return nil, err
	}
	span := audit.TimeFilter{From: now.Add(-HeldSpan), To: now}
	out := make([]HeldLock, len(held))
	// The locks' reads are independent: a few at a time, so that a
	// reading waits for the store's connections a few times, not thirty.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(heldParallel)
	for i, l := range held {
		g.Go(func() (err error) {
			out[i].Lock = l
			tf := span
			tf.Limit = heldTenures
			if out[i].Tenures, err = r.store.Tenures(gctx, l.ID, tf); err != nil {
				return err
			}
			out[i].Findings, err = r.seriousFindings(gctx, l.ID, span)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// seriousFindings returns the newest critical and warning findings of lock id
// in span, up to HeldFindings of each, in time order: not its info
// findings, of which a lock that resources write to often has thousands,
// which would crowd the others out of a read of the newest.
func (r *Reader) seriousFindings(ctx context.Context, id int64, span audit.TimeFilter) ([]audit.Finding, error) {
	var out []audit.Finding
	for _, sev := range []audit.Severity{audit.SeverityCritical, audit.SeverityWarning} {
		ff := audit.FindingFilter{TimeFilter: span, LockID: id, Severity: sev}
		ff.Limit = HeldFindings
		some, err := r.store.Findings(ctx, ff)
		if err != nil {
			return nil, err
		}
		out = append(out, some...)
	}
	slices.SortFunc(out, func(a, b audit.Finding) int { return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.ID, b.ID)) })
	return out, nil
}
