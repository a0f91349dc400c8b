package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/leasewatch/leasewatch/audit"
	"github.com/leasewatch/leasewatch/collectors"
)

const (
	// maxBatch bounds how many watch events one input carries, and how many
	// wait in the watches' channel. Events that arrive while an input is
	// being stored are recorded together, so a burst of heartbeats costs few
	// commits. It holds a batch window of a 130,000-node cluster's heartbeats
	// (13,000 a second): the watches fill the channel while the loop sleeps
	// out the window, so a smaller bound capped the rate (256 a window was
	// 2,560 a second).
	maxBatch = 4096
	// listPageSize is the page size of the Lease lists (Collector.listPage).
	listPageSize = 500
	// listTimeout bounds one page of a list.
	listTimeout = time.Minute
	// minWatchLife: a watch the apiserver closes sooner than this is not
	// reopened on the spot; Run fails and the Runner retries with backoff.
	minWatchLife = time.Second
	// liveEvery is how often, at most, the collector tells the tracker it is
	// caught up (audit.Input.Live), which bounds how late a clock expiry is
	// recorded.
	liveEvery = 250 * time.Millisecond
	// replayGrace: a watch opened from an older resourceVersion replays what
	// happened since; until it has been open this long the collector does
	// not claim to be caught up.
	replayGrace = time.Second
	// A watch that delivers nothing looks the same whether the Leases are
	// quiet or the apiserver is frozen (a long GC pause, a stopped VM) or
	// unreachable without the connection closing; and meanwhile writes
	// through other apiservers of the cluster go on. So the apiserver is
	// asked for /version, on the watches' connection, every probeEvery, and
	// the collector vouches that it is caught up (audit.Input.Live) only up
	// to when the last answered probe was sent: a frozen apiserver's watch
	// may be missing renewals, which must not make leases look expired. A
	// probe unanswered for stallAfter stops the vouching until the
	// apiserver answers again and the watches have had replayGrace to
	// deliver what waited; unanswered for apiserverSilence, Run fails and
	// the Runner resumes from the cursor.
	probeEvery       = 500 * time.Millisecond
	stallAfter       = time.Second
	apiserverSilence = 5 * time.Second
)

// run is one Run of the collector: what it remembers of the Leases lives
// exactly as long as its watches, so a restart rebuilds it from the stored
// cursor.
type run struct {
	c    *Collector
	sink collectors.Sink
	log  *slog.Logger
	now  func() time.Time

	rv     map[string]string // per scope: the resourceVersion the last durable input covers
	rvAt   time.Time         // when the collector reached rv (collector clock)
	leases map[string]seen   // by lock name: each Lease as this run last saw it

	lastLive time.Time // when the collector last told the tracker it was caught up
	// applied is when the collector last began to record a batch of watch
	// events, by the process's clock (see WithBatchWindow); window is the
	// batch window now, stretched at low rates (stretch), and rate the
	// events a second it was stretched for.
	applied time.Time
	window  time.Duration
	rate    float64
	// behind says the last batch came from a backlog (see backlog): the
	// watches have not delivered every change up to now; recorded is when
	// the last batch was recorded, by the process's clock.
	behind   bool
	recorded time.Time
	// probing says the apiserver is probed (not with a client that cannot
	// be); heard is when the last probe it answered was sent; stalled is set
	// while a probe has waited longer than stallAfter; resumedAt is when the
	// last stall ended.
	probing   bool
	heard     time.Time
	stalled   bool
	resumedAt time.Time
}

// seen is the tenure a Lease showed when the collector last saw it, kept
// for every Lease of the cluster (130,000 in the largest). Its name and
// holder are the strings the Lease's first observation brought: observe
// hands them on with each later one, in place of the copies each decoded
// event brings, so that the tracker, the recorder and the store keep one
// copy of each between them. Its renewal time is Unix nanoseconds
// (audit.Nanos), 8 bytes where a time.Time takes 24.
type seen struct {
	name      string
	holder    string
	token     *int64
	renewedAt int64
	duration  time.Duration
}

