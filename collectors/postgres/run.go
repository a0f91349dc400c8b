package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// Name is the source's configured name.
func (c *Collector) Name() string { return c.cfg.Name }

// Kind is Backend.Kind.
func (c *Collector) Kind() audit.SourceKind { return Backend.Kind }

// run is one Run of the collector: the connection, the last poll and the
// input on its way to the sink.
type run struct {
	c    *Collector
	sink collectors.Sink
	obs  observer
	conn *pgx.Conn
	dbs  []string

	last   *state    // the last good poll; nil before the first
	seenAt time.Time // the collector's clock at it
	blind  *audit.Blind
	fails  int // failed attempts since the last good poll

	flight collectors.Flight
}

func (r *run) close() {
	r.flight.Wait()
	r.hangUp()
}

// hangUp closes the connection, if any. pgx's Close waits for the server
// to close its end, which a server that stopped answering never does: it
// waits a second at most.
func (r *run) hangUp() {
	if r.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r.conn.Close(ctx)
	r.conn = nil
}

// start connects and records the first poll as a snapshot: as observed on a
// first start, or, after a stored cursor, as the end of the blind window
// the collector was stopped for.
func (r *run) start(ctx context.Context) error {
	if err := r.dial(ctx); err != nil {
		return err
	}
	rd, err := r.read(ctx)
	if err != nil {
		return err
	}
	pos, at := r.sink.Cursor(r.c.cfg.Name)
	if pos != "" {
		why := "the collector was stopped; PostgreSQL keeps no history of its locks"
		if pos != startCursor(rd.postmaster) {
			why += fmt.Sprintf("; the server restarted meanwhile (started %s, was %s), which ends every session", startCursor(rd.postmaster), pos)
		}
		r.blind = &audit.Blind{From: at, Reason: why}
	}
	in, _, err := r.observe(ctx, rd)
	if err != nil {
		return err
	}
	if err := r.sink.Record(ctx, in); err != nil {
		return fmt.Errorf("record the first poll: %w", err)
	}
	r.c.log.Info("snapshot recorded", "held", len(r.last.holds), "blind", in.Blind != nil)
	return nil
}

// loop polls every PollEvery, and connects again with backoff after a
// failure, until ctx ends or the sink fails.
func (r *run) loop(ctx context.Context) error {
	timer := time.NewTimer(r.c.cfg.PollEvery)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-r.flight.Landing():
			if err := r.land(ctx, err); err != nil {
				return err
			}
			continue
		case <-timer.C:
		}
		began := time.Now()
		if err := r.poll(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.lost(err)
		}
		// Polls begin PollEvery apart, however long each takes.
		next := max(r.c.cfg.PollEvery-time.Since(began), 0)
		if r.fails > 0 {
			next = collectors.Backoff(r.c.cfg.PollEvery, r.c.maxReconnect, r.fails-1, rand.Float64())
		}
		timer.Reset(next)
	}
}

// poll reads pg_locks once, connecting first if needed, and queues what
// changed since the last good poll.
func (r *run) poll(ctx context.Context) error {
	if r.conn == nil {
		if err := r.dial(ctx); err != nil {
			return err
		}
	}
	rd, err := r.read(ctx)
	if err != nil {
		return err
	}
	in, changed, err := r.observe(ctx, rd)
	if err != nil {
		return err
	}
	if changed {
		r.queue(ctx, in)
	}
	return nil
}

// lost starts a blind window at the last good poll, once, and drops the
// connection.
func (r *run) lost(err error) {
	r.fails++
	if r.blind == nil {
		r.blind = &audit.Blind{From: r.seenAt, Reason: "polling pg_locks failed: " + err.Error()}
		r.c.log.Warn("poll failed; blind until the next good poll", "err", err)
	}
	r.hangUp()
}

