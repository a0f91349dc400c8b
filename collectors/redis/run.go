package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

// run is one Run of the collector. Its instances only move data; the run
// owns the lock state (kept on the Collector across runs) and records it.
type run struct {
	c       *Collector
	sink    collectors.Sink
	log     *slog.Logger
	insts   []*instance
	clients []*goredis.Client
	msgs    chan instMsg

	up         []bool
	live       []time.Time // per instance: every change up to then is reported
	lastLive   time.Time   // the last time vouched for to the tracker
	belowSince time.Time   // when fewer than a quorum became reachable; zero while enough are
	// goodUntil is the last moment the run knew it saw the source; a
	// restarted run is blind from there.
	goodUntil time.Time
	wasUp     bool        // the first snapshot was recorded
	inflight  []submitted // oldest first
}

// seenCursor is the cursor every input stores: Redis cannot resume, so only
// the time it is stored at matters.
const seenCursor = "seen"

func newRun(c *Collector, sink collectors.Sink) *run {
	n := len(c.cfg.Addrs)
	r := &run{c: c, sink: sink, log: c.log, msgs: make(chan instMsg), up: make([]bool, n), live: make([]time.Time, n)}
	c.mu.Lock()
	lastGood, lastErr := c.lastGood, c.lastErr
	runIDs := append([]string(nil), c.runIDs...)
	c.mu.Unlock()
	reason := "the collector restarted after: " + lastErr
	if pos, at := sink.Cursor(c.cfg.Name); lastGood.IsZero() && pos != "" && !at.IsZero() {
		// A new process on a database that saw this source before: Redis
		// keeps no history, so everything since the stored cursor is unseen.
		lastGood, reason = at, "leasewatch was not watching (stopped or restarted); Redis keeps no history to replay"
	}
	for i, addr := range c.cfg.Addrs {
		cli := c.client(addr)
		in := &instance{
			c: c, idx: i, addr: addr, client: cli, out: r.msgs,
			log:    c.log.With("addr", addr),
			prefix: fmt.Sprintf("__keyspace@%d__:", c.cfg.DB),
			runID:  runIDs[i],
		}
		if !lastGood.IsZero() {
			in.blindFrom, in.blindReason = lastGood, reason
			in.lastSeen = lastGood
		}
		r.clients = append(r.clients, cli)
		r.insts = append(r.insts, in)
	}
	return r
}

func (r *run) close() {
	for _, cli := range r.clients {
		cli.Close()
	}
}

func (r *run) run(ctx context.Context, ready func()) error {
	ictx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for _, in := range r.insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in.loop(ictx)
		}()
	}

	queued, err := r.start(ctx)
	if err != nil {
		return err
	}
	r.wasUp = true
	ready()
	for _, m := range queued {
		if err := r.handle(ctx, m); err != nil {
			return err
		}
	}

	tick := time.NewTicker(liveEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-r.msgs:
			if err := r.handle(ctx, m); err != nil {
				return err
			}
		case <-tick.C:
			now := r.c.now()
			if !r.belowSince.IsZero() && now.Sub(r.belowSince) > r.c.giveUpAfter {
				return fmt.Errorf("fewer than %d of %d redis instances reachable for %s", r.c.cfg.Quorum, len(r.insts), now.Sub(r.belowSince).Round(time.Second))
			}
			var obs []audit.Observation
			for i, st := range r.c.states {
				obs = append(obs, r.c.comb.apply(i, st.resolvePending(r.live[i]))...)
			}
			if err := r.record(ctx, audit.Input{Observations: obs}); err != nil {
				return err
			}
			if err := r.vouch(ctx); err != nil {
				return err
			}
		}
	}
}