func seenOf(ob audit.Observation) seen {
	return seen{name: ob.Lock.Name, holder: ob.Holder, token: ob.Token, renewedAt: audit.Nanos(ob.RenewedAt), duration: ob.LeaseDuration}
}

// continuedBy reports whether ob, a held Lease seen at ob.At, continues the
// tenure s: the same holder and token, written before s's lease ran out, by
// the rule the tracker expires the tenure by (audit.LeaseRunOut). After that
// the holder is taking the Lease anew, and client-go keeps leaseTransitions
// when the holder's identity is unchanged (collectors/backends.md B.2).
//
// When the write was made is its renewTime, on the holder's clock like the
// lease it extends, so a renewal made in time but delivered late (a slow
// watch, a busy collector) is still a renewal. Only a write without a
// renewTime is judged by when it arrived (audit.Observation.Renewed).
func (s seen) continuedBy(ob audit.Observation) bool {
	return s.holder == ob.Holder && tokenEqual(s.token, ob.Token) &&
		!audit.LeaseRunOut(audit.LeaseExpiry(audit.TimeOf(s.renewedAt), s.duration), ob.Renewed())
}

func newRun(c *Collector, sink collectors.Sink) *run {
	return &run{c: c, sink: sink, log: c.log, now: c.now, leases: make(map[string]seen)}
}

// goneError says the apiserver no longer has the history after the
// resourceVersion a watch asked for, or never had it.
type goneError struct {
	scope  string
	reason string
}

func (e *goneError) Error() string {
	return fmt.Sprintf("watch of Leases %s: %s", scopeName(e.scope), e.reason)
}

func scopeName(ns string) string {
	if ns == "" {
		return "in all namespaces"
	}
	return "in namespace " + ns
}

func (r *run) run(ctx context.Context, ready func()) error {
	if err := r.start(ctx); err != nil {
		return err
	}
	for {
		err := r.watch(ctx, ready)
		var ge *goneError
		if !errors.As(err, &ge) || ctx.Err() != nil {
			return err
		}
		r.log.Warn("watch history is gone; listing the Leases again", "err", err, "cursor", encodeCursor(r.rv))
		if err := r.snapshot(ctx, &audit.Blind{From: r.rvAt, Reason: ge.reason}); err != nil {
			return err
		}
	}
}

// start takes the first snapshot, or resumes from the stored cursor. The
// tracker already knows the state as of the cursor, so a resume records
// nothing until the watch brings something new.
func (r *run) start(ctx context.Context) error {
	pos, at := r.sink.Cursor(r.c.cfg.Name)
	if pos == "" {
		return r.snapshot(ctx, nil)
	}
	rvs, err := decodeCursor(pos, r.c.scopes)
	if err != nil {
		r.log.Warn("cannot resume from the stored cursor; listing the Leases", "err", err)
		return r.snapshot(ctx, &audit.Blind{From: at, Reason: err.Error()})
	}
	r.rv, r.rvAt = rvs, at
	r.log.Info("resuming", "cursor", pos)
	return nil
}

// message is one thing a watch delivered: an event, or the end of its
// stream.
type message struct {
	scope  string
	ev     watch.Event
	closed bool
}

// watches are the open watches of one watch round: one per scope, all
// feeding one channel.
type watches struct {
	r      *run
	ctx    context.Context
	wg     sync.WaitGroup
	msgs   chan message
	opened map[string]time.Time
}

func newWatches(r *run, ctx context.Context) *watches {
	return &watches{r: r, ctx: ctx, msgs: make(chan message, maxBatch), opened: make(map[string]time.Time)}
}

