package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Recorder owns the Tracker and the Journal's write side. Collectors, write
// reports and the clock reach the tracker through one goroutine, which group
// commits: it takes every request waiting, runs them through the tracker, and
// writes all their changes in one Journal transaction before answering any of
// them. So an acknowledged input or write report is durable, and a cursor is
// always stored with the events it covers.
//
// Renewals are durable as renew events at once, but the recorder writes the
// renewal columns of lock and tenure rows (Batch.Renewed) only every sync
// interval: a lock renewed many times in between is written once. Heartbeats,
// which the default views and filters leave out, are written only every
// heartbeat sync interval, with every other lock in the same round: that round
// alone marks the rows complete. After a crash the renew events since the last
// such round are replayed. Fresh overlays the renewals not yet in the rows on
// a Store's reads.
type Recorder struct {
	journal   Journal
	tracker   *Tracker
	log       *slog.Logger
	now       func() time.Time
	tick      time.Duration
	syncEvery time.Duration
	// heartbeatSyncEvery is how often the heartbeats' renewals reach the
	// rows: WithHeartbeatSyncInterval.
	heartbeatSyncEvery time.Duration
	maxGroup           int
	// commitEvery is the least time from one commit's start to the next's
	// under concurrent requests: WithCommitInterval. lastCommit is when the
	// last began, lastGroup how many requests it recorded.
	commitEvery time.Duration
	lastCommit  time.Time
	lastGroup   int
	// subscribers are WithSubscribers', handed each successful commit.
	subscribers []CommitSubscriber
	// onFenceRefused is WithFenceRefused's hook.
	onFenceRefused func(FenceRefusal)

	reqs    chan *request
	stop    chan struct{}
	stopped chan struct{}

	lastSync time.Time // recording goroutine only
	// lastMark is when the last round that wrote every held renewal, the
	// heartbeats' too, started; recording goroutine only.
	lastMark time.Time
	// lastProbe is when a tick last rewrote a stored cursor to see whether
	// the journal takes writes again; recording goroutine only.
	lastProbe time.Time
	// renewedNow are the renewals of the commit in progress, for its
	// Commit.Renewals; recording goroutine only.
	renewedNow []Renewal
	// writeOnly bounds the locks only write reports name; recording
	// goroutine only (and Start).
	writeOnly writeOnlyLocks
	// stale says a failed commit's reload of the tracker failed too (the
	// database went away), so the tracker holds steps the journal does not;
	// recording goroutine only. The next commit reloads first.
	stale bool
	// fences are the tokens of the sources this replica owns, which every
	// batch with their rows carries; disowned, the sources it gave up or a
	// newer owner took, with the refusal their requests get. Recording
	// goroutine only (and Start).
	fences   map[string]int64
	disowned map[string]error
	// owning is WithOwnership's: the recorder records only the sources it
	// owns (fences). roundSources are the sources the sync round in
	// progress claims, those owned when it started and still owned.
	// Recording goroutine only (and Start).
	owning       bool
	roundSources []string
	// own is WithOwnLocks'; lastRefusals is when the recorder last looked
	// for refusals to record. Recording goroutine only.
	own          OwnLocks
	lastRefusals time.Time

	// trackMu guards the tracker: the recording goroutine holds it to step
	// the tracker or restore it, Peek to read it.
	trackMu sync.RWMutex

	mu      sync.Mutex
	cursors map[string]Cursor
	// unsaved are renewals newer than the rows; written by the recording
	// goroutine only.
	unsaved unsavedRenewals
	// round are the locks the sync in progress has yet to write (see
	// syncChunk); recording goroutine only. partial says the round leaves
	// the heartbeats out, so it marks nothing.
	round   []LockKey
	partial bool
	err     error // the last write's error as requests got it; nil when healthy
	// failed is the last failed write's error, at failedAt: see readyAfter.
	failed   error
	failedAt time.Time
	closed   bool
}

// maxUnsaved bounds the locks whose renewals wait for a sync, and so the
// replay after a crash: past it the recorder syncs every one at once. Every
// heartbeat of a cluster has a renewal waiting between two heartbeat
// rounds, so it is well above the largest clusters' 130,000 nodes (at
// 100,000 such a cluster's every commit synced every lock).
const maxUnsaved = 1_000_000