// start waits until every instance has connected and scanned or failed
// once, then records the first snapshot from those that are up. Messages
// that arrive meanwhile are returned, to handle after it.
func (r *run) start(ctx context.Context) ([]instMsg, error) {
	n := len(r.insts)
	answered := make([]bool, n)
	var (
		queued []instMsg
		scans  []instMsg
		errs   []error
	)
	for left := n; left > 0; {
		var m instMsg
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case m = <-r.msgs:
		}
		if answered[m.inst] {
			queued = append(queued, m)
			continue
		}
		switch m.kind {
		case msgScan:
			answered[m.inst] = true
			left--
			scans = append(scans, m)
		case msgDown:
			answered[m.inst] = true
			left--
			errs = append(errs, m.err)
			r.down(m)
		default:
			queued = append(queued, m)
		}
	}
	if len(scans) < r.c.cfg.Quorum {
		err := errors.Join(errs...)
		if n == 1 {
			return nil, err
		}
		return nil, fmt.Errorf("%d of %d redis instances reachable, %d needed: %w", len(scans), n, r.c.cfg.Quorum, err)
	}

	var blinds []*audit.Blind
	at := r.c.now()
	for _, m := range scans {
		r.replace(m)
		blinds = append(blinds, m.blind)
		if m.at.After(at) {
			at = m.at
		}
	}
	blind := joinBlinds(blinds)
	kind, inferred := audit.EventObserved, false
	if blind != nil {
		// After a gap the holds found are grants the collector did not see.
		kind, inferred = audit.EventGrant, true
	}
	obs, _ := r.c.comb.resync(at, kind, inferred)
	in := audit.Input{At: at, Blind: blind, Observations: obs, Snapshot: true}
	if err := r.record(ctx, in); err != nil {
		return nil, err
	}
	if err := r.vouch(ctx); err != nil {
		return nil, err
	}
	if err := r.settle(0); err != nil {
		return nil, err
	}
	r.log.Info("snapshot recorded", "held", len(obs), "instances", fmt.Sprintf("%d/%d", len(scans), n), "blind", blind != nil)
	return queued, nil
}

// handle applies one instance's report, and vouches for what the instances
// have reported.
func (r *run) handle(ctx context.Context, m instMsg) error {
	if err := r.apply(ctx, m); err != nil {
		return err
	}
	if m.live.After(r.live[m.inst]) {
		r.live[m.inst] = m.live
	}
	if r.c.now().Sub(r.lastLive) < liveEvery {
		return nil
	}
	return r.vouch(ctx)
}

// vouch tells the tracker up to when every change of the reachable
// instances is recorded (audit.Input.Live), so its clock may expire leases up
// to then: not past a hold found gone whose end event has not come, nor
// while fewer than a quorum of instances are reachable.
func (r *run) vouch(ctx context.Context) error {
	if r.reachable() < r.c.cfg.Quorum {
		return nil
	}
	var live time.Time
	for i, up := range r.up {
		if up && (live.IsZero() || r.live[i].Before(live)) {
			live = r.live[i]
		}
	}
	for _, st := range r.c.states {
		if w := st.oldestWaiting(); !w.IsZero() && w.Before(live) {
			live = w
		}
	}
	if live.IsZero() || !live.After(r.lastLive) {
		return nil
	}
	// Live vouches for every change up to then: only once all before it
	// are durable.
	if err := r.settle(0); err != nil {
		return err
	}
	if err := r.record(ctx, audit.Input{At: live, Live: true}); err != nil {
		return err
	}
	r.lastLive = live
	return nil
}

// apply applies one instance's report.
func (r *run) apply(ctx context.Context, m instMsg) error {
	switch m.kind {
	case msgDown:
		r.down(m)
		return nil
	case msgScan:
		r.replace(m)
		if !m.first && m.blind == nil {
			// A poll while connected: only what changed, so ten
			// thousand unchanged locks cost the tracker nothing.
			obs := r.c.comb.reconcile(m.at, nil)
			if len(obs) == 0 {
				r.goodUntil = m.at
				return nil
			}
			return r.record(ctx, audit.Input{At: m.at, Observations: obs})
		}
		obs, _ := r.c.comb.resync(m.at, audit.EventGrant, true)
		if m.blind != nil {
			r.log.Warn("blind window", "from", m.blind.From, "to", m.blind.To, "reason", m.blind.Reason)
		}
		return r.record(ctx, audit.Input{At: m.at, Blind: m.blind, Observations: obs, Snapshot: true})
	case msgPass:
		// A page of a periodic pass, and at its end the keys it never
		// found: only what changed, as for a poll.
		//
		// A key the pass found gone (SCAN listed it, but it was gone when
		// read) or never found is gone, but its notifications may still be
		// on their way behind a backlog: renewals first, then the end
		// event. Each is a read that found its key gone (applyEvents): its
		// hold waits for that end event, counting the renewals queued
		// ahead of it, and ends inferred once the stream has delivered
		// everything published before the read (resolvePending).
		st := r.c.states[m.inst]
		var obs []audit.Observation
		read := make(map[string]holding, len(m.scan))
		for _, rd := range m.scan {
			h, ok := r.c.rule.decode(rd)
			if !ok {
				obs = append(obs, r.c.comb.apply(m.inst, st.gone(rd.Key, rd.At, passGone))...)
				continue
			}
			read[rd.Key] = h
		}
		if m.seen != nil {
			for _, key := range st.unseen(m.seen, m.since) {
				obs = append(obs, r.c.comb.apply(m.inst, st.gone(key, m.at, passGone))...)
			}
		}
		keys := st.reconcile(read)
		holds := make(map[string]*holding, len(keys))
		for _, key := range keys {
			if ks := st.keys[key]; ks != nil && ks.cur != nil {
				holds[key] = ks.cur
			}
		}
		r.c.comb.replaceKeys(m.inst, keys, holds)
		obs = append(obs, r.c.comb.reconcile(m.at, keys)...)
		if len(obs) == 0 {
			r.goodUntil = m.at
			return nil
		}
		return r.record(ctx, audit.Input{At: m.at, Observations: obs})
	case msgEvents:
		st := r.c.states[m.inst]
		obs := make([]audit.Observation, 0, len(m.batch)) // about one per key
		for _, ke := range m.batch {
			h, present := r.c.rule.decode(ke.rd)
			changes := st.applyEvents(ke.key, ke.events, present, h, r.c.rule.vanished(ke.rd))
			obs = append(obs, r.c.comb.apply(m.inst, changes)...)
		}
		if len(obs) == 0 {
			r.goodUntil = m.at
			return nil
		}
		return r.record(ctx, audit.Input{At: m.at, Observations: obs, Behind: m.behind})
	}
	return nil
}

