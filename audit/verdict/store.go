package verdict

import (
	"context"

	"github.com/leasewatch/leasewatch/audit"
)

// FactReader is what Load reads of a store to judge a lock: its tenures,
// findings, writes and blind windows. Each method is audit.Store's of the
// same name, documented there, so every audit.Store (the stores, and
// audit.Reads) is one; declaring only these keeps a method added to
// audit.Store for another reader out of what a verdict depends on.
type FactReader interface {
	Tenures(ctx context.Context, lockID int64, f audit.TimeFilter) ([]audit.Tenure, error)
	Findings(ctx context.Context, f audit.FindingFilter) ([]audit.Finding, error)
	FindingsByResource(ctx context.Context, lockID int64, kind audit.FindingKind, f audit.TimeFilter) ([]audit.ResourceFindings, error)
	WriteStats(ctx context.Context, lockID int64, f audit.TimeFilter) ([]audit.ResourceWrites, error)
	WriteCounts(ctx context.Context, lockID int64, outcome audit.WriteOutcome, f audit.BinFilter) (audit.Histogram, error)
	BlindWindows(ctx context.Context, f audit.BlindFilter) ([]audit.BlindWindow, error)
}

// KeeperStore is what a Keeper reads: the locks to judge, by key or a page
// of a list at a time, and each one's facts. Its methods are audit.Store's.
type KeeperStore interface {
	FactReader
	Locks(ctx context.Context, f audit.LockFilter) ([]audit.Lock, error)
	LockByKey(ctx context.Context, key audit.LockKey) (audit.Lock, error)
}

// An audit.Store must serve wherever a verdict reads, as callers hand one.
var _ KeeperStore = audit.Store(nil)