// watch follows every scope from its cursor until ctx ends or a watch fails.
// A watch the apiserver ends normally (its timeout) is reopened from the
// resourceVersion recorded last, so nothing in between is lost.
func (r *run) watch(ctx context.Context, ready func()) error {
	wctx, cancel := context.WithCancel(ctx)
	ws := newWatches(r, wctx)
	defer ws.wg.Wait()
	defer cancel()
	for _, ns := range r.c.scopes {
		if err := ws.open(ns); err != nil {
			return err
		}
	}
	ready()
	idle := time.NewTicker(liveEvery)
	defer idle.Stop()
	pr := newProber(r, ws)
	probe := time.NewTicker(probeEvery)
	defer probe.Stop()
	for {
		var batch []message
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-idle.C:
			if err := r.live(ctx, ws); err != nil {
				return err
			}
			continue
		case <-probe.C:
			if err := pr.check(); err != nil {
				return err
			}
			continue
		case at := <-pr.answers:
			pr.answered(at)
			continue
		case m := <-ws.msgs:
			batch = append(batch, m)
		}
		batch, err := r.gather(ctx, ws, batch)
		if err != nil {
			return err
		}
		now := time.Now()
		r.stretch(len(batch), now.Sub(r.applied))
		r.applied, r.behind = now, backlog(batch, now)
		if err := r.apply(ctx, ws, batch); err != nil {
			return err
		}
		r.recorded = time.Now()
		if len(ws.msgs) == 0 && time.Since(r.lastLive) >= liveEvery {
			if err := r.live(ctx, ws); err != nil {
				return err
			}
		}
	}
}