// readyAfter is how long after a failed write the recorder stays unready
// although a later write worked: on a full disk a small write can land in
// space the database already holds while every write that needs more fails,
// and readiness should not flap with each of them.
const readyAfter = 5 * time.Second

// probeEvery is how often, while writes fail and nothing else is written, a
// tick rewrites a stored cursor unchanged: the journal's first successful
// write makes the recorder ready again without waiting for new input.
const probeEvery = time.Second

// syncChunk bounds the locks one commit syncs. A sync round writes every
// lock renewed since the last, spread over as many commits as it takes, so
// no commit holds collectors up for long: 10,000 locks in one commit took
// 300–400 ms.
const syncChunk = 1000

type request struct {
	input   *Input
	writes  []WriteReport
	beliefs []Belief
	fence   *fenceChange // SetFence or DropFence, alone in its request
	done    chan error
}

// RecorderOption configures a Recorder.
type RecorderOption func(*Recorder)

// WithClock injects the clock that drives expiry ticks.
func WithClock(now func() time.Time) RecorderOption { return func(r *Recorder) { r.now = now } }

// Commit describes one successful group commit, for the recorder's
// subscribers (WithSubscribers).
type Commit struct {
	At     time.Time // when it became durable, by the recorder's clock
	Inputs []*Input  // the collector inputs it covers
	Writes int       // the write reports it covers, retries included, refused requests not
	Batch  *Batch    // what it wrote
	// Renewals are the renewals it recorded (as renew events) whose lock
	// and tenure rows wait for a later sync: with Batch.Locks, what a
	// subscriber needs to keep every lock's state as the tracker has it.
	Renewals []Renewal
}

// CommitSubscriber follows what the recorder commits: metrics, alerts, the
// verdicts to judge again.
type CommitSubscriber interface {
	// Committed is called after every successful commit, on the recording
	// goroutine, which waits for it: it must be quick, and must not modify
	// the commit, which every subscriber is handed.
	Committed(Commit)
}

// CommitFunc is a function as a CommitSubscriber.
type CommitFunc func(Commit)

// Committed calls f(c).
func (f CommitFunc) Committed(c Commit) { f(c) }

// WithSubscribers hands every successful commit to subs, one after another
// in their order, on the recording goroutine. Calls add to the subscribers
// of earlier ones.
func WithSubscribers(subs ...CommitSubscriber) RecorderOption {
	return func(r *Recorder) { r.subscribers = append(r.subscribers, subs...) }
}

// WithCommitInterval sets the least time from one group commit's start to
// the next's while requests come from several senders at once (default
// DefaultCommitInterval; 0 commits each group as soon as the last is done).
// A lone sender's requests are committed at once.
func WithCommitInterval(d time.Duration) RecorderOption {
	return func(r *Recorder) { r.commitEvery = d }
}

// DefaultCommitInterval is the recorder's commit interval under concurrent
// requests. Every commit invalidates the page cache of every SQLite read
// connection, and its memory map of the file, so the dashboard's reads
// under heavy ingest start cold unless commits are few. Under the ingest
// load on two cores (BENCHMARKS.md), 50 ms, 100 ms and 200 ms gave pages a
// p95 of 982, 573 and 248 ms and the incident review 2.2, 1.3 and 0.59 s
// at 10 minutes; at 30 minutes, 200 and 400 ms gave pages 711 and 353 ms
// and the review 1.57 and 0.94 s. The price is the answers to write
// reports, which wait for the next commit: ingest's p50 was 178 ms at
// 200 ms and 287 ms at 400 ms.
const DefaultCommitInterval = 400 * time.Millisecond

// WithTickInterval sets how often the tracker's clock expiry runs (default 250ms).
func WithTickInterval(d time.Duration) RecorderOption { return func(r *Recorder) { r.tick = d } }

// WithSyncInterval sets how often renewals are written to the lock and tenure
// rows (default 5s; see Recorder). 0 writes them with every commit.
func WithSyncInterval(d time.Duration) RecorderOption { return func(r *Recorder) { r.syncEvery = d } }

// WithHeartbeatSyncInterval sets how often the renewals of heartbeat-class
// locks are written to the rows (default 30s), at least the sync interval:
// a heartbeat renewed every 10 s is written once per three renewals.
// Heartbeats are left out of the default views, but their rows, which an
// explicit class filter lists and sorts by lease left, lag by up to this
// long, and a crash replays up to this long of renewals. Replicas, whose
// pages show other replicas' sources from the rows alone, sync every lock
// at the sync interval.
func WithHeartbeatSyncInterval(d time.Duration) RecorderOption {
	return func(r *Recorder) { r.heartbeatSyncEvery = d }
}

