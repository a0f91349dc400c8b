// Package history answers who held what when: the state of one lock at an
// instant (At), and one holder identity's tenures across every lock and
// source (Holder). Like audit/review and audit/verdict it reads through
// audit.Store only and returns plain data for a page or the API.
package history

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasewatch/leasewatch/audit"
)

// State is what a lock was at an instant.
type State string

// States of a Moment.
const (
	StateHeld  State = "held"  // a tenure was current
	StateFree  State = "free"  // no tenure was current
	StateBlind State = "blind" // the collector could not see the lock's source
)

// Moment is one lock at one instant.
type Moment struct {
	Lock  audit.Lock
	At    time.Time
	State State
	// Tenure is the tenure current at At: granted at or before it, and
	// still held or ended after it. Nil when none was.
	Tenure *audit.Tenure
	// Previous is, when no tenure was current, the newest one granted
	// before At, which had ended by then: the lock was free since its end.
	// Nil when a tenure was current or none had been recorded.
	Previous *audit.Tenure
	// Blind is an interval around At over which the collector of the
	// lock's source was blind. With one, State is StateBlind whatever the
	// tenures say, and Tenure or Previous is only what was recorded.
	Blind *audit.BlindWindow
}

// At reads what lock was at instant at: its tenure then, or the one it was
// free since, and whether its source's collector was blind. A tenure is
// current from its grant up to, not including, its end, so at a handover
// the new holder holds the lock.
func At(ctx context.Context, st audit.Store, lock audit.Lock, at time.Time) (Moment, error) {
	m := Moment{Lock: lock, At: at, State: StateFree}
	var (
		tenures []audit.Tenure
		blinds  []audit.BlindWindow
	)
	// A lock's tenures follow one another, so the newest granted by at is
	// the only one that can be current then.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		tenures, err = st.Tenures(gctx, lock.ID, audit.TimeFilter{To: at, Limit: 1})
		return err
	})
	g.Go(func() (err error) {
		blinds, err = st.BlindWindows(gctx, audit.BlindFilter{Source: lock.Source, TimeFilter: audit.TimeFilter{From: at, To: at, Limit: 1}})
		return err
	})
	if err := g.Wait(); err != nil {
		return Moment{}, fmt.Errorf("lock %d at %s: %w", lock.ID, at.UTC().Format(time.RFC3339Nano), err)
	}
	if len(tenures) > 0 {
		t := tenures[len(tenures)-1]
		if t.Held() || t.EndedAt.After(at) {
			m.Tenure, m.State = &t, StateHeld
		} else {
			m.Previous = &t
		}
	}
	if len(blinds) > 0 {
		m.Blind, m.State = &blinds[len(blinds)-1], StateBlind
	}
	return m, nil
}
