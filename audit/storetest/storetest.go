// Package storetest is the contract every audit store keeps: the behaviour
// the recorder, the retainer, the web server and reports rely on, checked
// through the audit interfaces alone. A store's tests run it with a Harness
// that opens that store; a new store is written against this suite.
package storetest

import (
	"context"
	"testing"

	"github.com/leasewatch/leasewatch/audit"
)

// Store is every part of a store the service relies on: the read side, the
// journal the recorder writes through, the pruner of retention, and the
// database size the metrics report.
type Store interface {
	audit.Store
	audit.Journal
	audit.Pruner
	// Size returns the bytes the database takes.
	Size(ctx context.Context) (int64, error)
	Close() error
}

// Harness says how to get a store under test.
type Harness struct {
	// Open returns a new, empty store (its own database) for one test,
	// closed at the test's end.
	Open func(t *testing.T) Store
	// Reopen closes s and opens the same database again, as a restart
	// would. The store it returns is closed at the test's end.
	Reopen func(t *testing.T, s Store) Store
}

// Run runs the contract suite as subtests of t.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Open == nil || h.Reopen == nil {
		t.Fatal("storetest: Harness needs Open and Reopen")
	}
}
