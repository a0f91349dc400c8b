package history

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasewatch/leasewatch/audit"
)

// MaxFindings is how many findings of a tenure's lock Holder counts per
// tenure; past it, HolderTenure.FindingsAtLeast says there were more.
const MaxFindings = 100

// MaxHolderPage is the most tenures one Holder call returns.
const MaxHolderPage = 500

// Holding is one page of a holder identity's tenures, newest first.
type Holding struct {
	Holder  string
	Tenures []HolderTenure
	// Next, when not zero, is the cursor of the next (older) page:
	// HolderFilter.Before.
	Next audit.TenureCursor
}

// HolderTenure is one tenure of the holder, with what was found on its lock
// while it lasted.
type HolderTenure struct {
	audit.Tenure
	// Until is where the tenure's findings are counted to: its end, or now
	// while it is held.
	Until time.Time
	// Findings counts the findings of the lock that started from the grant
	// to Until, at most MaxFindings; FindingsAtLeast says there were more.
	Findings        int
	FindingsAtLeast bool
}

// loadParallel is how many findings reads run at once.
const loadParallel = 4

// Holder reads the page of f.Holder's tenures that f selects (f.Limit of
// them, at most MaxHolderPage; none asked for means 50), newest first,
// with each one's findings counted.
func Holder(ctx context.Context, st audit.Store, f audit.HolderFilter, now time.Time) (Holding, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, MaxHolderPage)
	f.Limit = limit + 1
	tenures, err := st.TenuresByHolder(ctx, f)
	if err != nil {
		return Holding{}, fmt.Errorf("tenures of a holder: %w", err)
	}
	h := Holding{Holder: f.Holder}
	if len(tenures) > limit {
		tenures = tenures[len(tenures)-limit:]
		oldest := tenures[0]
		h.Next = audit.TenureCursor{GrantedAt: oldest.GrantedAt, LockID: oldest.LockID, Seq: oldest.Seq}
	}
	h.Tenures = make([]HolderTenure, len(tenures))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(loadParallel)
	for i, t := range tenures {
		ht := &h.Tenures[len(tenures)-1-i]
		ht.Tenure, ht.Until = t, audit.MaxTime(now, t.GrantedAt)
		if !t.Held() {
			ht.Until = audit.MaxTime(t.EndedAt, t.GrantedAt)
		}
		g.Go(func() error {
			found, err := st.Findings(gctx, audit.FindingFilter{LockID: t.LockID,
				TimeFilter: audit.TimeFilter{From: t.GrantedAt, To: ht.Until, Limit: MaxFindings + 1}})
			ht.Findings, ht.FindingsAtLeast = min(len(found), MaxFindings), len(found) > MaxFindings
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return Holding{}, fmt.Errorf("findings of a holder's tenures: %w", err)
	}
	return h, nil
}