// NewRecorder returns a Recorder writing to j. Call Start before use.
func NewRecorder(j Journal, cfg TrackerConfig, logger *slog.Logger, opts ...RecorderOption) *Recorder {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Recorder{
		journal:            j,
		tracker:            NewTracker(cfg),
		log:                logger,
		now:                time.Now,
		tick:               250 * time.Millisecond,
		syncEvery:          5 * time.Second,
		maxGroup:           512,
		commitEvery:        DefaultCommitInterval,
		heartbeatSyncEvery: 30 * time.Second,
		reqs:               make(chan *request, 1024),
		stop:               make(chan struct{}),
		stopped:            make(chan struct{}),
		cursors:            make(map[string]Cursor),
		unsaved:            make(unsavedRenewals),
		writeOnly:          writeOnlyLocks{max: DefaultWriteOnlyLocks},
		fences:             make(map[string]int64),
		disowned:           make(map[string]error),
	}
	for _, opt := range opts {
		opt(r)
	}
	return r
}

// Start restores the tracker's memory and the cursors from the journal and
// starts the recording goroutine.
func (r *Recorder) Start(ctx context.Context) error {
	if err := r.restore(ctx); err != nil {
		return err
	}
	r.lastSync = r.now()
	r.lastMark = r.lastSync
	go r.loop()
	return nil
}

// restore loads the tracker's memory from the journal, with the renewals
// stored since the last sync replayed onto it: of every source, or with
// WithOwnership of the sources this replica owns.
func (r *Recorder) restore(ctx context.Context) error {
	states, cursors, renewals, err := r.load(ctx)
	if err != nil {
		return fmt.Errorf("restore tracker state: %w", err)
	}
	if len(r.disowned) > 0 {
		// Other replicas record these.
		states = slices.DeleteFunc(states, func(st TrackState) bool { return r.disowned[st.Lock.Source] != nil })
		cursors = slices.DeleteFunc(cursors, func(c Cursor) bool { return r.disowned[c.Source] != nil })
	}
	unsaved := make(unsavedRenewals)
	r.trackMu.Lock()
	r.tracker.Restore(states)
	r.writeOnly.reset(states)
	for _, e := range renewals {
		if rn, ok := r.tracker.ReplayRenewal(e); ok { // not of a disowned source: the tracker lacks its locks
			unsaved.put(rn, r.tracker.Class(rn.Lock) == ClassHeartbeat)
		}
	}
	r.trackMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cursors = make(map[string]Cursor, len(cursors))
	for _, c := range cursors {
		r.cursors[c.Source] = c
	}
	r.unsaved = unsaved
	r.round = nil // a new round starts from what was restored
	return nil
}

// load reads what restore loads.
func (r *Recorder) load(ctx context.Context) ([]TrackState, []Cursor, []Event, error) {
	if !r.owning {
		states, cursors, err := r.journal.Restore(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		renewals, err := r.journal.Unsynced(ctx)
		return states, cursors, renewals, err
	}
	var states []TrackState
	var cursors []Cursor
	var renewals []Event
	for _, source := range r.owned() {
		st, c, rn, err := r.journal.RestoreSource(ctx, source)
		if err != nil {
			return nil, nil, nil, err
		}
		states, cursors, renewals = append(states, st...), append(cursors, c...), append(renewals, rn...)
	}
	return states, cursors, renewals, nil
}

// Close stops the recorder after the requests already queued are answered.
func (r *Recorder) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	close(r.stop)
	<-r.stopped
}

// Peek calls fn with lock, which returns a lock as the tracker has it: after
// every step the recorder has taken, including those of a commit still being
// written (which a failed write takes back). It lets a reader that follows
// the tracker, such as alerting, look locks up instead of keeping a copy of
// each. fn must be quick, as the recorder waits for it, and must not call the
// recorder.
func (r *Recorder) Peek(fn func(lock func(LockKey) (Lock, bool))) {
	r.trackMu.RLock()
	defer r.trackMu.RUnlock()
	fn(r.tracker.Lock)
}

