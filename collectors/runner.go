package collectors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasewatch/leasewatch/audit"
)

// Backoff defaults: a failing collector is restarted after about 500ms, then
// 1s, 2s, ... up to 30s; a run that stayed up for a minute starts over.
const (
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
	DefaultResetAfter = time.Minute
)

// StoreRetry caps the restart delay of a collector whose run failed because
// the sink could not store its input (disk full, database locked: an
// EUNAVAILABLE error). The backend is fine and the collector resumes from its
// stored cursor, so recording should resume soon after the store does rather
// than after a backoff grown to MaxBackoff.
const StoreRetry = 2 * time.Second

// RunnerConfig configures a Runner. The zero value is usable.
type RunnerConfig struct {
	Logger *slog.Logger // nil: discard
	// Registerer receives the leasewatch_collector_* metrics; nil: no metrics.
	Registerer prometheus.Registerer
	MinBackoff time.Duration // first restart delay (before jitter); default 500ms
	MaxBackoff time.Duration // cap on the restart delay; default 30s
	// ResetAfter: a run that was up (had called ready) at least this long
	// before failing restarts with MinBackoff again. Default 1 minute.
	ResetAfter time.Duration
	Now        func() time.Time // default time.Now
	// Jitter returns a number in [0, 1); default math/rand/v2. Each delay is
	// base/2 + Jitter()*base/2, so restarts of many sources spread out.
	Jitter func() float64
	// Gated runs a collector only while its source is owned (Own), as
	// replicas that share sources do; a source not owned is in standby.
	// Without it every collector runs from the start.
	Gated bool
}

// Runner runs collectors, each in its own goroutine, restarts one with capped
// exponential backoff and jitter whenever its Run fails, and reports each
// source's health.
type Runner struct {
	sink       Sink
	cfg        RunnerConfig
	log        *slog.Logger
	collectors []Collector
	metrics    *runnerMetrics

	// wait sleeps for d unless ctx ends first, reporting whether it slept
	// the whole time. Tests replace it to see the delays without sleeping.
	wait func(ctx context.Context, d time.Duration) bool

	mu     sync.Mutex
	states map[string]*audit.Source
	gates  map[string]*gate // with cfg.Gated, per source
}

// gate is whether a gated source is owned: term is the context of the
// current ownership, nil while another replica owns the source, and changed
// is closed (and replaced) at every change.
type gate struct {
	term    context.Context
	cancel  context.CancelFunc
	changed chan struct{}
}

// NewRunner returns a Runner for cs, which must have distinct names. It
// registers the runner's metrics with cfg.Registerer.
func NewRunner(sink Sink, cs []Collector, cfg RunnerConfig) (*Runner, error) {
	if sink == nil {
		return nil, errors.New("runner: nil sink")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = cfg.MinBackoff
	}
	if cfg.ResetAfter <= 0 {
		cfg.ResetAfter = DefaultResetAfter
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Jitter == nil {
		cfg.Jitter = rand.Float64
	}
	r := &Runner{sink: sink, cfg: cfg, log: cfg.Logger, wait: Sleep, states: make(map[string]*audit.Source, len(cs)),
		gates: make(map[string]*gate, len(cs))}
	for i, c := range cs {
		if c == nil {
			return nil, fmt.Errorf("runner: collector %d is nil", i)
		}
		name := c.Name()
		if _, dup := r.states[name]; dup {
			return nil, fmt.Errorf("runner: two collectors named %q", name)
		}
		r.states[name] = &audit.Source{Name: name, Kind: c.Kind(), State: audit.SourceDown}
		if cfg.Gated {
			r.states[name].State = audit.SourceStandby
			r.gates[name] = &gate{changed: make(chan struct{})}
		}
		r.collectors = append(r.collectors, c)
	}
	m, err := newRunnerMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	r.metrics = m
	for _, c := range r.collectors {
		m.init(c.Name(), string(c.Kind()))
		// A collector with metrics of its own (a PostgreSQL slot's
		// retained WAL) is a prometheus.Collector.
		if pc, ok := c.(prometheus.Collector); ok && cfg.Registerer != nil {
			if err := cfg.Registerer.Register(pc); err != nil {
				return nil, fmt.Errorf("register the metrics of source %s: %w", c.Name(), err)
			}
		}
	}
	return r, nil
}

// Run runs every collector (with RunnerConfig.Gated, each while its source
// is owned) until ctx ends, then waits for all of them to return.
func (r *Runner) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, c := range r.collectors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r.cfg.Gated {
				r.superviseOwned(ctx, c)
			} else {
				r.supervise(ctx, c)
			}
		}()
	}
	wg.Wait()
}

