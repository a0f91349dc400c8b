package advise

import (
	"context"

	"github.com/leasewatch/leasewatch/audit"
)

// How much Load reads at most: the newest of the window's renewals and
// tenures.
const (
	MaxRenewals = audit.MaxListLimit
	MaxTenures  = 2000
)

// Store is what Load reads of a store. Each method is audit.Store's of the
// same name, documented there.
type Store interface {
	Tenures(ctx context.Context, lockID int64, f audit.TimeFilter) ([]audit.Tenure, error)
	Events(ctx context.Context, lockID int64, f audit.EventFilter) ([]audit.Event, error)
}

// An audit.Store serves wherever advice is read.
var _ Store = audit.Store(nil)

// Load reads lock l's tenures (the newest MaxTenures) and renewals (the
// newest MaxRenewals) of window w, both ends set, and computes its advice:
// two index-backed reads whatever the window holds.
func Load(ctx context.Context, st Store, l audit.Lock, w Window, o Options) (Advice, error) {
	if err := o.Validate(); err != nil {
		return Advice{}, err
	}
	if w.From.IsZero() || w.To.Before(w.From) {
		return Advice{}, audit.Errorf(audit.EINVALID, "from: must be set and not after to")
	}
	f := audit.TimeFilter{From: w.From, To: w.To}
	f.Limit = MaxTenures
	tenures, err := st.Tenures(ctx, l.ID, f)
	if err != nil {
		return Advice{}, err
	}
	f.Limit = MaxRenewals
	renewals, err := st.Events(ctx, l.ID, audit.EventFilter{Kind: audit.EventRenew, TimeFilter: f})
	if err != nil {
		return Advice{}, err
	}
	return Of(NewSample(l, w, tenures, renewals, len(renewals) == MaxRenewals), o), nil
}
