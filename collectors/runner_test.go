package collectors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/leasewatch/leasewatch/audit"
)

// nopSink accepts everything; the runner only passes it through.
type nopSink struct{}

func (nopSink) Record(context.Context, audit.Input) error { return nil }
func (nopSink) Cursor(string) (string, time.Time)         { return "", time.Time{} }

// scripted is a real Collector whose behaviour per run is chosen by the test:
// run i executes steps[i], and runs past the end repeat the last step.
type scripted struct {
	name  string
	steps []func(ctx context.Context, ready func()) error

	mu     sync.Mutex
	starts []time.Time
}

func (s *scripted) Name() string           { return s.name }
func (s *scripted) Kind() audit.SourceKind { return audit.KindEtcd }

func (s *scripted) Run(ctx context.Context, _ Sink, ready func()) error {
	s.mu.Lock()
	i := len(s.starts)
	s.starts = append(s.starts, time.Now())
	s.mu.Unlock()
	if i >= len(s.steps) {
		i = len(s.steps) - 1
	}
	return s.steps[i](ctx, ready)
}

func (s *scripted) runs() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.starts...)
}

func fail(msg string) func(context.Context, func()) error {
	return func(context.Context, func()) error { return errors.New(msg) }
}

// stayUp reports ready and runs until shutdown, as a healthy collector does.
func stayUp(ctx context.Context, ready func()) error {
	ready()
	<-ctx.Done()
	return nil
}

// failTimes fails n times, then stays up.
func failTimes(n int, msg string) []func(context.Context, func()) error {
	steps := make([]func(context.Context, func()) error, 0, n+1)
	for i := 0; i < n; i++ {
		steps = append(steps, fail(fmt.Sprintf("%s %d", msg, i+1)))
	}
	return append(steps, stayUp)
}

// delays records the restart delays the runner asks for without sleeping.
type delays struct {
	mu sync.Mutex
	d  []time.Duration
}

func (d *delays) wait(ctx context.Context, dur time.Duration) bool {
	d.mu.Lock()
	d.d = append(d.d, dur)
	d.mu.Unlock()
	return ctx.Err() == nil
}

func (d *delays) get() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Duration(nil), d.d...)
}

// fakeClock is a settable clock for state timestamps and the backoff reset.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// start runs r in the background and returns a function that stops it and
// waits for Run to return.
func start(t *testing.T, r *Runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		r.Run(ctx)
		close(done)
	}()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Runner.Run did not return within 5s of cancel")
		}
	}
	t.Cleanup(stop)
	return stop
}

func source(t *testing.T, r *Runner, name string) audit.Source {
	t.Helper()
	for _, s := range r.Sources() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no source %q in %+v", name, r.Sources())
	return audit.Source{}
}

func TestBackoff(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name     string
		min, max time.Duration
		attempt  int
		jitter   float64
		want     time.Duration
	}{
		{"FirstWithoutJitter", 500 * ms, 30 * time.Second, 0, 0, 250 * ms},
		{"FirstFullJitter", 500 * ms, 30 * time.Second, 0, 0.5, 375 * ms},
		{"Doubles", 500 * ms, 30 * time.Second, 3, 0, 2 * time.Second},
		{"CappedAtMax", 500 * ms, 30 * time.Second, 7, 0, 15 * time.Second},
		{"CapHoldsForHugeAttempts", 500 * ms, 30 * time.Second, 10_000, 0.999, 30*time.Second - 15*ms},
		{"NegativeJitterClamped", 500 * ms, 30 * time.Second, 0, -1, 250 * ms},
		{"JitterOneStaysBelowBase", 2 * ms, 2 * ms, 0, 1, 2*ms - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Backoff(tt.min, tt.max, tt.attempt, tt.jitter)
			if d := got - tt.want; d < -time.Microsecond || d > time.Microsecond {
				t.Fatalf("Backoff(%s, %s, %d, %v) = %s, want %s", tt.min, tt.max, tt.attempt, tt.jitter, got, tt.want)
			}
			if got >= tt.max && tt.max > 0 {
				t.Fatalf("Backoff = %s, not below the cap %s", got, tt.max)
			}
		})
	}
}

