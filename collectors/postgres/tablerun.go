package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// recordError is a sink's failure to store an input: it stops the run,
// for the Runner to restart it from the stored cursor, where a failure of
// the server is ridden out.
type recordError struct{ err error }

func (e recordError) Error() string { return "record: " + e.err.Error() }
func (e recordError) Unwrap() error { return e.err }

// Run watches the source until ctx ends (returning nil): its advisory
// locks, its streamed lease tables and each polled one, each a part of its
// own (parts.go). It calls ready once every part's first input is durable.
// A part that fails before that, or whose input the sink fails to store,
// stops them all, for the Runner to restart them; later failures of the
// server are ridden out, each part connecting again with backoff.
func (c *Collector) Run(ctx context.Context, sink collectors.Sink, ready func()) error {
	streamed, polled := c.tables()
	fences := c.fenced()
	streams := len(streamed) > 0 || len(fences) > 0
	names := c.partNames(polled, streams)
	ps := newParts(sink, c.cfg.Name, names, len(c.cfg.Tables) > 0)
	if !streams {
		if err := c.dropSlot(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("the source streams no table, and its slot could not be dropped", "slot", SlotName(c.cfg.Name), "err", err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		first   error
		waiting = len(names)
	)
	partReady := func() {
		mu.Lock()
		defer mu.Unlock()
		if waiting--; waiting == 0 {
			ready()
		}
	}
	start := func(name string, run func(context.Context, *partSink, func()) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			err := run(ctx, ps.part(name), func() { once.Do(partReady) })
			if err != nil && ctx.Err() == nil {
				mu.Lock()
				first = cmpOr(first, err)
				mu.Unlock()
				cancel()
			}
		}()
	}
	if !c.cfg.NoAdvisory {
		start(advisoryPart, c.runAdvisory)
	}
	if streams {
		start(streamPart, func(ctx context.Context, s *partSink, ready func()) error {
			return (&streamRun{c: c, sink: s, tables: streamed, fences: fences}).run(ctx, ready)
		})
	}
	for _, m := range polled {
		start(pollPart+m.Table, func(ctx context.Context, s *partSink, ready func()) error {
			return c.runPoll(ctx, s, m, ready)
		})
	}
	wg.Wait()
	return first
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// tables splits the source's lease tables into those streamed and those
// polled.
func (c *Collector) tables() (streamed, polled []TableMapping) {
	for _, t := range c.cfg.Tables {
		switch {
		case t.Fence != nil:
		case t.Polled:
			polled = append(polled, t.Mapping)
		default:
			streamed = append(streamed, t.Mapping)
		}
	}
	return streamed, polled
}

// partNames names the source's parts.
func (c *Collector) partNames(polled []TableMapping, streams bool) []string {
	var names []string
	if !c.cfg.NoAdvisory {
		names = append(names, advisoryPart)
	}
	if streams {
		names = append(names, streamPart)
	}
	for _, m := range polled {
		names = append(names, pollPart+m.Table)
	}
	return names
}

// dropSlot drops the source's slot and publication, if it has them, for a
// source that streams no table (any longer): a slot nobody reads holds WAL
// forever. Only the name SlotName gives this source is dropped, never a
// slot in use: one being read is another process's (a second leasewatch
// with a source of the same name on this server, or a replica of this
// one still streaming), which is left, with a warning.
func (c *Collector) dropSlot(ctx context.Context) error {
	cc, err := c.connConfig()
	if err != nil {
		return err
	}
	s := &Stream{cfg: StreamConfig{ConnConfig: cc}}
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	name := SlotName(c.cfg.Name)
	var slot, active, pub bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1),
		EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1 AND active),
		EXISTS (SELECT FROM pg_publication WHERE pubname = $1
			AND pubowner = (SELECT oid FROM pg_roles WHERE rolname = current_user))`, name).Scan(&slot, &active, &pub)
	conn.Close(context.WithoutCancel(ctx))
	switch {
	case err != nil:
		return err
	case active:
		return fmt.Errorf("slot %s is being read by another process: left as it is", name)
	case !slot && !pub:
		return nil
	}
	if err := dropStream(ctx, s, c.cfg.Name); err != nil {
		return err
	}
	c.slot.retained.Store(-1)
	c.log.Info("dropped the slot and publication of tables no longer listed", "slot", name)
	return nil
}

// runAdvisory polls the advisory locks until ctx ends (returning nil). It
// calls ready once its first poll is durable. A failed first connection is
// returned; later failures are blind windows it rides out, connecting
// again with backoff.
func (c *Collector) runAdvisory(ctx context.Context, sink *partSink, ready func()) error {
	r := &run{c: c, sink: sink, obs: observer{source: c.cfg.Name}}
	defer r.close()
	if err := r.start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	ready()
	err := r.loop(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// tableInputs makes the inputs of observations of tables at time now (a
// poll's on the collector's clock, a stream batch's on the database's): one
// per clock, since HolderClock is the input's, with the
// cursor and blind window on the last. A snapshot stays one input, so as
// to list every held lock; its clock is the database's if the tables'
// differ, so that no clock_skew is judged from it.
func (c *Collector) tableInputs(tables []TableMapping, obs []audit.Observation, now time.Time, cursor string,
	snapshot bool, blind *audit.Blind) []audit.Input {
	base := audit.Input{Source: c.cfg.Name, Kind: Backend.Kind, At: now, Live: true, Snapshot: snapshot}
	byClock := map[Clock][]audit.Observation{}
	var clocks []Clock
	for i := range obs {
		obs[i].Lock.Source = c.cfg.Name // Rows names the lock only
	}
	for _, ob := range obs {
		clock := clockOf(tables, ob.Lock.Name)
		if _, ok := byClock[clock]; !ok {
			clocks = append(clocks, clock)
		}
		byClock[clock] = append(byClock[clock], ob)
	}
	if snapshot && len(clocks) > 1 || len(clocks) == 0 {
		in := base
		in.Observations, in.Cursor, in.Blind = obs, cursor, blind
		TableMapping{Clock: clockIfOne(clocks)}.MarkInput(&in)
		return []audit.Input{in}
	}
	ins := make([]audit.Input, 0, len(clocks))
	for i, clock := range clocks {
		in := base
		in.Observations = byClock[clock]
		TableMapping{Clock: clock}.MarkInput(&in)
		if i == len(clocks)-1 {
			in.Cursor, in.Blind = cursor, blind
		}
		ins = append(ins, in)
	}
	return ins
}

func clockIfOne(clocks []Clock) Clock {
	if len(clocks) == 1 {
		return clocks[0]
	}
	return DatabaseClock
}

// clockOf is the clock of the table whose lock name is.
func clockOf(tables []TableMapping, name string) Clock {
	for _, m := range tables {
		if strings.HasPrefix(name, m.Table+"/") {
			return cmpClock(m.Clock)
		}
	}
	return DatabaseClock
}

func cmpClock(c Clock) Clock {
	if c == "" {
		return DatabaseClock
	}
	return c
}

// record hands each input to the sink in turn.
func record(ctx context.Context, sink *partSink, ins []audit.Input) error {
	for _, in := range ins {
		if err := sink.Record(ctx, in); err != nil {
			return recordError{err}
		}
	}
	return nil
}

// runPoll polls the table m every PollEvery until ctx ends (returning
// nil). A failed poll is a blind window from the last good one to the
// next; a restart is one from the stored cursor, since a polled table
// keeps no history. Its share of the cursor is the time of its last read.
func (c *Collector) runPoll(ctx context.Context, sink *partSink, m TableMapping, ready func()) error {
	every := cmpDuration(c.cfg.PollEvery, DefaultPollEvery)
	p, err := NewPoller(m, every)
	if err != nil {
		return err
	}
	var (
		conn   *pgx.Conn
		blind  *audit.Blind
		fails  int
		lastAt time.Time
		ready1 bool
	)
	defer func() { hangUp(conn) }()
	if stored, at := sink.Cursor(""); stored != "" {
		blind = &audit.Blind{From: at, Reason: "the collector was stopped; a polled table keeps no history"}
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		began := time.Now()
		b, err := c.pollOnce(ctx, &conn, p)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && !ready1:
			return fmt.Errorf("%s: %w", m.Table, err)
		case err != nil:
			fails++
			if blind == nil {
				blind = &audit.Blind{From: lastAt, Reason: fmt.Sprintf("polling %s failed: %v", m.Table, err)}
				c.log.Warn("poll failed; blind until the next good poll", "table", m.Table, "err", err)
			}
			sink.setDown(true)
			hangUp(conn)
			conn = nil
			timer.Reset(collectors.Backoff(every, c.maxReconnect, fails-1, rand.Float64()))
			continue
		}
		now := c.now()
		if blind != nil {
			blind.To = now
		}
		in := c.tableInputs([]TableMapping{m}, b.Observations, now, now.UTC().Format(time.RFC3339Nano), b.Snapshot, blind)
		if err := record(ctx, sink, in); err != nil {
			return err
		}
		blind, fails, lastAt = nil, 0, now
		sink.setDown(false)
		if !ready1 {
			ready1 = true
			ready()
		}
		timer.Reset(max(every-time.Since(began), 0))
	}
}

// pollOnce reads the table once, connecting first if need be.
func (c *Collector) pollOnce(ctx context.Context, conn **pgx.Conn, p *Poller) (Batch, error) {
	if *conn == nil {
		cn, err := c.connect(ctx)
		if err != nil {
			return Batch{}, fmt.Errorf("connect: %w", err)
		}
		*conn = cn
	}
	ctx, cancel := context.WithTimeout(ctx, c.deadline)
	defer cancel()
	return p.Poll(ctx, *conn)
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// hangUp closes conn, if any, waiting a second at most for a server that
// stopped answering.
func hangUp(conn *pgx.Conn) {
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn.Close(ctx)
}

// streamRun is the part of a source that streams its published tables.
type streamRun struct {
	c      *Collector
	sink   *partSink
	tables []TableMapping
	fences []FenceMapping
	blind  *audit.Blind
	fails  int
	ready  bool
}

// run follows the stream until ctx ends (returning nil). After a failure
// it starts again from the stored cursor, with backoff: the slot kept
// every change since, so nothing is lost and nothing is blind. A lost slot
// is a blind window from the stored cursor to a new slot's snapshot.
func (r *streamRun) run(ctx context.Context, ready func()) error {
	for {
		err := r.follow(ctx, ready)
		var rec recordError
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &rec), !r.ready:
			return err
		}
		r.fails++
		r.sink.setDown(true)
		r.c.log.Warn("the lease tables' stream failed; starting again from the stored cursor", "err", err)
		if !collectors.Sleep(ctx, collectors.Backoff(time.Second, r.c.maxReconnect, r.fails-1, rand.Float64())) {
			return nil
		}
	}
}

// follow starts the stream from the stored cursor, or from a new slot
// when the stored one is lost, and records its batches until it fails.
func (r *streamRun) follow(ctx context.Context, ready func()) error {
	cc, err := r.c.connConfig()
	if err != nil {
		return err
	}
	// A keepalive every poll_every, at least a second apart, vouches that
	// nothing changed: the tables' leases run out by the clock only up to
	// what the stream vouched for.
	cfg := StreamConfig{Source: r.c.cfg.Name, Tables: r.tables, Fences: r.fences, ConnConfig: cc, Heartbeats: true,
		StatusInterval: max(cmpDuration(r.c.cfg.PollEvery, DefaultPollEvery), time.Second)}
	s, err := NewStream(cfg)
	if err != nil {
		return err
	}
	defer func() { s.Close(context.WithoutCancel(ctx)) }()
	stored, at := r.sink.Cursor("")
	first, err := s.Start(ctx, stored)
	if errors.Is(err, ErrSlotLost) {
		r.c.log.Warn("the source's slot is lost; a new one starts from a snapshot", "err", err)
		from := at
		if r.blind != nil {
			from = r.blind.From
		}
		r.blind = &audit.Blind{From: from, Reason: "the replication slot was lost: the changes since the stored cursor are gone (" + err.Error() + ")"}
		if s, err = NewStream(cfg); err != nil {
			return err
		}
		first, err = s.Start(ctx, "")
	}
	if err != nil {
		return err
	}
	if first != nil {
		if err := r.batch(ctx, s, *first); err != nil {
			return err
		}
	}
	r.sink.setDown(false)
	r.fails = 0
	if !r.ready {
		r.ready = true
		ready()
	}
	stop := r.c.watchSlot(ctx, cc)
	defer stop()
	return r.read(ctx, s)
}

// read records the stream's batches as they come, one record in flight
// while it reads on (streamFlight), until the stream or a record fails.
func (r *streamRun) read(ctx context.Context, s *Stream) error {
	f := &streamFlight{r: r}
	defer f.stop()
	for {
		if err := f.land(ctx, s, f.full()); err != nil {
			return err
		}
		b, err := s.Next(f.context(ctx))
		switch {
		case err != nil && ctx.Err() == nil && f.context(ctx).Err() != nil:
			continue // the record in flight landed
		case err != nil:
			return err
		}
		if err := f.add(ctx, s, b); err != nil {
			return err
		}
	}
}

// batch records b, and only then confirms its position to the server.
func (r *streamRun) batch(ctx context.Context, s *Stream, b StreamBatch) error {
	ins, err := r.inputs(s, b)
	if err != nil {
		return err
	}
	if err := record(ctx, r.sink, ins); err != nil {
		return err
	}
	r.blind = nil
	if !b.Moved {
		return nil // a heartbeat: nothing to confirm
	}
	return s.Confirm(ctx, b.Position)
}
