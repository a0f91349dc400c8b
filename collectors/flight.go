package collectors

import (
	"context"
	"sync"

	"github.com/leasewatch/leasewatch/audit"
)

// Flight is the one input a collector has handed to its sink and not yet
// learned is durable, so that the collector goes on reading its backend
// while the recorder commits (the recorder paces the commits of busy
// senders). One at a time: the recorder goes on with later inputs after
// one fails to commit, so a second input in flight could store a cursor
// past observations that were never stored. What the collector sees
// meanwhile it gathers into its next input.
//
// A Flight belongs to the collector's loop; only its waits run elsewhere.
type Flight struct {
	in   audit.Input
	next *audit.Input // what waits for the input in flight to land; nil if nothing
	done chan error   // nil while nothing is in flight
	wg   sync.WaitGroup
}

// Busy reports whether an input is in flight.
func (f *Flight) Busy() bool { return f.done != nil }

// Start hands in to sink without waiting for it to be durable. It must not
// be called while Busy.
func (f *Flight) Start(ctx context.Context, sink Sink, in audit.Input) {
	wait := Submit(ctx, sink, in)
	done := make(chan error, 1)
	f.in, f.done = in, done
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		done <- wait()
	}()
}

// Held returns the input waiting for the one in flight to land, for the
// collector to add what it saw since; nil if none waits.
func (f *Flight) Held() *audit.Input { return f.next }

// Hold makes in the next input, in place of any held before (a collector
// merges that one into in first: Held), and starts it at once unless an
// input is in flight.
func (f *Flight) Hold(ctx context.Context, sink Sink, in audit.Input) {
	f.next = &in
	f.Next(ctx, sink)
}

// Next starts the held input unless none is held or one is in flight: after
// Land, and whenever the collector has nothing new to hold.
func (f *Flight) Next(ctx context.Context, sink Sink) {
	if f.Busy() || f.next == nil {
		return
	}
	in := *f.next
	f.next = nil
	f.Start(ctx, sink, in)
}

// Landing is where the input in flight reports its outcome: nil while
// nothing is in flight, so that a select on it waits for other cases.
func (f *Flight) Landing() <-chan error { return f.done }

// Land takes the input whose outcome came from Landing; the Flight is free
// for the next one.
func (f *Flight) Land() audit.Input {
	f.done = nil
	return f.in
}

// Wait waits until no goroutine of the Flight's is left, for a collector
// that stops.
func (f *Flight) Wait() { f.wg.Wait() }
