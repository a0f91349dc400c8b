package collectors

import (
	"context"
	"testing"
	"time"

	"github.com/leasewatch/leasewatch/audit"
)

// gatedSink records each input once the test lets it through, in order.
type gatedSink struct {
	started chan string
	release chan struct{}
}

func (s gatedSink) Record(_ context.Context, in audit.Input) error {
	s.started <- in.Cursor
	<-s.release
	return nil
}

func (gatedSink) Cursor(string) (string, time.Time) { return "", time.Time{} }

// TestFlightHoldsTheNextInput: an input held while another is in flight
// waits for it to land, is what Held returns for the collector to merge
// into, and starts with Next.
func TestFlightHoldsTheNextInput(t *testing.T) {
	ctx := context.Background()
	sink := gatedSink{started: make(chan string, 2), release: make(chan struct{})}
	var f Flight
	defer f.Wait()
	defer close(sink.release) // lets every Record return, should the test stop early
	f.Hold(ctx, sink, audit.Input{Cursor: "a"})
	if got := <-sink.started; got != "a" || !f.Busy() || f.Held() != nil {
		t.Fatalf("after the first Hold: started %q, busy %v, held %v; want a started at once", got, f.Busy(), f.Held())
	}
	f.Hold(ctx, sink, audit.Input{Cursor: "b"})
	f.Next(ctx, sink) // a is in flight: b waits
	if h := f.Held(); h == nil || h.Cursor != "b" {
		t.Fatalf("held %v while a is in flight, want b", h)
	}
	sink.release <- struct{}{}
	if err := <-f.Landing(); err != nil {
		t.Fatal(err)
	}
	if in := f.Land(); in.Cursor != "a" {
		t.Fatalf("landed %q, want a", in.Cursor)
	}
	f.Next(ctx, sink)
	if got := <-sink.started; got != "b" || f.Held() != nil {
		t.Fatalf("after Next: started %q, held %v; want b and nothing held", got, f.Held())
	}
	sink.release <- struct{}{}
	<-f.Landing()
	if in := f.Land(); in.Cursor != "b" {
		t.Fatalf("landed %q, want b", in.Cursor)
	}
	f.Next(ctx, sink) // nothing held: nothing starts
	if f.Busy() {
		t.Fatal("busy with nothing held")
	}
}