func (r *run) dial(ctx context.Context) error {
	conn, err := r.c.connect(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	r.conn, r.dbs = conn, r.c.databases(conn)
	return nil
}

// read polls with a deadline, so that a server that stopped answering is
// a failed poll, not a hung collector.
func (r *run) read(ctx context.Context) (reading, error) {
	ctx, cancel := context.WithTimeout(ctx, r.deadline())
	defer cancel()
	rd, err := readLocks(ctx, r.conn, r.dbs)
	if err != nil {
		return rd, fmt.Errorf("poll: %w", err)
	}
	return rd, nil
}

// deadline bounds one poll's queries (WithPollDeadline).
func (r *run) deadline() time.Duration { return r.c.deadline }

// observe compares rd with the last good poll and returns the input that
// records the difference, and whether there is any: the handovers, and
// after a blind window the window itself and a snapshot of every held lock.
// The state moves on to rd only once nothing can fail.
func (r *run) observe(ctx context.Context, rd reading) (audit.Input, bool, error) {
	now := r.c.now()
	prev := r.last
	cur := newState(rd.at, rd.postmaster, rd.rows, prev)
	cur.abnormal = rd.abnormal
	blind := r.blind
	restarted := prev != nil && !prev.postmaster.Equal(rd.postmaster)
	if restarted && blind == nil {
		// The connection outlived no restart, so this cannot happen; but
		// if it did, the time since the last poll is unseen all the same.
		blind = &audit.Blind{From: r.seenAt}
	}
	if restarted {
		blind.Reason = fmt.Sprintf("the server restarted (started %s, was %s), which ends every session",
			startCursor(rd.postmaster), startCursor(prev.postmaster))
	}
	ended, granted := handovers(prev, cur)
	var obs []audit.Observation
	if restarted {
		for _, h := range ended {
			obs = append(obs, r.obs.restarted(h, now))
		}
	} else if len(ended) > 0 {
		fs, abnormal, err := r.fates(ctx, ended)
		if err != nil {
			return audit.Input{}, false, err
		}
		for _, h := range ended {
			f := fs[h.s.id()]
			if !f.alive {
				before, ok := prev.abnormal[h.db]
				f.counted, f.abnormal = ok, abnormal[h.db]-before
			}
			obs = append(obs, r.obs.end(h, prev, f, now, blind != nil))
		}
		cur.abnormal = abnormal // the next poll counts from here
	}
	first := prev == nil
	if first || blind != nil {
		granted = sortedHolds(cur) // a snapshot lists every held lock
	}
	for _, h := range granted {
		obs = append(obs, r.obs.grant(h, prev, cur, now, blind != nil))
	}
	in := audit.Input{Source: r.c.cfg.Name, Kind: Backend.Kind, At: now, Observations: obs,
		Cursor: startCursor(rd.postmaster), Live: true}
	if blind != nil {
		blind.To = now
		in.Blind = blind
	}
	in.Snapshot = first || blind != nil
	r.last, r.seenAt, r.blind, r.fails = cur, now, nil, 0
	if r.c.polled != nil {
		r.c.polled(cur)
	}
	return in, len(obs) > 0 || in.Snapshot, nil
}

func (r *run) fates(ctx context.Context, ended []*hold) (map[sessionID]fate, map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.deadline())
	defer cancel()
	fs, abnormal, err := fates(ctx, r.conn, ended, r.dbs)
	if err != nil {
		return nil, nil, fmt.Errorf("read the sessions of ended holds: %w", err)
	}
	return fs, abnormal, nil
}

// startCursor is the input's cursor: when the server started, so that a
// restarted collector can tell whether the server restarted meanwhile.
func startCursor(postmaster time.Time) string { return postmaster.UTC().Format(time.RFC3339Nano) }

func sortedHolds(st *state) []*hold {
	_, all := handovers(nil, st)
	return all
}

// The loop never waits for a commit: what it observes while an input is
// in flight (collectors.Flight) gathers into the held input, handed to
// the sink once the one before it is durable.

// queue adds in to the input held for the sink and hands it over unless
// one is in flight.
func (r *run) queue(ctx context.Context, in audit.Input) {
	if p := r.flight.Held(); p != nil {
		// Still a snapshot: what the earlier input lists of every held lock,
		// and what changed since.
		in.Observations = append(p.Observations, in.Observations...)
		in.Snapshot = in.Snapshot || p.Snapshot
		switch {
		case in.Blind == nil:
			in.Blind = p.Blind
		case p.Blind != nil:
			in.Blind.From = p.Blind.From
		}
	}
	r.flight.Hold(ctx, r.sink, in)
}

// land takes the outcome of the input in flight and hands over the pending
// one. An error stops the run: the Runner restarts it, and the restart is a
// blind window from the stored cursor.
func (r *run) land(ctx context.Context, err error) error {
	r.flight.Land()
	if err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("record: %w", err)
	}
	r.flight.Next(ctx, r.sink)
	return nil
}
