package audit

import (
	"context"
	"time"
)

// The reads of what leases cost their backends (audit/query's Costs): every
// tenure of a window across the locks, and a lock's renewals counted in one.
// They are not audit.Store's: a store that has them (both SQL stores, by
// audit/internal/sqlread) is asked for them through Reads, which lays the
// renewals held back from the rows over the tenures as it does over
// Tenures.

// LockTenure is a tenure with its lock's kind and class.
type LockTenure struct {
	Tenure
	Kind  SourceKind
	Class Class
}

// WriteLoadStore is what a store gives the write-load reads.
type WriteLoadStore interface {
	// TenuresIn returns every lock's tenures that overlap f's window
	// (granted at or before its end, and held or ended at or after its
	// start), each with LockID, Lock, Kind and Class set, in (lock id,
	// seq) order. f.Limit is not used.
	TenuresIn(ctx context.Context, f TimeFilter) ([]LockTenure, error)
	// RenewalCounts counts each lock's renewals observed within f's
	// window (inclusive), wherever they are kept (rows, the renewal log,
	// runs), as one snapshot, by lock id. f.Limit is not used. A lock
	// without renewals in the window, or that does not exist, counts 0.
	RenewalCounts(ctx context.Context, lockIDs []int64, f TimeFilter) (map[int64]int64, error)
}

// writeLoad returns s's write-load reads, or an EUNAVAILABLE error naming
// what s cannot read.
func writeLoad(s Store) (WriteLoadStore, error) {
	w, ok := s.(WriteLoadStore)
	if !ok {
		return nil, Errorf(EUNAVAILABLE, "this store cannot count writes per lease")
	}
	return w, nil
}

// TenuresIn is the store's WriteLoadStore.TenuresIn with the renewals not
// yet synced laid over the held tenures.
func (f freshStore) TenuresIn(ctx context.Context, tf TimeFilter) ([]LockTenure, error) {
	w, err := writeLoad(f.Store)
	if err != nil {
		return nil, err
	}
	tenures, err := w.TenuresIn(ctx, tf)
	for i := range tenures {
		f.freshenTenure(&tenures[i].Tenure)
	}
	return tenures, err
}

// RenewalCounts is the store's WriteLoadStore.RenewalCounts: renewals are
// durable, and so counted, before they are synced.
func (f freshStore) RenewalCounts(ctx context.Context, lockIDs []int64, tf TimeFilter) (map[int64]int64, error) {
	return renewalCounts(ctx, f.Store, lockIDs, tf)
}

// TenuresIn is the store's WriteLoadStore.TenuresIn.
func (s settled) TenuresIn(ctx context.Context, tf TimeFilter) ([]LockTenure, error) {
	w, err := writeLoad(s.Store)
	if err != nil {
		return nil, err
	}
	return w.TenuresIn(ctx, tf)
}

// RenewalCounts is the store's WriteLoadStore.RenewalCounts.
func (s settled) RenewalCounts(ctx context.Context, lockIDs []int64, tf TimeFilter) (map[int64]int64, error) {
	return renewalCounts(ctx, s.Store, lockIDs, tf)
}

func renewalCounts(ctx context.Context, s Store, lockIDs []int64, tf TimeFilter) (map[int64]int64, error) {
	w, err := writeLoad(s)
	if err != nil {
		return nil, err
	}
	return w.RenewalCounts(ctx, lockIDs, tf)
}

// The Reads this package makes have the write-load reads.
var (
	_ WriteLoadStore = freshStore{}
	_ WriteLoadStore = settled{}
)

// WriteLoadSkew is how much earlier than a window's start a tenure's last
// renewal may be dated and still have renewals observed within it: a
// backend's renewal time (a Lease's renewTime) is on its writer's clock, a
// renewal's observed time on the collector's.
const WriteLoadSkew = 5 * time.Minute