// Cursor returns the source's stored resume cursor and when it was reached.
func (r *Recorder) Cursor(source string) (string, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.cursors[source]
	return c.Position, c.At
}

// Ready returns nil while the recorder is running and its writes to the
// journal work. After a failure it stays unready until a write works again
// (one of the next inputs or write reports, or a probe: see probeEvery) and
// none has failed for readyAfter.
func (r *Recorder) Ready(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return Errorf(EUNAVAILABLE, "recorder is shut down")
	}
	if r.err != nil {
		return Errorf(EUNAVAILABLE, "last commit failed: %s", ErrorMessage(r.err))
	}
	if ago := r.now().Sub(r.failedAt); r.failed != nil && ago < readyAfter {
		return Errorf(EUNAVAILABLE, "a commit failed %s ago: %s", ago.Round(time.Second), ErrorMessage(r.failed))
	}
	return nil
}

// Record records one collector input and returns once it is durable. Its
// Writes are taken as ReportWrites takes reports: one that cannot be
// taken fails the call, and nothing of in is recorded.
func (r *Recorder) Record(ctx context.Context, in Input) error {
	return r.do(ctx, &request{input: &in, writes: in.Writes})
}

// ReportWrites records write reports and returns once they are durable. A
// report whose RequestKey is already stored (or earlier among reports) with
// the same write is a retry, acknowledged without being stored again; one
// whose RequestKey is stored with a different write fails the call with
// ECONFLICT, and nothing of reports is recorded.
func (r *Recorder) ReportWrites(ctx context.Context, reports []WriteReport) error {
	return r.do(ctx, &request{writes: reports})
}

// ReportBeliefs judges holders' beliefs (Tracker.ReportBelief) and returns
// once what they showed is durable. A belief of a held tenure stores
// nothing, and commits nothing when all of a group's requests are such.
// With replicas, a request naming a source this recorder does not own is
// refused with EFENCED, as write reports are, and nothing of it is judged.
func (r *Recorder) ReportBeliefs(ctx context.Context, beliefs []Belief) error {
	return r.do(ctx, &request{beliefs: beliefs})
}

// Submit queues one collector input without waiting for it: wait blocks
// until the input is durable and returns what Record would have. Inputs are
// applied in the order they are submitted, so a collector may go on reading
// its backend while earlier inputs commit.
func (r *Recorder) Submit(ctx context.Context, in Input) (wait func() error) {
	req := &request{input: &in, writes: in.Writes}
	if err := r.enqueue(ctx, req); err != nil {
		return func() error { return err }
	}
	return func() error { return r.await(ctx, req) }
}

func (r *Recorder) do(ctx context.Context, req *request) error {
	if err := r.enqueue(ctx, req); err != nil {
		return err
	}
	return r.await(ctx, req)
}