// Own starts the gated source's collector, if it is not running already,
// and reports whether the runner has the source.
func (r *Runner) Own(source string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.gates[source]
	if !ok {
		return false
	}
	if g.term == nil {
		g.term, g.cancel = context.WithCancel(context.Background())
		close(g.changed)
		g.changed = make(chan struct{})
	}
	return true
}

// Disown stops the gated source's collector at once: its Run's context
// ends. The source is in standby until Own.
func (r *Runner) Disown(source string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.gates[source]
	if !ok || g.term == nil {
		return
	}
	g.cancel()
	g.term, g.cancel = nil, nil
	close(g.changed)
	g.changed = make(chan struct{})
}

// superviseOwned supervises a gated collector through each ownership of
// its source, and keeps it in standby in between.
func (r *Runner) superviseOwned(ctx context.Context, c Collector) {
	name, kind := c.Name(), string(c.Kind())
	for {
		r.mu.Lock()
		g := r.gates[name]
		term, changed := g.term, g.changed
		r.mu.Unlock()
		if term == nil {
			select {
			case <-ctx.Done():
				return
			case <-changed:
				continue
			}
		}
		run, stop := context.WithCancel(ctx)
		go func() {
			select {
			case <-term.Done():
			case <-run.Done():
			}
			stop()
		}()
		r.log.Info("source owned: collector starting", "source", name)
		r.supervise(run, c)
		stop()
		if ctx.Err() != nil {
			return
		}
		r.setStandby(name, kind)
		r.log.Info("source no longer owned: collector stopped", "source", name)
	}
}

// Sources returns every collector's health, in the order the collectors were
// given: State is up from the run's ready call until the run ends;
// BlindSince is when it last went down (zero while up); Error is the last
// failure's message, kept after a recovery so the cause stays visible;
// Degraded comes from collectors that implement Degrader.
func (r *Runner) Sources() []audit.Source {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]audit.Source, 0, len(r.collectors))
	for _, c := range r.collectors {
		src := *r.states[c.Name()]
		if d, ok := c.(Degrader); ok {
			src.Degraded = d.Degraded()
		}
		out = append(out, src)
	}
	return out
}

// supervise runs one collector until ctx ends, restarting it after failures.
func (r *Runner) supervise(ctx context.Context, c Collector) {
	name, kind := c.Name(), string(c.Kind())
	log := r.log.With("source", name)
	r.setDown(name, kind, nil)
	attempt := 0
	for run := 0; ; run++ {
		if run > 0 {
			r.metrics.restarts(name)
		}
		start := r.cfg.Now()
		upAt, err := r.runOnce(ctx, c, name, kind, log)
		if ctx.Err() != nil {
			r.setDown(name, kind, nil)
			return
		}
		if err == nil {
			err = errors.New("collector stopped before shutdown")
		}
		r.metrics.failed(name)
		r.setDown(name, kind, err)
		if !upAt.IsZero() && r.cfg.Now().Sub(upAt) >= r.cfg.ResetAfter {
			attempt = 0
		}
		ran := r.cfg.Now().Sub(start).Round(time.Millisecond)
		var delay time.Duration
		if audit.ErrorCode(err) == audit.EUNAVAILABLE {
			delay = Backoff(r.cfg.MinBackoff, max(r.cfg.MinBackoff, min(r.cfg.MaxBackoff, StoreRetry)), attempt, r.cfg.Jitter())
			log.Error("recording paused: the store cannot take the collector's input; it resumes from the stored cursor",
				"err", err, "ran", ran, "retry_in", delay.Round(time.Millisecond))
		} else {
			delay = Backoff(r.cfg.MinBackoff, r.cfg.MaxBackoff, attempt, r.cfg.Jitter())
			log.Warn("collector failed; restarting", "err", err, "ran", ran, "retry_in", delay.Round(time.Millisecond))
		}
		attempt++
		if !r.wait(ctx, delay) {
			r.setDown(name, kind, nil)
			return
		}
	}
}

