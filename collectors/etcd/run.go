package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

const (
	// stallRetry is how soon a progress request is repeated while one
	// prefix's events wait for the other prefixes' watches to catch up (etcd
	// ignores the request while any watch on the stream is still syncing).
	stallRetry = 100 * time.Millisecond
	// pollParallel bounds concurrent LeaseTimeToLive calls in one poll
	// round or one batch of ends. A renewal counts its lag from the read
	// that showed it, and a round's readings are used once all are in.
	pollParallel = 16
)

// run is one Run of the collector: its picture of the locks lives exactly as
// long as the connection that built it, so a restart rebuilds it from the
// stored cursor.
type run struct {
	c    *Collector
	cli  *clientv3.Client
	sink collectors.Sink
	log  *slog.Logger
	now  func() time.Time

	st      *locks
	leases  map[int64]leaseInfo // the owners' leases
	rev     int64               // the revision the last durable input covers
	revAt   time.Time           // when the collector reached rev
	applied int64               // the revision st covers: rev, or later while inputs wait
	heads   headTimes           // when responses showed the head at a revision

	// pending collects what the collector saw while the input before it
	// commits in flight. Batching keeps the commits few however fast etcd
	// changes.
	pending *audit.Input
	flight  collectors.Flight

	progressBusy atomic.Bool // a progress request is in flight
}

func newRun(c *Collector, cli *clientv3.Client, sink collectors.Sink) *run {
	return &run{
		c: c, cli: cli, sink: sink, log: c.log, now: c.now,
		st:     newLocks(c.prefixes),
		leases: make(map[int64]leaseInfo),
	}
}

// compactedError reports that a watch's start revision was compacted away.
type compactedError struct {
	prefix     string
	compactRev int64
}

func (e *compactedError) Error() string {
	return fmt.Sprintf("watch %q: history before revision %d was compacted", e.prefix, e.compactRev)
}

func (r *run) run(ctx context.Context, ready func()) error {
	if err := r.start(ctx); err != nil {
		return err
	}
	ready()
	for {
		err := r.watch(ctx)
		var ce *compactedError
		if !errors.As(err, &ce) || ctx.Err() != nil {
			return err
		}
		r.log.Warn("watch history compacted; taking a new snapshot", "from_rev", r.rev+1, "compact_rev", ce.compactRev)
		blind := &audit.Blind{From: r.revAt, Reason: fmt.Sprintf("etcd compaction: revisions %d to %d are gone", r.rev+1, ce.compactRev-1)}
		if err := r.snapshot(ctx, blind); err != nil {
			return err
		}
	}
}

// start takes the first snapshot, or resumes from the stored cursor by
// rebuilding the picture as of that revision. The tracker already knows that
// state, so a resume records nothing until the watch brings something new.
func (r *run) start(ctx context.Context) error {
	pos, at := r.sink.Cursor(r.c.cfg.Name)
	if pos == "" {
		return r.snapshot(ctx, nil)
	}
	cur, err := strconv.ParseInt(pos, 10, 64)
	if err != nil || cur <= 0 {
		return r.snapshot(ctx, &audit.Blind{From: at, Reason: fmt.Sprintf("stored cursor %q is not an etcd revision", pos)})
	}
	kvs, _, err := r.read(ctx, cur)
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		r.log.Warn("stored cursor was compacted away; taking a new snapshot", "cursor", cur)
		return r.snapshot(ctx, &audit.Blind{From: at, Reason: fmt.Sprintf("etcd compaction: the history after revision %d is gone", cur)})
	case errors.Is(err, rpctypes.ErrFutureRev):
		r.log.Warn("stored cursor is ahead of etcd; taking a new snapshot", "cursor", cur)
		return r.snapshot(ctx, &audit.Blind{From: at, Reason: fmt.Sprintf("stored cursor %d is ahead of etcd's revision: was the cluster restored or replaced?", cur)})
	case err != nil:
		return err
	}
	r.st.reload(kvs)
	r.grantTimeHolders(ctx)
	if err := r.baseline(ctx, r.st.ownerLeases()); err != nil {
		return err
	}
	r.rev, r.revAt, r.applied = cur, at, cur
	r.log.Info("resumed", "revision", cur, "held", len(r.st.held))
	return nil
}