func (r *Recorder) enqueue(ctx context.Context, req *request) error {
	req.done = make(chan error, 1)
	select {
	case r.reqs <- req:
		return nil
	case <-r.stop:
		return Errorf(EUNAVAILABLE, "recorder is shut down")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Recorder) await(ctx context.Context, req *request) error {
	select {
	case err := <-req.done:
		return err
	case <-r.stopped:
		// The loop answered what it drained before stopping; a request that
		// arrived after that was never recorded.
		select {
		case err := <-req.done:
			return err
		default:
			return Errorf(EUNAVAILABLE, "recorder is shut down")
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Recorder) loop() {
	defer close(r.stopped)
	ticker := time.NewTicker(r.tick)
	defer ticker.Stop()
	for {
		select {
		case req := <-r.reqs:
			r.run(r.gather(req))
		case <-ticker.C:
			r.commit(nil, true)
		case <-r.stop:
			for {
				select {
				case req := <-r.reqs:
					r.run([]*request{req})
				default:
					r.finish(nil, r.syncAllNow(Batch{}), nil, nil, false)
					return
				}
			}
		}
	}
}

// Queued is how many requests wait for the recording goroutine.
func (r *Recorder) Queued() int { return len(r.reqs) }

// gather makes the group of requests that the next commit records: first
// and those queued after it, and, while requests come from several senders
// at once (the last group had more than one), those that arrive until
// commitEvery has passed since the last commit began. A lone sender's
// request is committed at once. A fence request ends the group: the
// requests before it are recorded under the fences as they were.
func (r *Recorder) gather(first *request) []*request {
	group := []*request{first}
	var due <-chan time.Time
	if wait := time.Until(r.lastCommit.Add(r.commitEvery)); wait > 0 && r.lastGroup > 1 {
		t := time.NewTimer(wait)
		defer t.Stop()
		due = t.C
	}
	for len(group) < r.maxGroup && group[len(group)-1].fence == nil {
		select {
		case req := <-r.reqs:
			group = append(group, req)
			continue
		default:
		}
		if due == nil {
			break
		}
		select {
		case req := <-r.reqs:
			group = append(group, req)
		case <-due:
			due = nil
		case <-r.stop:
			return group
		}
	}
	r.lastCommit, r.lastGroup = time.Now(), len(group)
	return group
}

// run commits a group of requests, the last of which may be a fence request.
func (r *Recorder) run(group []*request) {
	last := group[len(group)-1]
	if last.fence == nil {
		r.commit(group, false)
		return
	}
	if len(group) > 1 {
		r.commit(group[:len(group)-1], false)
	}
	r.changeFence(last)
}

// commit runs a group of requests (and a clock tick) through the tracker and
// writes their changes in one transaction. If the write fails the tracker is
// reset to the journal's state, so memory never runs ahead of the database.
func (r *Recorder) commit(group []*request, tick bool) {
	ctx := context.Background()
	if r.stale {
		// Not one step on a tracker ahead of the journal. The group fails
		// even when the reload works: its inputs may come from collectors
		// that read their cursor before it; they retry from the stored one.
		err := r.reload(ctx)
		if err == nil {
			err = Errorf(EUNAVAILABLE, "the store is back: retry from the stored cursor")
		}
		if len(group) > 0 {
			r.finish(group, Batch{}, err, nil, false)
		}
		return
	}
	var b Batch
	n := 0 // about one event per observation and per write
	for _, req := range group {
		if req.input != nil {
			n += len(req.input.Observations)
		}
		n += len(req.writes)
	}
	b.Events = make([]Event, 0, n)
	if tick {
		r.trackMu.Lock()
		b.Append(r.hold(r.tracker.Tick(r.now())))
		r.trackMu.Unlock()
		b.Append(r.recordRefusals(ctx))
	}
	known, err := r.storedRequests(ctx, group)
	if err != nil {
		r.finish(group, b, err, nil, tick)
		return
	}
	var refused []error // by group index: a request refused on its own, with nothing of it recorded
	r.trackMu.Lock()
	for i, req := range group {
		if err := r.apply(req, known, &b); err != nil {
			if refused == nil {
				refused = make([]error, len(group))
			}
			refused[i] = err
		}
	}
	r.trackMu.Unlock()
	b = r.sync(b, tick && r.now().Sub(r.lastSync) >= r.syncEvery)
	if tick && b.Empty() {
		b.Cursors = r.probe()
	}
	r.finish(group, b, nil, refused, tick)
}

// apply steps the tracker through one request of a group (its input, its
// beliefs, its write reports not stored yet; known are the group's stored
// request IDs) and adds what that produced to b; trackMu must be held. It
// returns the request's refusal: a source this recorder does not own, with
// nothing of it applied, or write reports that cannot be taken.
func (r *Recorder) apply(req *request, known map[RequestKey]WriteReport, b *Batch) error {
	if err := r.disownedBy(req); err != nil {
		return err
	}
	// Taken or refused before the input is stepped: an input whose writes
	// (Input.Writes) are refused is refused whole.
	fresh, err := r.admitWrites(req.writes, known)
	if err != nil {
		return err
	}
	take := func(step Batch) {
		r.writeOnly.update(step)
		b.Append(r.hold(step))
	}
	if req.input != nil {
		take(r.tracker.Step(*req.input))
	}
	for _, bl := range req.beliefs {
		take(r.tracker.ReportBelief(bl))
	}
	for _, w := range fresh {
		take(r.tracker.ReportWrite(w))
	}
	return nil
}

// admitWrites returns the writes of a request to record, retries left
// out, or why they cannot be taken; trackMu must be held.
func (r *Recorder) admitWrites(writes []WriteReport, known map[RequestKey]WriteReport) ([]WriteReport, error) {
	if len(writes) == 0 {
		return nil, nil
	}
	err := r.writeOnly.admit(writes, r.tracks)
	if err == nil {
		err = r.tracker.AdmitResources(writes)
	}
	if err != nil {
		return nil, err
	}
	return claimRequests(known, writes)
}

// reload restores the tracker from the journal after a failed commit. If
// that fails too the tracker stays stale until a reload works: a step it
// took that the journal lacks would otherwise be found already taken when
// the collector, resuming from its stored cursor, sends it again, and
// never be stored.
func (r *Recorder) reload(ctx context.Context) error {
	if err := r.restore(ctx); err != nil {
		r.stale = true
		r.log.Error("reload tracker state", "err", err)
		return err
	}
	r.stale = false
	return nil
}

// tracks reports whether the tracker has the lock; trackMu must be held.
func (r *Recorder) tracks(key LockKey) bool {
	_, ok := r.tracker.Lock(key)
	return ok
}

// probe returns a stored cursor to write again, unchanged, when the last write
// failed and none was tried for probeEvery; nil otherwise.
func (r *Recorder) probe() []Cursor {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	// Not ahead of waiting requests: each try may wait out the busy timeout.
	if r.err == nil || now.Sub(r.lastProbe) < probeEvery || len(r.cursors) == 0 || len(r.reqs) > 0 {
		return nil
	}
	r.lastProbe = now
	var first Cursor
	for _, c := range r.cursors {
		if first.Source == "" || c.Source < first.Source {
			first = c
		}
	}
	return []Cursor{first}
}

// hold takes a tracker step's renewal-only changes out of its batch, to be
// written by the next sync, and keeps what the rows lack up to date.
func (r *Recorder) hold(b Batch) Batch {
	if len(b.Renewed) == 0 && len(r.unsaved) == 0 {
		return b
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rn := range b.Renewed {
		r.unsaved.put(rn, r.tracker.Class(rn.Lock) == ClassHeartbeat)
	}
	r.renewedNow = append(r.renewedNow, b.Renewed...)
	b.Renewed = nil
	for i := range b.Locks {
		// Written in full, as Batch.Append merges them.
		key := b.Locks[i].Lock.Key()
		if _, ok := r.unsaved[key]; !ok {
			continue
		}
		if rn, held := b.Locks[i].renewal(); held {
			r.unsaved.put(rn, b.Locks[i].Lock.Class == ClassHeartbeat)
		} else {
			delete(r.unsaved, key) // its tenure ended, and was written in full
		}
	}
	return b
}

// sync adds held renewals to b: the next chunk of the sync round in
// progress, or the first chunk of a new round when one is due, or all of them
// when they pile up (or always, with no sync interval). It marks b Synced
// whenever the rows it leaves behind hold every event, of the sources it
// owns with WithOwnership.
func (r *Recorder) sync(b Batch, due bool) Batch {
	return r.scopeSync(r.syncRows(b, due))
}

// syncRows is sync for every source the recorder records.
func (r *Recorder) syncRows(b Batch, due bool) Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case len(r.unsaved) > 0 && (r.syncEvery <= 0 || len(r.unsaved) >= maxUnsaved):
		return r.syncAll(b)
	case len(r.round) == 0 && due && len(r.unsaved) > 0:
		// Every renew event stored so far, this batch's included, is of a
		// lock in unsaved: once the round has written each of them, the rows
		// hold every event up to the mark. A partial round leaves the
		// heartbeats' out, so it marks nothing.
		now := r.now()
		r.partial = now.Sub(r.lastMark) < max(r.heartbeatSyncEvery, r.syncEvery)
		for k, p := range r.unsaved {
			if !r.partial || !p.heartbeat() {
				r.round = append(r.round, k)
			}
		}
		// In the order of the locks' rows, as far as the recorder can tell
		// (a snapshot creates its locks in name order): a chunk of
		// neighbouring rows shares their pages, while the map's order made
		// each lock of a chunk a page of its own to write.
		sortKeys(r.round)
		slices.Reverse(r.round) // taken from the end
		if !r.partial {
			b.SyncMark = true
			r.lastMark = now
		}
		r.lastSync = now
	case len(r.round) == 0:
		if len(r.unsaved) == 0 && len(b.Events) > 0 {
			b.Synced = true
		}
		return b
	}
	// Readers keep seeing them through Fresh until the commit is durable;
	// finish drops them from unsaved.
	for n := 0; n < syncChunk && len(r.round) > 0; {
		k := r.round[len(r.round)-1]
		r.round = r.round[:len(r.round)-1]
		if rn, ok := r.unsaved.get(k); ok { // not if its tenure has ended since: written in full
			b.Renewed = append(b.Renewed, rn)
			n++
		}
	}
	if len(r.round) == 0 && !r.partial {
		b.SyncedToMark = true
	}
	return b
}

// syncAll adds every held renewal to b, ending any round in progress.
// r.mu must be held.
func (r *Recorder) syncAll(b Batch) Batch {
	for k := range r.unsaved {
		rn, _ := r.unsaved.get(k)
		b.Renewed = append(b.Renewed, rn)
	}
	if len(b.Events) > 0 || len(b.Renewed) > 0 {
		b.Synced = true
	}
	r.round = nil
	r.lastSync = r.now()
	r.lastMark = r.lastSync
	return b
}

// syncAllNow is syncAll for the recording goroutine.
func (r *Recorder) syncAllNow(b Batch) Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.scopeSync(r.syncAll(b))
}

// storedRequests returns the stored write reports that share a request id
// with the group's, by RequestKey.
func (r *Recorder) storedRequests(ctx context.Context, group []*request) (map[RequestKey]WriteReport, error) {
	var ids []string
	for _, req := range group {
		for _, w := range req.writes {
			if w.RequestID != "" {
				ids = append(ids, w.RequestID)
			}
		}
	}
	known := make(map[RequestKey]WriteReport)
	if len(ids) == 0 {
		return known, nil
	}
	stored, err := r.journal.StoredWrites(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("look up request ids: %w", err)
	}
	for _, e := range stored {
		if w, ok := writeReportOf(e); ok {
			if key, ok := w.RequestKey(); ok {
				known[key] = w
			}
		}
	}
	return known, nil
}

// finish writes b, unless err already failed the group, and answers every
// request: with its own refusal if it has one (nothing of it is in b), else
// with the outcome of the write. If the store refuses a source's fence, the
// group is committed again without that source's requests (see
// fenceRefused): tick says whether it ran the clock.
func (r *Recorder) finish(group []*request, b Batch, err error, refused []error, tick bool) {
	wrote := err != nil // a failed look-up counts as a failed write
	if err == nil && !b.Empty() {
		wrote = true
		b.Fences = r.fencesOf(&b)
		err = r.journal.Apply(context.Background(), b)
		if stale, ok := staleFence(err); ok {
			r.fenceRefused(group, b, err, stale, refused, tick)
			return
		}
	}
	if err != nil {
		// The tracker has taken the batch's steps (a tick's included) that
		// the journal has not.
		r.log.Error("commit failed; reloading tracker state", "err", err)
		r.reload(context.Background())
	}
	renewals := r.renewedNow
	r.renewedNow = nil
	if err == nil && len(r.subscribers) > 0 {
		c := Commit{At: r.now(), Batch: &b, Renewals: renewals}
		for i, req := range group {
			if req.input != nil {
				c.Inputs = append(c.Inputs, req.input)
			}
			if refused == nil || refused[i] == nil {
				c.Writes += len(req.writes)
			}
		}
		for _, sub := range r.subscribers {
			sub.Committed(c)
		}
	}
	if err != nil {
		// A storage error the journal explains (disk full, database locked)
		// keeps its code and gives the message; any other keeps its text.
		msg := err.Error()
		code := EUNAVAILABLE
		var ae *Error
		if errors.As(err, &ae) {
			msg, code = ae.Message, ae.Code
		}
		err = &Error{Code: code, Message: "could not store the change: " + msg}
	}
	r.mu.Lock()
	if wrote {
		// A tick that wrote nothing says nothing about the journal.
		r.err = err
	}
	if err != nil {
		r.failed, r.failedAt = err, r.now()
	}
	if err == nil {
		for _, c := range b.Cursors {
			r.cursors[c.Source] = c
		}
		// The sync is durable: the rows hold these renewals now. (Had it
		// failed, restore rebuilt unsaved.)
		for _, rn := range b.Renewed {
			delete(r.unsaved, rn.Lock)
		}
	}
	r.mu.Unlock()
	for i, req := range group {
		if refused != nil && refused[i] != nil {
			req.done <- refused[i]
			continue
		}
		req.done <- err
	}
}