// Sleep waits for d unless ctx ends first, and reports whether it waited
// the whole time.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// runOnce runs c once and returns when it went up (zero if never) and its
// error.
func (r *Runner) runOnce(ctx context.Context, c Collector, name, kind string, log *slog.Logger) (time.Time, error) {
	var (
		mu   sync.Mutex
		upAt time.Time
		done bool
	)
	ready := func() {
		mu.Lock()
		defer mu.Unlock()
		if done || !upAt.IsZero() {
			return // a late call from a finished run, or a repeated one
		}
		upAt = r.cfg.Now()
		r.setUp(name, kind)
		log.Info("collector up")
	}
	err := call(ctx, c, r.sink, ready, log)
	mu.Lock()
	defer mu.Unlock()
	done = true
	return upAt, err
}

// call runs c. A panic in the collector becomes an error, so one broken
// source does not take the whole service down.
func call(ctx context.Context, c Collector, sink Sink, ready func(), log *slog.Logger) (err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("collector panicked", "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("collector panicked: %v", p)
		}
	}()
	return c.Run(ctx, sink, ready)
}

func (r *Runner) setUp(name, kind string) { r.setSeeing(name, kind, audit.SourceUp) }

// setStandby marks the source as owned by another replica: not blind, and
// not this replica's to watch.
func (r *Runner) setStandby(name, kind string) { r.setSeeing(name, kind, audit.SourceStandby) }

// setSeeing sets a state in which the source is not blind: up, or standby.
func (r *Runner) setSeeing(name, kind, state string) {
	r.mu.Lock()
	s := r.states[name]
	s.State, s.BlindSince = state, time.Time{}
	r.mu.Unlock()
	r.metrics.setUp(name, kind, state == audit.SourceUp)
}

// setDown marks the source down. BlindSince keeps the moment it went down;
// err, when not nil, becomes the source's last error.
func (r *Runner) setDown(name, kind string, err error) {
	r.mu.Lock()
	s := r.states[name]
	if s.State != audit.SourceDown || s.BlindSince.IsZero() {
		s.BlindSince = r.cfg.Now()
	}
	s.State = audit.SourceDown
	if err != nil {
		s.Error = err.Error()
	}
	r.mu.Unlock()
	r.metrics.setUp(name, kind, false)
}

// Backoff returns the delay before restart number attempt (0-based): min
// doubled attempt times, capped at max, then scaled into [base/2, base) by
// jitter in [0, 1).
func Backoff(min, max time.Duration, attempt int, jitter float64) time.Duration {
	base := min
	for i := 0; i < attempt && base < max; i++ {
		base *= 2
	}
	if base > max {
		base = max
	}
	jitter = clamp01(jitter)
	return base/2 + time.Duration(jitter*float64(base/2))
}

func clamp01(f float64) float64 {
	switch {
	case f < 0 || math.IsNaN(f):
		return 0
	case f >= 1:
		return 0.999999
	}
	return f
}

// runnerMetrics are the runner's Prometheus metrics. A nil registerer keeps
// them unregistered, which costs nothing.
type runnerMetrics struct {
	up       *prometheus.GaugeVec
	restartC *prometheus.CounterVec
	errorC   *prometheus.CounterVec
}

func newRunnerMetrics(reg prometheus.Registerer) (*runnerMetrics, error) {
	m := &runnerMetrics{
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "leasewatch_collector_up",
			Help: "1 while the source's collector sees its backend, 0 otherwise.",
		}, []string{"source", "kind"}),
		restartC: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasewatch_collector_restarts_total",
			Help: "Times the source's collector was restarted after a failure.",
		}, []string{"source"}),
		errorC: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasewatch_collector_errors_total",
			Help: "Times the source's collector stopped with an error.",
		}, []string{"source"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.up, m.restartC, m.errorC} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register collector metrics: %w", err)
		}
	}
	return m, nil
}

func (m *runnerMetrics) init(source, kind string) {
	m.up.WithLabelValues(source, kind).Set(0)
	m.restartC.WithLabelValues(source)
	m.errorC.WithLabelValues(source)
}

func (m *runnerMetrics) setUp(source, kind string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.up.WithLabelValues(source, kind).Set(v)
}

func (m *runnerMetrics) restarts(source string) { m.restartC.WithLabelValues(source).Inc() }
func (m *runnerMetrics) failed(source string)   { m.errorC.WithLabelValues(source).Inc() }