// grantTimeHolders restores, after a resume, the holder strings as they were
// at grant: an election leader may have proclaimed a new value since, but the
// tenure the tracker knows carries the old one. The value at the key's
// creation is the best record of it; where that history is compacted the
// current value stays.
func (r *run) grantTimeHolders(ctx context.Context) {
	for _, h := range r.st.holdings() {
		e, ok := r.st.entry(h.key)
		if !ok || e.version <= 1 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, r.c.cfg.DialTimeout)
		resp, err := r.cli.Get(cctx, h.key, clientv3.WithRev(h.createRev))
		cancel()
		if err != nil || len(resp.Kvs) == 0 {
			continue
		}
		r.st.setHolder(h.lock, holderOf(h.lease, string(resp.Kvs[0].Value)))
	}
}

// snapshot reads every prefix at the head revision and records every held
// lock in one Snapshot input: as observed on a first start, or, after a blind
// window, as an inferred grant (the tracker keeps a tenure whose holder and
// token did not change, and ends the ones that are gone).
func (r *run) snapshot(ctx context.Context, blind *audit.Blind) error {
	kvs, rev, err := r.read(ctx, 0)
	if err != nil {
		return err
	}
	held := r.st.reload(kvs)
	r.pruneLeases()
	leases := r.st.ownerLeases()
	for _, id := range leases {
		delete(r.leases, id) // a fresh baseline: the gap hides any renewals
	}
	if err := r.baseline(ctx, leases); err != nil {
		return err
	}
	now := r.now()
	kind, inferred := audit.EventObserved, false
	if blind != nil {
		kind, inferred = audit.EventGrant, true
		blind.To = now
	}
	pos := strconv.FormatInt(rev, 10)
	obs := make([]audit.Observation, 0, len(held))
	for _, h := range held {
		ob := r.observation(h, kind, now, pos)
		ob.Inferred = inferred
		obs = append(obs, ob)
	}
	in := r.input()
	in.At, in.Blind, in.Observations, in.Cursor, in.Snapshot = now, blind, obs, pos, true
	if err := r.sink.Record(ctx, in); err != nil {
		return fmt.Errorf("record snapshot at revision %d: %w", rev, err)
	}
	r.rev, r.revAt, r.applied = rev, now, rev
	r.log.Info("snapshot recorded", "revision", rev, "held", len(held), "blind", blind != nil)
	return nil
}