func TestRunnerRestartsUntilUp(t *testing.T) {
	c := &scripted{name: "flaky", steps: failTimes(3, "dial refused")}
	reg := prometheus.NewRegistry()
	r, err := NewRunner(nopSink{}, []Collector{c}, RunnerConfig{
		Registerer: reg, MinBackoff: 4 * time.Millisecond, MaxBackoff: 16 * time.Millisecond,
		Jitter: func() float64 { return 0.5 },
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	eventually(t, 5*time.Second, "source up after 3 failures", func() bool { return source(t, r, "flaky").State == audit.SourceUp })

	runs := c.runs()
	if len(runs) != 4 {
		t.Fatalf("collector ran %d times, want 4 (3 failures, then up)", len(runs))
	}
	// Real sleeps: each gap is at least the jittered delay (3ms, 6ms, 12ms).
	for i, min := range []time.Duration{3 * time.Millisecond, 6 * time.Millisecond, 12 * time.Millisecond} {
		if gap := runs[i+1].Sub(runs[i]); gap < min {
			t.Errorf("restart %d came %s after the failure, want >= %s", i+1, gap, min)
		}
	}
	s := source(t, r, "flaky")
	if !s.BlindSince.IsZero() {
		t.Errorf("BlindSince = %s while up, want zero", s.BlindSince)
	}
	if s.Error != "dial refused 3" {
		t.Errorf("Error = %q, want the last failure %q", s.Error, "dial refused 3")
	}
	for _, m := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"leasewatch_collector_errors_total", map[string]string{"source": "flaky"}, 3},
		{"leasewatch_collector_restarts_total", map[string]string{"source": "flaky"}, 3},
		{"leasewatch_collector_up", map[string]string{"source": "flaky", "kind": "etcd"}, 1},
	} {
		if got := metricValue(t, reg, m.name, m.labels); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
}

// metricValue gathers reg and returns the value of the one series of name
// with exactly labels. It fails the test if there is no such series.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !sameLabels(m.GetLabel(), labels) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s%v gathered", name, labels)
	return 0
}

func sameLabels(got []*dto.LabelPair, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, l := range got {
		if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
			return false
		}
	}
	return true
}