// replace makes a scan the instance's state and marks it reachable.
func (r *run) replace(m instMsg) {
	holds := make(map[string]holding, len(m.scan))
	for _, rd := range m.scan {
		if h, ok := r.c.rule.decode(rd); ok {
			holds[rd.Key] = h
		}
	}
	st := r.c.states[m.inst]
	st.replace(holds)
	r.c.comb.replace(m.inst, st.holds())
	r.up[m.inst] = true
	if r.reachable() >= r.c.cfg.Quorum {
		r.belowSince = time.Time{}
	}
	r.c.setReach(m.inst, "")
}

// down marks an instance unreachable.
func (r *run) down(m instMsg) {
	r.up[m.inst] = false
	if len(r.insts) > 1 {
		r.c.setReach(m.inst, fmt.Sprintf("redis at %s unreachable: %v", r.insts[m.inst].addr, m.err))
	}
	if r.reachable() < r.c.cfg.Quorum && r.belowSince.IsZero() {
		r.belowSince = m.from
		if r.belowSince.IsZero() {
			r.belowSince = m.at
		}
		r.goodUntil = r.belowSince
	}
}

func (r *run) reachable() int {
	n := 0
	for _, up := range r.up {
		if up {
			n++
		}
	}
	return n
}

// record hands one input to the sink. It returns before the input is durable
// when the sink is a collectors.Submitter; settle waits for it.
func (r *run) record(ctx context.Context, in audit.Input) error {
	if len(in.Observations) == 0 && in.Blind == nil && !in.Snapshot && !in.Live {
		return nil
	}
	in.Source, in.Kind, in.ExpireByClock = r.c.cfg.Name, audit.KindRedis, true
	// Redis has no resume position; the cursor only records, with its time,
	// how far the source was seen, so a restarted leasewatch knows where its
	// blind window starts.
	in.Cursor = seenCursor
	in.SequentialTokens = r.c.rule.sequential()
	if in.At.IsZero() {
		in.At = r.c.now()
	}
	sent := submitted{n: len(in.Observations)}
	if r.belowSince.IsZero() {
		sent.good = in.At
	}
	sub, ok := r.sink.(collectors.Submitter)
	if !ok {
		sent.wait = func() error { return r.sink.Record(ctx, in) }
		r.inflight = append(r.inflight, sent)
		return r.settle(0)
	}
	// Keep reading Redis while the recorder commits: a few inputs in
	// flight, settled in order.
	sent.wait = sub.Submit(ctx, in)
	r.inflight = append(r.inflight, sent)
	return r.settle(maxInFlight)
}

// submitted is an input handed to the sink and not yet known durable.
type submitted struct {
	n    int       // observations
	good time.Time // what goodUntil becomes once durable; zero: unchanged
	wait func() error
}

// maxInFlight bounds the inputs a run submits before waiting for the oldest.
const maxInFlight = 8

// settle waits for the oldest submitted inputs until at most keep remain.
func (r *run) settle(keep int) error {
	for len(r.inflight) > keep {
		sent := r.inflight[0]
		r.inflight = r.inflight[1:]
		if err := sent.wait(); err != nil {
			r.inflight = nil
			return fmt.Errorf("record %d observation(s): %w", sent.n, err)
		}
		if !sent.good.IsZero() {
			r.goodUntil = sent.good
		}
	}
	return nil
}