// read returns every key under the prefixes at revision rev (0: the head,
// which it returns), reading each prefix at the same revision.
func (r *run) read(ctx context.Context, rev int64) ([]*mvccpb.KeyValue, int64, error) {
	var kvs []*mvccpb.KeyValue
	for _, p := range r.c.prefixes {
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		cctx, cancel := context.WithTimeout(ctx, r.c.cfg.DialTimeout)
		resp, err := r.cli.Get(cctx, p, opts...)
		cancel()
		if err != nil {
			return nil, 0, fmt.Errorf("read %q at revision %d: %w", p, rev, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		kvs = append(kvs, resp.Kvs...)
	}
	return kvs, rev, nil
}

// watch follows every prefix from the revision after r.rev until ctx ends or
// a watch fails. Each prefix has its own watch, and etcd orders events only
// within one watch, so a merger holds events back until every watch has
// reached their revision; one cursor then covers them all.
//
// The loop never waits for a commit: the changes it applies while one input
// commits go into the next, so a busy etcd makes bigger inputs rather than a
// backlog in the watch stream.
func (r *run) watch(ctx context.Context) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	var wg sync.WaitGroup
	defer r.flight.Wait()
	defer wg.Wait()
	defer cancel()

	q := &inbox{ready: make(chan struct{}, 1)}
	prefixes := r.c.prefixes
	for i, p := range prefixes {
		wch := r.cli.Watch(wctx, p, clientv3.WithPrefix(), clientv3.WithRev(r.rev+1),
			clientv3.WithPrevKV(), clientv3.WithProgressNotify())
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Every response is taken as it arrives and stamped with its
			// receipt, however busy the loop is, so the time a change
			// waits for the loop counts as its lag.
			for wr := range wch {
				q.push(message{i: i, wr: wr, at: r.now()})
			}
			q.push(message{i: i, closed: true})
		}()
	}

	// The client retries a broken connection forever and a watch just goes
	// quiet, so silence is the sign that etcd is out of reach: progress
	// requests are answered every progressEvery while it is there.
	silence := max(4*r.c.progressEvery, 2*r.c.cfg.DialTimeout)
	heard := time.Now()

	m := newMerger(len(prefixes), r.rev)
	poll := time.NewTicker(r.c.cfg.PollInterval)
	defer poll.Stop()
	progress := time.NewTicker(r.c.progressEvery)
	defer progress.Stop()
	var retry <-chan time.Time
	polled := make(chan map[int64]ttlReading)
	polling := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-q.ready:
			for _, msg := range q.take() {
				if msg.closed {
					return fmt.Errorf("watch %q closed", prefixes[msg.i])
				}
				if err := msg.wr.Err(); err != nil {
					if errors.Is(err, rpctypes.ErrCompacted) {
						// What arrived before is sound: store it, so the
						// blind window starts where the history ends.
						if err := r.drain(ctx, m); err != nil {
							return err
						}
						if err := r.settle(ctx); err != nil {
							return err
						}
						return &compactedError{prefix: prefixes[msg.i], compactRev: msg.wr.CompactRevision}
					}
					return fmt.Errorf("watch %q: %w", prefixes[msg.i], err)
				}
				r.heads.add(msg.wr.Header.GetRevision(), msg.at)
				m.add(msg.i, msg.wr, msg.at)
			}
			if err := r.drain(ctx, m); err != nil {
				return err
			}
			heard = time.Now() // a long drain is no silence
			if m.stalled() && retry == nil {
				r.requestProgress(wctx, &wg)
				retry = time.After(stallRetry)
			}
		case err := <-r.flight.Landing():
			if err := r.land(err); err != nil {
				return err
			}
		case <-retry:
			retry = nil
			if m.stalled() {
				r.requestProgress(wctx, &wg)
				retry = time.After(stallRetry)
			}
		case <-progress.C:
			if quiet := time.Since(heard); quiet > silence {
				return fmt.Errorf("no word from etcd for %s", quiet.Round(time.Second))
			}
			r.requestProgress(wctx, &wg)
		case <-poll.C:
			// Reading TTLs must not hold up the watch, least of all while
			// etcd is unreachable, so a poll round runs on its own and its
			// answers are folded in here, between revisions.
			if polling || len(r.st.ownerLeases()) == 0 {
				continue
			}
			polling = true
			leases := r.st.ownerLeases()
			wg.Add(1)
			go func() {
				defer wg.Done()
				readings, _ := r.readTTLs(wctx, leases)
				select {
				case polled <- readings:
				case <-wctx.Done():
				}
			}()
		case readings := <-polled:
			polling = false
			if len(readings) > 0 {
				heard = time.Now()
			}
			r.recordRenewals(readings)
		}
		r.submit(ctx)
	}
}

// message is one watch response, or the end of a watch, and when the
// collector received it.
type message struct {
	i      int
	wr     clientv3.WatchResponse
	at     time.Time
	closed bool
}