// gather adds to batch the messages waiting behind it, and those that
// arrive until the batch window has passed since the last batch began, up to
// maxBatch. It sleeps out the window rather than wake for each message (a
// wake-up per event costs more than the event), and does not wait when the
// batch holds a watch's end or error, which is acted on at once.
func (r *run) gather(ctx context.Context, ws *watches, batch []message) ([]message, error) {
	batch, ended := drainMessages(ws.msgs, batch)
	left := r.window - time.Since(r.applied)
	if ended || len(batch) >= maxBatch || left <= 0 {
		return batch, nil
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	batch, _ = drainMessages(ws.msgs, batch)
	return batch, nil
}

// A commit's cost is mostly the same whatever it holds, so below about
// batchFill events a window the collector spends more on commits than on
// events. stretch widens the window up to maxStretch times WithBatchWindow's
// when events come slower than batchFill a window, and back as they speed
// up: at a 2,000-node cluster's 225 renewals a second, 200 ms instead of
// 100 ms, for up to 100 ms more lag (the lag target is 500 ms); at 500 a
// second and more, the configured window.
const (
	batchFill  = 50
	maxStretch = 2
)

// stretch sets the next batch window from a batch of n events gathered over
// since: the window that would hold batchFill at the events' rate (a moving
// average, so that one burst or lull does not swing it), between the
// configured window and maxStretch times it.
func (r *run) stretch(n int, since time.Duration) {
	base := r.c.batchWindow
	if r.window == 0 {
		r.window = base
	}
	if base <= 0 || since <= 0 || r.applied.IsZero() {
		return
	}
	rate := float64(n) / since.Seconds()
	if r.rate == 0 {
		r.rate = rate
	} else {
		r.rate += (rate - r.rate) / 4
	}
	w := time.Duration(float64(batchFill) / r.rate * float64(time.Second))
	r.window = min(max(w, base), maxStretch*base)
}

// maxBehind is how long before it is gathered a batch's newest write may
// have been made (by its writer's clock, renewTime) for the batch to be
// what is happening rather than a backlog: the batch window, plus the lag
// and clock skew a healthy cluster shows, with room.
const maxBehind = 5 * time.Second

// backlog reports whether batch, gathered at now, is a backlog the watches
// are working through: full, or with no write newer than maxBehind. After
// a long snapshot or a busy spell the watches replay what happened
// meanwhile, and vouching for now then would expire by the clock leases
// whose renewals are still on their way.
func backlog(batch []message, now time.Time) bool {
	if len(batch) >= maxBatch {
		return true
	}
	var newest time.Time
	for _, m := range batch {
		if l, ok := m.ev.Object.(*coordinationv1.Lease); ok && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(newest) {
			newest = l.Spec.RenewTime.Time
		}
	}
	return !newest.IsZero() && now.Sub(newest) > maxBehind
}

// drainMessages adds the messages waiting in msgs to batch, up to maxBatch,
// and says whether batch ends with a watch's end or error.
func drainMessages(msgs <-chan message, batch []message) ([]message, bool) {
	for {
		if last := batch[len(batch)-1]; last.closed || last.ev.Type == watch.Error {
			return batch, true
		}
		if len(batch) >= maxBatch {
			return batch, false
		}
		select {
		case m := <-msgs:
			batch = append(batch, m)
		default:
			return batch, false
		}
	}
}

// live tells the tracker that every change up to now has been delivered, so
// its clock may expire leases up to now: nothing is waiting in the watch
// channel and every watch has been open long enough to have replayed what it
// resumed from. Without it, a collector that is down or still replaying
// never makes a lease look expired.
func (r *run) live(ctx context.Context, ws *watches) error {
	now := r.now()
	if r.stalled || now.Sub(r.resumedAt) < replayGrace || len(ws.msgs) > 0 {
		return nil
	}
	// Behind a backlog the collector has not seen what happened up to now
	// (a lease renewed in time would look expired), until the watches have
	// caught up or gone quiet: a batch that is not a backlog, or none for
	// two windows since the last was recorded (storing a batch can take
	// longer than that).
	if r.behind && time.Since(r.recorded) < 2*max(r.window, r.c.batchWindow)+liveEvery {
		return nil
	}
	for _, opened := range ws.opened {
		if now.Sub(opened) < replayGrace {
			return nil
		}
	}
	at := now
	if r.probing && r.heard.Before(at) {
		at = r.heard // zero, and no vouching, until a probe is answered
	}
	if !at.After(r.lastLive) {
		return nil
	}
	r.lastLive = at
	in := r.input(at, nil, nil)
	in.Cursor, in.Live = "", true
	return r.sink.Record(ctx, in)
}

// prober asks the apiserver for /version, one request at a time, to tell a
// quiet watch from a frozen or unreachable apiserver.
type prober struct {
	r       *run
	ws      *watches
	req     rest.Interface // nil: a client that cannot probe, taken as always answering
	answers chan time.Time // when each answered probe was sent
	sent    time.Time      // the probe in flight, zero if none
	since   time.Time      // when the apiserver last answered, or the prober started
	checked time.Time      // when check last ran
}

func newProber(r *run, ws *watches) *prober {
	p := &prober{r: r, ws: ws, answers: make(chan time.Time, 1), since: r.now()}
	if d := r.c.client.Discovery(); d != nil {
		p.req = d.RESTClient()
	}
	r.probing = p.req != nil
	return p
}

// check sends a probe unless one is waiting, marks the run stalled when the
// one waiting is late, and fails once the apiserver has been silent for
// apiserverSilence.
func (p *prober) check() error {
	if p.req == nil {
		return nil
	}
	// A loop busy storing a large input (a burst, a sync of many rows) asks
	// nothing meanwhile: the apiserver's silence is counted only over time
	// the collector was asking. So an answer waiting behind the busy loop
	// is taken first, and after a pause of the loop the apiserver is asked
	// again before it is judged.
	select {
	case at := <-p.answers:
		p.answered(at)
	default:
	}
	now := p.r.now()
	busy := !p.checked.IsZero() && now.Sub(p.checked) > stallAfter
	p.checked = now
	if busy && p.sent.IsZero() && p.since.Before(now) {
		p.since = now
	}
	if quiet := now.Sub(p.since); quiet > apiserverSilence {
		return fmt.Errorf("no answer from the kube-apiserver for %s", quiet.Round(time.Millisecond))
	}
	if !p.sent.IsZero() {
		if waited := now.Sub(p.sent); waited > stallAfter && !p.r.stalled {
			p.r.stalled = true
			p.r.log.Warn("kube-apiserver not answering; not vouching for the watches until it does", "waited", waited.Round(time.Millisecond))
		}
		return nil
	}
	sent := now
	p.sent = sent
	p.ws.wg.Add(1)
	go func() {
		defer p.ws.wg.Done()
		ctx, cancel := context.WithTimeout(p.ws.ctx, apiserverSilence)
		defer cancel()
		// Any status is an answer (a cluster may deny /version); only a
		// request that got none is not.
		var status apierrors.APIStatus
		if err := p.req.Get().AbsPath("/version").Do(ctx).Error(); err != nil && !errors.As(err, &status) {
			sent = time.Time{}
		}
		select {
		case p.answers <- sent:
		case <-p.ws.ctx.Done():
		}
	}()
	return nil
}

// answered takes a probe's outcome: when it was sent, zero if it got no
// answer.
func (p *prober) answered(sent time.Time) {
	p.sent = time.Time{}
	if sent.IsZero() {
		p.r.stalled = true
		return
	}
	p.since, p.r.heard = sent, sent
	if p.r.stalled {
		p.r.stalled, p.r.resumedAt = false, p.r.now()
		p.r.log.Info("kube-apiserver answering again")
	}
}

// open starts the watch of one scope from its cursor.
func (ws *watches) open(ns string) error {
	r := ws.r
	rv := r.rv[ns]
	timeout := int64((r.c.watchTimeout + rand.N(r.c.watchTimeout)).Seconds())
	body, err := openStream(ws.ctx, r.c.client.CoordinationV1().RESTClient(), ns, metav1.ListOptions{
		ResourceVersion:     rv,
		AllowWatchBookmarks: true,
		TimeoutSeconds:      &timeout,
	})
	if err != nil {
		if ge := asGone(ns, err); ge != nil {
			return ge
		}
		return fmt.Errorf("watch Leases %s from resourceVersion %s: %w", scopeName(ns), rv, err)
	}
	ws.opened[ns] = time.Now()
	ws.wg.Add(1)
	go ws.follow(ns, body)
	return nil
}

// follow decodes the watch stream of scope ns into ws.msgs until it ends.
func (ws *watches) follow(ns string, body io.ReadCloser) {
	defer ws.wg.Done()
	defer body.Close()
	d := newStreamDecoder(body)
	for {
		ev, err := d.next()
		m := message{scope: ns, ev: ev}
		switch {
		case err != nil && streamEnded(err):
			m.closed = true
		case err != nil:
			m.ev = decodeFailure(err)
		}
		select {
		case ws.msgs <- m:
		case <-ws.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// apply turns a batch of watch messages into inputs: one for the events
// up to the end of the batch, or to a stream's end or error, whichever comes
// first. Each input's cursor covers exactly the events in it.
func (r *run) apply(ctx context.Context, ws *watches, batch []message) error {
	now := r.now()
	next := maps.Clone(r.rv)
	obs := make([]audit.Observation, 0, len(batch)) // nearly every message is an observation
	flush := func() error {
		if len(obs) == 0 && maps.Equal(next, r.rv) {
			return nil
		}
		in := r.input(now, obs, next)
		if err := r.sink.Record(ctx, in); err != nil {
			return fmt.Errorf("record resourceVersion %s: %w", in.Cursor, err)
		}
		r.rv, r.rvAt = next, now
		next, obs = maps.Clone(next), nil
		return nil
	}
	for _, m := range batch {
		if m.closed {
			if err := flush(); err != nil {
				return err
			}
			if life := time.Since(ws.opened[m.scope]); life < minWatchLife {
				return fmt.Errorf("watch of Leases %s closed %s after it opened", scopeName(m.scope), life.Round(time.Millisecond))
			}
			if err := ws.open(m.scope); err != nil {
				return err
			}
			continue
		}
		switch m.ev.Type {
		case watch.Error:
			if err := flush(); err != nil {
				return err
			}
			err := apierrors.FromObject(m.ev.Object)
			if ge := asGone(m.scope, err); ge != nil {
				return ge
			}
			return fmt.Errorf("watch of Leases %s: %w", scopeName(m.scope), err)
		case watch.Bookmark:
			if l, ok := m.ev.Object.(*coordinationv1.Lease); ok && l.ResourceVersion != "" {
				next[m.scope] = l.ResourceVersion
			}
		case watch.Added, watch.Modified, watch.Deleted:
			l, ok := m.ev.Object.(*coordinationv1.Lease)
			if !ok {
				return fmt.Errorf("watch of Leases %s: unexpected %s object %T", scopeName(m.scope), m.ev.Type, m.ev.Object)
			}
			if ob, ok := r.observe(m.ev.Type, l, now); ok {
				obs = append(obs, ob)
			}
			next[m.scope] = l.ResourceVersion
		}
	}
	return flush()
}

// observe turns one Lease write into an observation, using what this run saw
// of the Lease before: the same holder and token again, before the lease ran
// out, is a renewal; anything else held is a grant; a cleared holder ends the
// tenure it last showed. Without that memory (the first write after a
// resume) a held Lease is a grant, which the tracker takes as a renewal when
// it repeats the current tenure, and a release ends whatever tenure the
// tracker holds.
func (r *run) observe(typ watch.EventType, l *coordinationv1.Lease, now time.Time) (audit.Observation, bool) {
	ob, held := leaseObservation(l, r.c.heartbeatNS) // the detail once it is known not to be a renewal's
	ob.Lock.Source, ob.At = r.c.cfg.Name, now
	key := ob.Lock.Name
	prev, known := r.leases[key]
	if known {
		ob.Lock.Name = prev.name // the copy the others keep (seen)
	}
	if typ == watch.Deleted {
		delete(r.leases, key)
		if !held {
			return ob, false
		}
		ob.Kind, ob.Deleted = audit.EventRelease, true
		ob.RenewedAt, ob.LeaseDuration = time.Time{}, 0
		ob.Detail = withDetail(leaseDetail(l), "deleted", true)
		return ob, true
	}
	renewal := held && known && prev.continuedBy(ob)
	if renewal {
		ob.Holder, ob.Token = prev.holder, prev.token // the same, as kept
	}
	r.leases[ob.Lock.Name] = seenOf(ob)
	if renewal {
		// A renewal keeps no resourceVersion: it is the apiserver's global
		// etcd revision, which nothing reads of a renewal, and the store would
		// keep it for every heartbeat. The cursor still moves past it (apply).
		ob.Kind, ob.Position = audit.EventRenew, ""
		ob.Detail = renewDetail(l)
		return ob, true
	}
	ob.Detail = leaseDetail(l)
	if !held {
		if known && prev.holder == "" {
			return ob, false // still free: a write that changed nothing of interest
		}
		if known {
			// client-go's release keeps leaseTransitions: the token of the
			// tenure it ends.
			ob.Holder, ob.Token = prev.holder, prev.token
		}
		return ob, true
	}
	return ob, true
}

// renewDetail is a renewal's detail: of a Lease's, what can change within
// a tenure, preferredHolder, by which coordinated leader election asks the
// holder to step down. The rest was recorded with the grant.
func renewDetail(l *coordinationv1.Lease) map[string]any {
	if p := l.Spec.PreferredHolder; p != nil && *p != "" {
		return map[string]any{"preferred_holder": audit.Text(*p)}
	}
	return nil
}

func (r *run) input(now time.Time, obs []audit.Observation, rvs map[string]string) audit.Input {
	return audit.Input{
		Source: r.c.cfg.Name, Kind: audit.KindKubernetes, At: now,
		Observations: obs, Cursor: encodeCursor(rvs),
		ExpireByClock: true, SequentialTokens: true, HolderClock: true,
	}
}

// asGone returns a goneError when err says the watch cannot start from the
// requested resourceVersion: 410 Gone (history compacted, or older than the
// apiserver's watch cache), or a resourceVersion newer than the apiserver has
// (etcd restored from a backup or replaced).
func asGone(ns string, err error) *goneError {
	switch {
	case err == nil:
		return nil
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		return &goneError{scope: ns, reason: "kubernetes 410 Gone: " + strings.TrimSpace(err.Error())}
	case apierrors.IsTimeout(err) && apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge):
		return &goneError{scope: ns, reason: "stored resourceVersion is ahead of the apiserver (was etcd restored or replaced?): " + err.Error()}
	}
	return nil
}

func tokenEqual(a, b *int64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func withDetail(d map[string]any, k string, v any) map[string]any {
	if d == nil {
		d = make(map[string]any, 1)
	}
	d[k] = v
	return d
}
