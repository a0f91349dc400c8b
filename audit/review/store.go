package review

import (
	"context"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/audit/verdict"
)

// LockResolver finds a lock by id or by key: what ResolveLock reads. Its
// methods are audit.Store's of the same names, documented there.
type LockResolver interface {
	Lock(ctx context.Context, id int64) (audit.Lock, error)
	LockByKey(ctx context.Context, key audit.LockKey) (audit.Lock, error)
}

// Store is what Load reads of a store: the locks a query names or that
// changed, their tenures, handover events, findings and writes, and each
// lock's verdict facts (verdict.FactReader). Each method is audit.Store's of
// the same name, documented there, so every audit.Store (the stores, and
// audit.Reads) is one; declaring only these keeps a method added to
// audit.Store for another reader out of what a review depends on.
type Store interface {
	LockResolver
	verdict.FactReader
	Locks(ctx context.Context, f audit.LockFilter) ([]audit.Lock, error)
	Events(ctx context.Context, lockID int64, f audit.EventFilter) ([]audit.Event, error)
	WriteEvents(ctx context.Context, lockID int64, outcome audit.WriteOutcome, f audit.EventFilter) ([]audit.WriteEvent, error)
	WriteTicks(ctx context.Context, lockID int64, outcome audit.WriteOutcome, f audit.TimeFilter) ([]audit.TickCount, error)
	WriteMarks(ctx context.Context, lockID int64, f audit.TimeFilter) ([]audit.WriteMark, error)
}

// An audit.Store must serve wherever a review reads, as callers hand one.
var _ Store = audit.Store(nil)