// inbox queues the watches' messages for the loop without bound: etcd's
// client buffers a slow watcher's responses without bound anyway, and here
// they carry their receipt time.
type inbox struct {
	mu    sync.Mutex
	msgs  []message
	ready chan struct{} // signalled when msgs is not empty
}

func (q *inbox) push(m message) {
	q.mu.Lock()
	q.msgs = append(q.msgs, m)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *inbox) take() []message {
	q.mu.Lock()
	defer q.mu.Unlock()
	msgs := q.msgs
	q.msgs = nil
	return msgs
}

// requestProgress asks etcd to tell every watch on the stream how far it is,
// so a quiet prefix still advances the cursor. The request waits while the
// client reconnects, so it runs on its own, bounded by one progress interval.
// It must derive from the watches' context: the client picks the gRPC stream
// by the context's metadata.
func (r *run) requestProgress(wctx context.Context, wg *sync.WaitGroup) {
	if !r.progressBusy.CompareAndSwap(false, true) {
		return // one request at a time
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer r.progressBusy.Store(false)
		ctx, cancel := context.WithTimeout(wctx, r.c.progressEvery)
		defer cancel()
		if err := r.cli.RequestProgress(ctx); err != nil && wctx.Err() == nil {
			r.log.Debug("watch progress request failed", "err", err)
		}
	}()
}

// drain applies every revision all watches have reached and adds them to the
// pending input, whose cursor becomes that revision.
func (r *run) drain(ctx context.Context, m *merger) error {
	steps, horizon := m.take(r.applied)
	if horizon <= r.applied {
		return nil
	}
	obs, behind, err := r.observeSteps(ctx, steps)
	if err != nil {
		return err
	}
	r.pruneLeases()
	in := r.pendingInput()
	in.Observations = append(in.Observations, obs...)
	in.Cursor = strconv.FormatInt(horizon, 10)
	in.Behind = max(in.Behind, behind)
	r.applied = horizon
	r.heads.forget(horizon)
	return nil
}

// pendingInput returns the input being gathered for the next submission.
func (r *run) pendingInput() *audit.Input {
	if r.pending == nil {
		in := r.input()
		r.pending = &in
	}
	return r.pending
}

// submit hands the pending input to the sink unless one is in flight; the
// loop goes on reading etcd, and land learns the outcome.
//
// Every input carries the revision its picture covers as its cursor, one
// of renewals alone too: the polls that showed them were judged against
// the locks as of that revision, and every input before it, which covers
// as much, is stored by the time this one is.
func (r *run) submit(ctx context.Context) {
	if r.flight.Busy() || r.pending == nil {
		return
	}
	in := r.pending
	r.pending = nil
	in.At = r.now()
	in.Cursor = strconv.FormatInt(r.applied, 10)
	r.flight.Start(ctx, r.sink, *in)
}

// land takes the outcome of the input in flight. Only now does its cursor
// count as stored.
func (r *run) land(err error) error {
	in := r.flight.Land()
	if err != nil {
		return fmt.Errorf("record revision %s: %w", in.Cursor, err)
	}
	rev, _ := strconv.ParseInt(in.Cursor, 10, 64)
	r.rev, r.revAt = rev, in.At
	return nil
}

// settle submits what is pending and waits until all of it is durable.
func (r *run) settle(ctx context.Context) error {
	for r.flight.Busy() || r.pending != nil {
		r.submit(ctx)
		if err := r.land(<-r.flight.Landing()); err != nil {
			return err
		}
	}
	return nil
}