func TestRunnerBackoffCapped(t *testing.T) {
	c := &scripted{name: "broken", steps: []func(context.Context, func()) error{fail("no leader")}}
	d := &delays{}
	r, err := NewRunner(nopSink{}, []Collector{c}, RunnerConfig{
		MinBackoff: 2 * time.Millisecond, MaxBackoff: 16 * time.Millisecond,
		Jitter: func() float64 { return 0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	r.wait = d.wait
	stop := start(t, r)
	eventually(t, 5*time.Second, "7 restart delays", func() bool { return len(d.get()) >= 7 })
	stop()

	const ms = time.Millisecond
	want := []time.Duration{1 * ms, 2 * ms, 4 * ms, 8 * ms, 8 * ms, 8 * ms, 8 * ms}
	got := d.get()[:len(want)]
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("restart delays = %v, want %v (doubling from min, capped at max)", got, want)
		}
	}
}

func TestRunnerBackoffResetsAfterStayingUp(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	c := &scripted{name: "etcd", steps: []func(context.Context, func()) error{
		fail("first"),
		fail("second"),
		func(ctx context.Context, ready func()) error {
			ready()
			clock.Advance(2 * time.Minute) // up well past ResetAfter
			return errors.New("watch closed")
		},
		fail("third"),
		stayUp,
	}}
	d := &delays{}
	r, err := NewRunner(nopSink{}, []Collector{c}, RunnerConfig{
		MinBackoff: 2 * time.Millisecond, MaxBackoff: time.Second, ResetAfter: time.Minute,
		Now: clock.Now, Jitter: func() float64 { return 0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	r.wait = d.wait
	start(t, r)
	eventually(t, 5*time.Second, "source up on the fifth run", func() bool {
		return len(c.runs()) == 5 && source(t, r, "etcd").State == audit.SourceUp
	})
	const ms = time.Millisecond
	want := []time.Duration{1 * ms, 2 * ms, 1 * ms, 2 * ms}
	got := d.get()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("restart delays = %v, want %v (the run that stayed up resets the backoff)", got, want)
	}
}

func TestRunnerStateTransitions(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	t0 := clock.Now()
	fails := make(chan error)
	readyNow := make(chan struct{})
	c := &scripted{name: "prod-etcd", steps: []func(context.Context, func()) error{
		func(ctx context.Context, ready func()) error {
			select {
			case <-readyNow:
			case <-ctx.Done():
				return nil
			}
			ready()
			select {
			case err := <-fails:
				return err
			case <-ctx.Done():
				return nil
			}
		},
		stayUp,
	}}
	d := &delays{}
	r, err := NewRunner(nopSink{}, []Collector{c}, RunnerConfig{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	r.wait = d.wait
	stop := start(t, r)

	eventually(t, 5*time.Second, "first run", func() bool { return len(c.runs()) == 1 })
	s := source(t, r, "prod-etcd")
	if s.State != audit.SourceDown || !s.BlindSince.Equal(t0) || s.Kind != audit.KindEtcd {
		t.Fatalf("before ready: %+v, want down since %s", s, t0)
	}

	clock.Advance(time.Second)
	close(readyNow)
	eventually(t, 5*time.Second, "up after ready", func() bool { return source(t, r, "prod-etcd").State == audit.SourceUp })
	if s := source(t, r, "prod-etcd"); !s.BlindSince.IsZero() || s.Error != "" {
		t.Fatalf("after ready: %+v, want up with no BlindSince and no error", s)
	}

	clock.Advance(time.Second)
	failedAt := clock.Now()
	// Freeze the restart so the down state can be inspected.
	block := make(chan struct{})
	r.wait = func(ctx context.Context, _ time.Duration) bool {
		select {
		case <-block:
			return true
		case <-ctx.Done():
			return false
		}
	}
	fails <- errors.New("etcdserver: no leader")
	eventually(t, 5*time.Second, "down after failure", func() bool { return source(t, r, "prod-etcd").State == audit.SourceDown })
	s = source(t, r, "prod-etcd")
	if !s.BlindSince.Equal(failedAt) || s.Error != "etcdserver: no leader" {
		t.Fatalf("after failure: %+v, want down since %s with the error", s, failedAt)
	}

	close(block)
	eventually(t, 5*time.Second, "up after restart", func() bool { return source(t, r, "prod-etcd").State == audit.SourceUp })

	stop()
	if s := source(t, r, "prod-etcd"); s.State != audit.SourceDown {
		t.Fatalf("after shutdown: state %q, want down", s.State)
	}
	if n := len(c.runs()); n != 2 {
		t.Fatalf("collector ran %d times, want 2", n)
	}
}

func TestRunnerStopsOnCancel(t *testing.T) {
	t.Run("WhileRunning", func(t *testing.T) {
		c := &scripted{name: "a", steps: []func(context.Context, func()) error{stayUp}}
		r, err := NewRunner(nopSink{}, []Collector{c}, RunnerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		stop := start(t, r)
		eventually(t, 5*time.Second, "up", func() bool { return source(t, r, "a").State == audit.SourceUp })
		stop() // fails the test if Run does not return
		if n := len(c.runs()); n != 1 {
			t.Fatalf("collector ran %d times, want 1: a clean shutdown is not a failure", n)
		}
	})
	t.Run("DuringBackoff", func(t *testing.T) {
		c := &scripted{name: "b", steps: []func(context.Context, func()) error{fail("boom")}}
		r, err := NewRunner(nopSink{}, []Collector{c}, RunnerConfig{MinBackoff: time.Hour, MaxBackoff: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		stop := start(t, r)
		eventually(t, 5*time.Second, "first failure", func() bool { return source(t, r, "b").Error == "boom" })
		stop() // an hour-long backoff must not hold up shutdown
		if n := len(c.runs()); n != 1 {
			t.Fatalf("collector ran %d times, want 1", n)
		}
	})
}

func TestRunnerRunsCollectorsIndependently(t *testing.T) {
	good := &scripted{name: "good", steps: []func(context.Context, func()) error{stayUp}}
	panicky := &scripted{name: "panicky", steps: []func(context.Context, func()) error{
		func(context.Context, func()) error { panic("nil map") },
		stayUp,
	}}
	reg := prometheus.NewRegistry()
	r, err := NewRunner(nopSink{}, []Collector{good, panicky}, RunnerConfig{Registerer: reg, MinBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	eventually(t, 5*time.Second, "both up", func() bool {
		return source(t, r, "good").State == audit.SourceUp && source(t, r, "panicky").State == audit.SourceUp
	})
	if got := source(t, r, "panicky").Error; !strings.Contains(got, "panicked: nil map") {
		t.Fatalf("Error = %q, want the recovered panic", got)
	}
	if n := len(good.runs()); n != 1 {
		t.Fatalf("healthy collector ran %d times, want 1", n)
	}
	if got := metricValue(t, reg, "leasewatch_collector_errors_total", map[string]string{"source": "panicky"}); got != 1 {
		t.Fatalf("errors_total{panicky} = %v, want 1", got)
	}
	names := []string{}
	for _, s := range r.Sources() {
		names = append(names, s.Name)
	}
	if fmt.Sprint(names) != "[good panicky]" {
		t.Fatalf("Sources order = %v, want the configured order [good panicky]", names)
	}
}

func TestNewRunnerRejects(t *testing.T) {
	a := &scripted{name: "same", steps: []func(context.Context, func()) error{stayUp}}
	b := &scripted{name: "same", steps: []func(context.Context, func()) error{stayUp}}
	if _, err := NewRunner(nopSink{}, []Collector{a, b}, RunnerConfig{}); err == nil || !strings.Contains(err.Error(), `"same"`) {
		t.Fatalf("duplicate names: err = %v, want one naming the duplicate", err)
	}
	reg := prometheus.NewRegistry()
	if _, err := NewRunner(nopSink{}, []Collector{a}, RunnerConfig{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRunner(nopSink{}, []Collector{a}, RunnerConfig{Registerer: reg}); err == nil {
		t.Fatal("registering the metrics twice succeeded, want an error")
	}
}

// degrading is a collector that reports seeing its backend less well.
type degrading struct {
	scripted
	reason string
}

func (d *degrading) Degraded() string { return d.reason }

func TestRunnerReportsDegradedCollectors(t *testing.T) {
	plain := &scripted{name: "plain", steps: []func(context.Context, func()) error{stayUp}}
	polled := &degrading{scripted: scripted{name: "polled", steps: []func(context.Context, func()) error{stayUp}}, reason: "CONFIG is not permitted: polling"}
	r, err := NewRunner(nopSink{}, []Collector{plain, polled}, RunnerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	eventually(t, 5*time.Second, "both collectors up", func() bool {
		return source(t, r, "plain").State == audit.SourceUp && source(t, r, "polled").State == audit.SourceUp
	})
	if got := source(t, r, "polled").Degraded; got != polled.reason {
		t.Fatalf("polled.Degraded = %q, want %q", got, polled.reason)
	}
	if got := source(t, r, "plain").Degraded; got != "" {
		t.Fatalf("plain.Degraded = %q, want empty", got)
	}
}

// A gated runner runs a collector only while its source is owned: standby
// (not down, not blind) before, a run from Own, stopped at once by Disown,
// a new run when owned again, and Own of a source it does not have refused.
func TestRunnerGatedRunsOnlyWhileOwned(t *testing.T) {
	stopped := make(chan struct{}, 4)
	c := &scripted{name: "a", steps: []func(context.Context, func()) error{func(ctx context.Context, ready func()) error {
		ready()
		<-ctx.Done()
		stopped <- struct{}{}
		return nil
	}}}
	other := &scripted{name: "b", steps: []func(context.Context, func()) error{stayUp}}
	r, err := NewRunner(nopSink{}, []Collector{c, other}, RunnerConfig{Gated: true})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	for _, name := range []string{"a", "b"} {
		if s := source(t, r, name); s.State != audit.SourceStandby || !s.BlindSince.IsZero() {
			t.Fatalf("source %s before Own = %+v, want standby and not blind", name, s)
		}
	}
	if r.Own("nope") {
		t.Error("Own of an unknown source = true")
	}

	if !r.Own("a") {
		t.Fatal("Own(a) = false")
	}
	r.Own("a") // owning again changes nothing
	eventually(t, 5*time.Second, "a up", func() bool { return source(t, r, "a").State == audit.SourceUp })
	if n := len(c.runs()); n != 1 {
		t.Fatalf("a ran %d times after two Owns, want 1", n)
	}
	if s := source(t, r, "b"); s.State != audit.SourceStandby || len(other.runs()) != 0 {
		t.Fatalf("b while only a is owned = %+v after %d runs, want standby, never run", s, len(other.runs()))
	}

	r.Disown("a")
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("a's run did not end within 5s of Disown")
	}
	eventually(t, 5*time.Second, "a standby", func() bool { return source(t, r, "a").State == audit.SourceStandby })

	r.Own("a")
	eventually(t, 5*time.Second, "a up again", func() bool { return source(t, r, "a").State == audit.SourceUp })
	if n := len(c.runs()); n != 2 {
		t.Fatalf("a ran %d times, want 2: one per ownership", n)
	}
}
