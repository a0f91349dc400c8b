package postgres

import (
	"context"
	"sync"

	"github.com/leasewatch/leasewatch/audit"
)

// maxQueued bounds the observations and writes that wait behind a record
// in flight: past it the stream stops reading, and the slot keeps the rest,
// until the record lands.
const maxQueued = 50_000

// streamFlight keeps one record of the stream's batches in flight while the
// stream reads on, and merges the batches it reads meanwhile into the next
// record. A record waits for a commit to make it durable (up to the
// recorder's commit interval, 400 ms by default): a stream that waited for
// each of its batches, a transaction or a keepalive, fell behind its
// server, 25 s after 45 s of one transaction and a keepalive a second. One
// record, not more: a record handed on after one the recorder refused
// would still commit, and store a cursor past the refused changes.
type streamFlight struct {
	r    *streamRun
	done chan error // the outcome of the record in flight; nil when none is
	// wake ends when the record in flight lands, so that a Next waiting
	// on the server returns to confirm it and start the next.
	wake    context.Context
	confirm LSN          // the position to confirm once it lands; 0: none
	next    *StreamBatch // the batches read since, merged
	queued  int
	wg      sync.WaitGroup
}

// context is what Next waits with: ctx, ended early once a record lands.
func (f *streamFlight) context(ctx context.Context) context.Context {
	if f.done == nil {
		return ctx
	}
	return f.wake
}

// full reports whether the stream must wait for the record in flight to
// land before it reads on.
func (f *streamFlight) full() bool { return f.done != nil && f.queued >= maxQueued }

// add merges b, the batch s returned last, into the batches waiting, and
// records them unless a record is in flight.
func (f *streamFlight) add(ctx context.Context, s *Stream, b StreamBatch) error {
	f.queued += len(b.Observations) + len(b.Writes)
	if f.next == nil {
		f.next = &b
	} else {
		mergeBatch(f.next, b)
	}
	return f.start(ctx, s)
}

// mergeBatch adds b, read after dst, to dst: its changes after dst's, and
// its time, and its position where it moved the stream.
func mergeBatch(dst *StreamBatch, b StreamBatch) {
	dst.Observations = append(dst.Observations, b.Observations...)
	dst.Writes = append(dst.Writes, b.Writes...)
	if !b.At.IsZero() {
		dst.At = b.At
	}
	if b.Moved {
		dst.Moved, dst.Position = true, b.Position
	}
}

// start records the batches waiting, unless none waits, a record is in
// flight, or s is amid a transaction (a Next that a landing woke), whose
// changes its Cursor would hold. The stream s must not have moved past the
// last of them: their cursor is its Cursor.
func (f *streamFlight) start(ctx context.Context, s *Stream) error {
	if f.done != nil || f.next == nil || s.tx != nil {
		return nil
	}
	b := *f.next
	ins, err := f.r.inputs(s, b)
	if err != nil {
		return err
	}
	f.next, f.queued = nil, 0
	done := make(chan error, 1)
	wake, cancel := context.WithCancel(ctx)
	f.done, f.wake, f.confirm = done, wake, 0
	if b.Moved {
		f.confirm = b.Position
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		done <- record(ctx, f.r.sink, ins)
		cancel()
	}()
	return nil
}

// land takes the outcome of the record in flight, waiting for it if wait,
// confirms its position to the server once it is durable, and starts the
// next. Without a record in flight, or one that has not landed and need not
// be waited for, it does nothing.
func (f *streamFlight) land(ctx context.Context, s *Stream, wait bool) error {
	if f.done == nil {
		return nil
	}
	var err error
	if wait {
		err = <-f.done
	} else {
		select {
		case err = <-f.done:
		default:
			return nil
		}
	}
	f.done = nil
	if err != nil {
		return err
	}
	f.r.blind = nil
	if f.confirm != 0 {
		if err := s.Confirm(ctx, f.confirm); err != nil {
			return err
		}
	}
	return f.start(ctx, s)
}

// stop waits for the record in flight, if any, to land, for a stream that
// ends: no record of its may follow a restart's.
func (f *streamFlight) stop() { f.wg.Wait() }

// inputs makes the inputs of b, the batches s returned last: at b's time
// on the database's clock, up to which the stream has delivered every
// change (audit.Input.Live), with s's cursor where b moved it, and the
// blind window that ends there, if any, which the caller forgets once they
// are recorded.
func (r *streamRun) inputs(s *Stream, b StreamBatch) ([]audit.Input, error) {
	var cursor string
	if b.Moved {
		var err error
		if cursor, err = s.Cursor(); err != nil {
			return nil, err
		}
	}
	at := b.At
	if at.IsZero() {
		at = r.c.now()
	}
	if r.blind != nil {
		r.blind.To = at
	}
	ins := r.c.tableInputs(r.tables, b.Observations, at, cursor, b.Snapshot, r.blind)
	withWrites(ins, r.c.cfg.Name, b.Writes)
	return ins, nil
}