// observeSteps applies revisions in order and turns their changes into
// observations, and says how long the oldest of them had waited before the
// watch delivered it, as far as the collector can tell.
//
// An end is a release when the lease still holds other keys once the
// revision is applied: a revoke or expiry deletes every key of its lease at
// one revision. Otherwise the lease is read, once per lease however many
// ends share it, all of them concurrently and after the whole batch, so a
// burst of ends costs one round trip; a grant reads the new owner's lease
// for its duration the same way.
func (r *run) observeSteps(ctx context.Context, steps []step) ([]audit.Observation, time.Duration, error) {
	type seen struct {
		rev       int64
		at, since time.Time
		changes   []change
		alive     []bool // per change: its lease still held other keys
	}
	var (
		batch  []seen
		read   = make(map[int64]bool)
		last   time.Time
		behind time.Duration
	)
	for _, s := range steps {
		changes := r.st.apply(s.events)
		if len(changes) == 0 {
			continue
		}
		// Steps from different watches may arrive out of order; observation
		// times must not go back.
		at := s.at
		if at.Before(last) {
			at = last
		}
		last = at
		since := r.heads.since(s.rev, at)
		behind = max(behind, at.Sub(since))
		sn := seen{rev: s.rev, at: at, since: since, changes: changes, alive: make([]bool, len(changes))}
		for i, ch := range changes {
			lease := ch.h.lease
			switch {
			case lease == 0:
			case ch.kind == changeEnd && r.st.leaseKeys(lease) > 0:
				sn.alive[i] = true
			case ch.kind == changeEnd:
				read[lease] = true
			case !r.leases[lease].known():
				read[lease] = true
			}
		}
		batch = append(batch, sn)
	}
	var readings map[int64]ttlReading
	if len(read) > 0 {
		leases := make([]int64, 0, len(read))
		for id := range read {
			leases = append(leases, id)
		}
		var err error
		if readings, err = r.readTTLs(ctx, leases); err != nil {
			return nil, 0, err
		}
		r.sampleHeads(readings)
	}

	var obs []audit.Observation
	for _, sn := range batch {
		pos := strconv.FormatInt(sn.rev, 10)
		verdicts := make(map[int64]endVerdict)
		for i, ch := range sn.changes {
			h := ch.h
			switch ch.kind {
			case changeEnd:
				v, ok := verdicts[h.lease]
				switch {
				case ok:
				case sn.alive[i]:
					v = releasedKeyOnly()
				case h.lease == 0:
					v = classifyEnd(0, leaseInfo{}, -1, sn.since)
				default:
					v = classifyEnd(h.lease, r.leases[h.lease], readings[h.lease].ttl, sn.since)
				}
				verdicts[h.lease] = v
				ob := r.observation(h, v.kind, sn.at, pos)
				ob.RenewedAt = time.Time{}
				ob.Inferred, ob.Unjudged = v.inferred, v.unjudged
				for k, val := range v.detail {
					ob.Detail[k] = val
				}
				obs = append(obs, ob)
			case changeGrant:
				if rd, ok := readings[h.lease]; ok && !r.leases[h.lease].known() {
					r.leases[h.lease], _, _ = leaseInfo{}.fold(rd)
				}
				obs = append(obs, r.observation(h, audit.EventGrant, sn.at, pos))
			}
		}
	}
	return obs, behind, nil
}

// input is an empty input of the source, with what etcd's tokens and TTLs
// are: a lock key's CreateRevision names one tenure, and a RenewedAt
// estimated from a TTL is good to the second.
func (r *run) input() audit.Input {
	return audit.Input{Source: r.c.cfg.Name, Kind: audit.KindEtcd, TokenPerTenure: true, CoarseRenewals: true}
}

// observation describes holding h, its strings made text by
// collectors.AsText; LeaseDuration and RenewedAt come from the lease's last
// poll.
func (r *run) observation(h holding, kind audit.EventKind, at time.Time, pos string) audit.Observation {
	ob := audit.Observation{
		Lock:     audit.LockKey{Source: r.c.cfg.Name, Name: h.lock},
		Kind:     kind,
		At:       at,
		Holder:   h.holder,
		Token:    audit.Int64(h.createRev),
		Position: pos,
		Detail:   map[string]any{"key": h.key, "lease": leaseHex(h.lease)},
	}
	if li := r.leases[h.lease]; li.known() {
		ob.LeaseDuration = li.duration()
		if rn := li.lastRenewal(); !rn.After(at) {
			ob.RenewedAt = rn
		}
	}
	collectors.AsText(&ob)
	return ob
}

