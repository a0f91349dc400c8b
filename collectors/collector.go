// Package collectors defines what a backend collector is and runs collectors:
// restart with backoff, health, and metrics. Each backend lives in its own
// subpackage (collectors/etcd, ...); none of them knows SQL, HTTP or HTML.
package collectors

import (
	"context"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// Sink receives a collector's inputs. *audit.Recorder implements it.
type Sink interface {
	// Record records one input and returns once it is durable. An input's
	// cursor is stored in the same transaction as the events it covers.
	Record(ctx context.Context, in audit.Input) error
	// Cursor returns the source's stored resume cursor ("" if none) and the
	// collector-clock time it was reached.
	Cursor(source string) (position string, at time.Time)
}

// Submitter is implemented by sinks that take an input without waiting for
// it to be durable (*audit.Recorder): wait blocks until it is, and returns
// what Record would have. Inputs are applied in submission order, so a busy
// collector can read its backend while earlier inputs commit.
type Submitter interface {
	Submit(ctx context.Context, in audit.Input) (wait func() error)
}

// Submit hands in to sink without waiting for it to be durable: through
// the sink's own Submit when it is a Submitter, and otherwise by a Record
// that wait runs, so a collector calling wait on a goroutine of its own
// goes on reading its backend either way.
func Submit(ctx context.Context, sink Sink, in audit.Input) (wait func() error) {
	if sub, ok := sink.(Submitter); ok {
		return sub.Submit(ctx, in)
	}
	return func() error { return sink.Record(ctx, in) }
}

// Collector watches one source and feeds its observations to a Sink.
type Collector interface {
	// Name is the source's configured name.
	Name() string
	// Kind is the source's backend kind.
	Kind() audit.SourceKind
	// Run watches the backend until ctx ends (returning nil) or the backend
	// fails (returning the error; the Runner restarts it with backoff). It
	// calls ready once it sees the backend, after its first snapshot is durable.
	Run(ctx context.Context, sink Sink, ready func()) error
}

// Degrader is implemented by collectors that can fall back to seeing their
// backend less well (Redis polling where keyspace notifications cannot be
// enabled). Degraded returns why, or "" while the collector sees everything.
type Degrader interface {
	Degraded() string
}