// recordRenewals folds a poll round's readings into what the collector
// knows of the owners' leases and adds the renewals they show to the pending
// input, after the changes already applied. Leases that stopped owning a
// lock while the round ran are skipped, and a reading older than one taken
// at a grant is ignored.
func (r *run) recordRenewals(readings map[int64]ttlReading) {
	r.sampleHeads(readings)
	var obs []audit.Observation
	holdings := r.st.holdings()
	for _, id := range r.st.ownerLeases() {
		rd, ok := readings[id]
		if !ok {
			continue
		}
		next, at, renewed := r.leases[id].fold(rd)
		r.leases[id] = next
		if !renewed {
			continue
		}
		for _, h := range holdings {
			if h.lease != id {
				continue
			}
			// At is the reading that showed the renewal; RenewedAt, when
			// the keepalive was, as well as whole-second TTLs tell.
			ob := r.observation(h, audit.EventRenew, rd.at, "")
			ob.RenewedAt = at
			// The key and lease are the tenure's, on its grant; renewals,
			// most of what is stored, carry only what they read.
			ob.Detail = map[string]any{"ttl_s": rd.ttl}
			obs = append(obs, ob)
		}
	}
	if len(obs) > 0 {
		in := r.pendingInput()
		in.Observations = append(in.Observations, obs...)
	}
}

// sampleHeads notes how far each reading showed etcd's head.
func (r *run) sampleHeads(readings map[int64]ttlReading) {
	for _, rd := range readings {
		if rd.rev > r.applied {
			r.heads.add(rd.rev, rd.at)
		}
	}
}

// baseline reads the leases and folds the readings into r.leases without
// reporting renewals, failing on the first error.
func (r *run) baseline(ctx context.Context, leases []int64) error {
	readings, err := r.readTTLs(ctx, leases)
	if err != nil {
		return err
	}
	for id, rd := range readings {
		r.leases[id], _, _ = r.leases[id].fold(rd)
	}
	return nil
}

// readTTLs reads the leases concurrently, at most pollParallel at a time,
// and returns the readings it got with the first error, if any. It runs off
// the loop too, so it leaves the readings' head revisions to sampleHeads.
func (r *run) readTTLs(ctx context.Context, leases []int64) (map[int64]ttlReading, error) {
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
		out      = make(map[int64]ttlReading, len(leases))
		sem      = make(chan struct{}, pollParallel)
	)
	for _, id := range leases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rd, err := r.ttl(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				if ctx.Err() == nil {
					r.log.Debug("lease read failed", "lease", leaseHex(id), "err", err)
				}
				return
			}
			out[id] = rd
		}()
	}
	wg.Wait()
	return out, firstErr
}

func (r *run) ttl(ctx context.Context, lease int64) (ttlReading, error) {
	cctx, cancel := context.WithTimeout(ctx, r.c.cfg.DialTimeout)
	defer cancel()
	resp, err := r.cli.TimeToLive(cctx, clientv3.LeaseID(lease))
	if err != nil {
		return ttlReading{}, fmt.Errorf("read lease %x: %w", lease, err)
	}
	return ttlReading{
		ttl: resp.TTL, granted: resp.GrantedTTL,
		term: resp.ResponseHeader.GetRaftTerm(), rev: resp.ResponseHeader.GetRevision(),
		at: r.now(),
	}, nil
}

// pruneLeases forgets leases that no longer own a lock.
func (r *run) pruneLeases() {
	owners := make(map[int64]bool)
	for _, id := range r.st.ownerLeases() {
		owners[id] = true
	}
	for id := range r.leases {
		if !owners[id] {
			delete(r.leases, id)
		}
	}
}
